package reconcile_test

import (
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/reconcile"
)

// R19: one provider operation listed with 14.00 and 90.00 is the same
// finding whatever the order of the lines: the statement's contradiction
// (amount_mismatch naming both lines), the attempt's mismatch and the
// totals, which count both amounts.
func TestRepeatedOperationWithAnotherAmountDoesNotDependOnLineOrder_R19(t *testing.T) {
	t.Parallel()
	seen := func(ninetyFirst bool) ([]string, []reconcile.Totals, []reconcile.Divergence) {
		e := setup(t)
		a := e.paid("14.00")
		if ninetyFirst {
			require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAmount, Reference: a.Reference, Amount: "90.00"}))
			require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: a.Reference, ID: a.ProviderID,
				Operation: providers.OpPixTransfer, Amount: "14.00", Currency: "BRL", At: day.Add(15 * time.Hour)}))
		} else {
			require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: a.Reference, ID: a.ProviderID,
				Operation: providers.OpPixTransfer, Amount: "90.00", Currency: "BRL", At: day.Add(15 * time.Hour)}))
		}
		e.clock.Set(day.Add(51 * time.Hour))
		r := e.run()
		var out []string
		all := e.all()
		for _, d := range all {
			out = append(out, string(d.Kind)+"|"+d.ProviderID)
		}
		sort.Strings(out)
		return out, r.Totals, all
	}
	first, firstTotals, all := seen(false)
	second, secondTotals, _ := seen(true)
	require.Equal(t, first, second, "the same statement in another line order")
	require.Equal(t, firstTotals, secondTotals)
	ks := byKind(all)
	require.Len(t, ks[reconcile.KindAmountMismatch], 2, "the statement's contradiction and the attempt's mismatch")
	var named bool
	for _, d := range ks[reconcile.KindAmountMismatch] {
		if containsAny(d.Detail, "14.00") && containsAny(d.Detail, "90.00") {
			named = true
		}
	}
	require.True(t, named, "one row names both lines")
	require.Len(t, ks[reconcile.KindLedgerTotals], 1)
	require.Equal(t, "104", firstTotals[0].Statement, "each amount counted, neither picked")
}

// R19: an operation listed twice alike (a page repeated) is one operation:
// no divergence, counted once.
func TestRepeatedOperationListedAlikeIsOneOperation_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.paid("14.00")
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: a.Reference, ID: a.ProviderID,
		Operation: providers.OpPixTransfer, Amount: "14.0", Currency: "brl", At: day.Add(15 * time.Hour)}))
	e.clock.Set(day.Add(51 * time.Hour))
	r := e.run()
	require.Empty(t, e.all())
	require.Equal(t, "14", r.Totals[0].Statement)
}

// R19: an open attempt whose operation the statement lists succeeded and
// failed is not resolved by it: the contradiction is reported, the attempt
// stays open.
func TestOpenAttemptIsNotResolvedByAContradictingStatement_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, unknown := e.withFault("14.00", sim.FaultErrorAfter)
	require.Equal(t, attempts.StatusUnknown, unknown.Status)
	e.clock.Set(day.Add(51 * time.Hour))
	// The own line first, to learn its id, then the same id listed failed.
	stmt, err := e.prov.Statement(e.ctx, day)
	require.NoError(t, err)
	var id string
	for _, l := range stmt {
		if l.Reference == unknown.Reference {
			id = l.ProviderID
		}
	}
	require.NotEmpty(t, id)
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: unknown.Reference, ID: id,
		Operation: providers.OpPixTransfer, Amount: "14.00", Currency: "BRL", State: providers.StateFailed, At: day.Add(15 * time.Hour)}))
	e.run()
	ks := byKind(e.all())
	require.Len(t, ks[reconcile.KindAmountMismatch], 1, "the contradiction")
	require.Empty(t, ks[reconcile.KindResolved])
	a, err := e.att.Get(e.ctx, e.pool, unknown.ID)
	require.NoError(t, err)
	require.True(t, a.Status.Open(), "%s", a.Status)
}

