package reconcile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/reconcile"
)

// R19 (double_payment): the provider pays a second time, under the reference of an
// attempt that already succeeded, on the next day (a second operation, its
// own provider id). The next day's statement lists one successful line whose
// provider id contradicts the one the attempt recorded: a double payment
// (R19: "two money-moving provider operations for one reference"). Found by
// the reviewer: the run found nothing, because matchGroup compared the
// provider id only for open attempts, the double-payment check saw one
// day's lines only, and ledgerTotals counted the attempt's settle again on
// the second day, so the totals agreed.
func TestDoublePaymentAcrossDaysIsFound_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.paid("10.00") // paid on `day` at 10:00, op id recorded
	require.NotEmpty(t, a.ProviderID)
	next := day.AddDate(0, 0, 1)
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: a.Reference, ID: "op_second",
		Operation: providers.OpPixTransfer, Amount: "10.00", Currency: "BRL", At: next.Add(9 * time.Hour)}))
	e.clock.Set(next.Add(51 * time.Hour))
	r, err := e.rec.Run(e.ctx, e.prov.Name(), next, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(t, err)
	t.Logf("run of %s: lines %d matched %d divergences %d totals %+v", next.Format(time.DateOnly), r.StatementLines,
		r.Matched, r.Divergences, r.Totals)
	got := byKind(e.all())
	require.NotEmpty(t, got[reconcile.KindDoublePayment],
		"a second successful operation (id op_second) under the reference of a succeeded attempt (id %s) is a double payment; found %v",
		a.ProviderID, got)
}

// R19 (unknown_to_us): a statement line of provider "simb" carries the reference of an
// attempt of provider "sim" (references are matched across every provider:
// byReference had no provider condition). simb moved money that no attempt
// of simb knows, which is unknown_to_us (critical). Found by the reviewer:
// the run matched the line to sim's succeeded attempt instead and reported
// nothing (the totals agreed because sim's settle was counted for simb).
func TestReferenceOfAnotherProviderIsUnknownToUs_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.paid("10.00")
	srvB := sim.NewServer(sim.Config{Clock: e.clock.Now}).Start()
	t.Cleanup(srvB.Close)
	provB := srvB.NewProvider(sim.WithName("simb"), sim.WithHTTPSettings(providers.HTTPSettings{ConnectTimeout: time.Second,
		ReadTimeout: readTimeout}))
	require.NoError(t, srvB.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: a.Reference, ID: "b_op_1",
		Operation: providers.OpPixTransfer, Amount: "10.00", Currency: "BRL", At: day.Add(11 * time.Hour)}))
	rec, err := reconcile.New(reconcile.Config{Pool: e.pool, Attempts: e.att,
		Providers: map[string]providers.Provider{"sim": e.prov, "simb": provB}, Clock: e.clock})
	require.NoError(t, err)
	e.clock.Set(day.Add(51 * time.Hour))
	r, err := rec.Run(e.ctx, "simb", day, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(t, err)
	t.Logf("simb run: lines %d matched %d divergences %d totals %+v", r.StatementLines, r.Matched, r.Divergences, r.Totals)
	got, err := e.att.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, got.Status)
	require.NotEmpty(t, byKind(e.all())[reconcile.KindUnknownToUs],
		"simb paid under a reference no attempt of simb has: %v", e.all())
}

// R19 (double_payment): the same day, a statement whose only line under the
// reference of a succeeded attempt carries another provider id than the one
// the attempt recorded. That operation is a second payment, not the
// attempt's: a double_payment, and the attempt's own operation is missing
// at the provider. Found once across re-runs.
func TestContradictingProviderIDOfSucceededAttemptIsDoublePayment_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.paid("10.00")
	require.NotEmpty(t, a.ProviderID)
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieHide, Reference: a.Reference}))
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: a.Reference, ID: "op_other",
		Operation: providers.OpPixTransfer, Amount: "10.00", Currency: "BRL", At: day.Add(11 * time.Hour)}))
	e.clock.Set(day.Add(51 * time.Hour))
	first := e.run()
	got := byKind(e.all())
	require.Len(t, got[reconcile.KindDoublePayment], 1, "%v", got)
	dp := got[reconcile.KindDoublePayment][0]
	require.Equal(t, "op_other", dp.ProviderID)
	require.Equal(t, a.Reference, dp.Reference)
	require.Equal(t, a.ID, *dp.AttemptID)
	require.Len(t, got[reconcile.KindMissingAtProvider], 1, "its own operation %s is on no statement", a.ProviderID)
	require.Empty(t, got[reconcile.KindAmountMismatch])
	require.Equal(t, 2, first.NewDivergences, "%v", got)

	again := e.run()
	require.Zero(t, again.NewDivergences)
	require.Len(t, byKind(e.all())[reconcile.KindDoublePayment], 1)
	require.Equal(t, 1, e.settles(a), "reconciliation moves no money")
}

// R19: the second day's copy of TestDoublePaymentAcrossDaysIsFound_R19
// counts on the statement but not in the ledger (the attempt's settle
// answers its own operation, listed the day before), and a re-run of the
// second day stores nothing twice.
func TestDoublePaymentAcrossDaysLedgerTotals_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.paid("10.00")
	next := day.AddDate(0, 0, 1)
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: a.Reference, ID: "op_second",
		Operation: providers.OpPixTransfer, Amount: "10.00", Currency: "BRL", At: next.Add(9 * time.Hour)}))
	e.clock.Set(next.Add(51 * time.Hour))
	d1 := e.run()
	require.Zero(t, d1.Divergences, "the first day is honest: %v", e.all())
	r, err := e.rec.Run(e.ctx, e.prov.Name(), next, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(t, err)
	require.Equal(t, []reconcile.Totals{{Currency: "BRL", Direction: "out", Statement: "10", Ledger: "0", Lines: 1}}, r.Totals)
	got := byKind(e.all())
	require.Len(t, got[reconcile.KindDoublePayment], 1)
	require.Equal(t, "op_second", got[reconcile.KindDoublePayment][0].ProviderID)
	require.Len(t, got[reconcile.KindLedgerTotals], 1)
	require.Empty(t, got[reconcile.KindMissingAtProvider])
	r2, err := e.rec.Run(e.ctx, e.prov.Name(), next, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(t, err)
	require.Zero(t, r2.NewDivergences)
}

// R9, R19: the double payment a statement shows is the attempt's second
// operation too: the run hands it to the attempts core, which records the
// divergence (second_operation) on the succeeded attempt (review,
// needs_attention, the audit until settled), as a webhook naming it would
// have. Idempotent by the second operation's provider id: a webhook that
// named it first, and a second run, add nothing on the attempt (one note,
// one divergence, one review) and reconciliation keeps one double_payment.
func TestDoublePaymentIsTheAttemptsSecondOperationDivergence_R9_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.paid("10.00")
	b := e.paid("10.00")
	for _, x := range []attempts.Attempt{a, b} {
		require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: x.Reference, ID: "op_twice_" + x.Reference,
			Operation: providers.OpPixTransfer, Amount: "10.00", Currency: "BRL", At: day.Add(11 * time.Hour)}))
	}
	// b's second operation was reported by a webhook before the run.
	_, err := e.att.ResolveByReference(e.ctx, attempts.ResolveInput{Reference: b.Reference, Provider: e.prov.Name(),
		State: providers.StateSucceeded, ProviderID: "op_twice_" + b.Reference, Source: attempts.SourceWebhook, Actor: "evt_b"})
	require.ErrorIs(t, err, attempts.ErrProviderIDMismatch)
	bd, err := e.att.Get(e.ctx, e.pool, b.ID)
	require.NoError(t, err)
	require.NotNil(t, bd.DivergedAt)
	events := func(x attempts.Attempt) int {
		evs, err := e.att.Events(e.ctx, e.pool, x.ID)
		require.NoError(t, err)
		return len(evs)
	}
	bEvents := events(b)

	e.clock.Set(day.Add(51 * time.Hour))
	e.run()
	require.Len(t, byKind(e.all())[reconcile.KindDoublePayment], 2)
	ga, err := e.att.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, ga.Status)
	require.NotNil(t, ga.DivergedAt, "the statement's double payment is the attempt's divergence")
	require.True(t, ga.Review)
	require.Contains(t, ga.Divergence, "op_twice_"+a.Reference)
	kind, err := attempts.DivergenceKind(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.DivergenceSecondOperation, kind)
	require.Equal(t, bEvents, events(b), "the webhook recorded b's already: the run adds nothing on it")
	gb, err := e.att.Get(e.ctx, e.pool, b.ID)
	require.NoError(t, err)
	require.Equal(t, bd.DivergedAt, gb.DivergedAt)

	aEvents := events(a)
	again := e.run()
	require.Zero(t, again.NewDivergences)
	require.Equal(t, aEvents, events(a), "a second run adds nothing on the attempt")
	require.Len(t, byKind(e.all())[reconcile.KindDoublePayment], 2)
	require.Equal(t, 1, e.settles(a), "nothing moves")
	vs, err := attempts.Verify(e.ctx, e.pool)
	require.NoError(t, err)
	require.Len(t, vs, 2, "both divergences reported until settled")
}