// R9, R19: the second operation noted on an open attempt whose own line was
// refused becomes its second_operation divergence when an operator resolves
// the attempt succeeded.
func TestOpenAttemptsSecondOperationIsItsDivergenceOnceItSucceeds_R9_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, unknown := e.withFault("14.00", sim.FaultErrorAfter)
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAmount, Reference: unknown.Reference, Amount: "15.00"}))
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieDuplicate, Reference: unknown.Reference}))
	e.clock.Set(day.Add(51 * time.Hour))
	e.run()
	dup := byKind(e.all())[reconcile.KindDoublePayment]
	require.Len(t, dup, 1)
	require.NotContains(t, dup[0].Detail, "resolved by this statement")
	a, err := e.att.Get(e.ctx, e.pool, unknown.ID)
	require.NoError(t, err)
	require.Nil(t, a.DivergedAt)

	res, err := e.att.ResolveManually(e.ctx, unknown.ID, attempts.StatusSucceeded, "op1", "the provider confirms 14.00 left", nil)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, res.Attempt.Status)
	a, err = e.att.Get(e.ctx, e.pool, unknown.ID)
	require.NoError(t, err)
	require.NotNil(t, a.DivergedAt, "the second operation %s is a divergence", dup[0].ProviderID)
	require.Equal(t, attempts.DivergenceSecondOperation, a.DivergenceKind)
	require.Contains(t, a.Divergence, dup[0].ProviderID)

	// A re-run of the day adds nothing to the attempt.
	evs, err := e.att.Events(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	e.run()
	again, err := e.att.Events(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Len(t, again, len(evs))
}

// R9, R19: a second operation noted on an open attempt (NoteSecondOperation)
// becomes its divergence in the transaction that makes it final: through
// the resolver's batch (a lookup finds it succeeded: second_operation), and
// through a single transition (the provider says it failed:
// paid_after_failure, money left under a reference whose reserve went
// back). Noted twice, it is one note.
func TestSecondOperationNotedWhileOpenIsTheDivergenceWhenFinal_R9_R19(t *testing.T) {
	t.Parallel()
	note := func(e *env, a attempts.Attempt, id string) {
		for i := 0; i < 2; i++ {
			res, err := e.att.NoteSecondOperation(e.ctx, attempts.SecondOperationInput{ResolveInput: attempts.ResolveInput{
				Reference: a.Reference, Provider: e.prov.Name(), Operation: providers.OpPixTransfer, Amount: "14.00",
				Currency: "BRL", State: providers.StateSucceeded, ProviderID: id, Source: attempts.SourceReconciliation,
				Actor: "rr_test"}})
			require.NoError(t, err)
			require.True(t, res.Attempt.Status.Open())
		}
	}
	t.Run("succeeded by a lookup", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		_, unknown := e.withFault("14.00", sim.FaultErrorAfter)
		require.Equal(t, attempts.StatusUnknown, unknown.Status)
		note(e, unknown, "op_copy_1")
		evs, err := e.att.Events(e.ctx, e.pool, unknown.ID)
		require.NoError(t, err)
		var notes int
		for _, ev := range evs {
			if ev.Type == attempts.EventNote {
				notes++
			}
		}
		require.Equal(t, 1, notes, "noted once")
		e.clock.Set(day.Add(12 * time.Hour))
		res, err := e.att.Resolve(e.ctx, unknown.ID)
		require.NoError(t, err)
		require.Equal(t, attempts.StatusSucceeded, res.Attempt.Status)
		a, err := e.att.Get(e.ctx, e.pool, unknown.ID)
		require.NoError(t, err)
		require.NotNil(t, a.DivergedAt)
		require.Equal(t, attempts.DivergenceSecondOperation, a.DivergenceKind)
		require.Contains(t, a.Divergence, "op_copy_1")
		require.Equal(t, 1, e.settles(a), "settled once: nothing moved for the copy")
	})
	t.Run("failed by a webhook", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		_, unknown := e.withFault("14.00", sim.FaultErrorAfter)
		note(e, unknown, "op_copy_2")
		res, err := e.att.ResolveByReference(e.ctx, attempts.ResolveInput{Reference: unknown.Reference, Provider: e.prov.Name(),
			State: providers.StateFailed, Source: attempts.SourceWebhook, Actor: "evt_1"})
		require.NoError(t, err)
		require.Equal(t, attempts.StatusFailed, res.Attempt.Status)
		a, err := e.att.Get(e.ctx, e.pool, unknown.ID)
		require.NoError(t, err)
		require.NotNil(t, a.DivergedAt)
		require.Equal(t, attempts.DivergencePaidAfterFailure, a.DivergenceKind)
		require.Contains(t, a.Divergence, "op_copy_2")
	})
}
