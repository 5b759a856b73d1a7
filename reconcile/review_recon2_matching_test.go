package reconcile_test

// Hostile review (branch rv-seal, area recon2) of the reconciliation fixes
// of 2026-12-05. Each FINDING test FAILS on the code it was written against
// and names the behaviour that should hold.

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/reconcile"
)

// FINDING (high, R19): one provider operation listed twice with different
// amounts (the same provider id: 14.00, then 90.00) is reconciled on its
// first line only; the contradicting second line is dropped without a word.
//
// ledgerTotals now counts an operation once (counted[opKey]) and takes the
// FIRST line's amount; matchGroup takes the first own line as "the line
// that speaks for the operation" (moved[0] / the first with ownID) and only
// compares that one with the attempt. The 90.00 line thus reaches neither
// the totals nor the mismatch check: the run is clean, while the provider's
// own statement says 90.00 left under saldo's reference (76.00 more than
// saldo settled). Listed in the other order (90.00 first) the same statement
// IS an amount_mismatch and a ledger_totals difference: whether a
// discrepancy is reported depends on the order of the provider's lines.
//
// Fix: dedupe repeated lines of one operation only when they agree (same
// amount, currency, state); lines of one provider id that disagree are a
// divergence of their own (amount_mismatch naming both lines, or a
// dedicated kind), and the totals should not pick one silently.
func TestRepeatedOperationWithAnotherAmountIsADivergence_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.paid("14.00")
	require.NotEmpty(t, a.ProviderID)
	// The statement lists the same operation (same provider id, same
	// reference) again, this time with another amount.
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: a.Reference, ID: a.ProviderID,
		Operation: providers.OpPixTransfer, Amount: "90.00", Currency: "BRL", At: day.Add(15 * time.Hour)}))
	e.clock.Set(day.Add(51 * time.Hour))
	e.run()
	var found []string
	for _, d := range e.all() {
		found = append(found, string(d.Kind)+": "+d.Detail)
	}
	require.NotEmpty(t, found, "the statement says operation %s moved 14.00 and 90.00; the run reported nothing", a.ProviderID)
}

// FINDING (critical, R9/R19): an open attempt's second operation never
// reaches the attempts core when the attempt's own line is refused (its
// amount differs: amount_mismatch, the attempt goes to review).
//
// matchGroup stores the double_payment of the copy (detail: the attempt "is
// resolved by this statement", which it is not) and then returns at
// `if field != ""` before reportExtras: the second operation is handed to
// the core only when report() of the own line resolves the attempt. Here it
// never does: the attempt waits in review until an operator resolves it by
// hand, and no later run of the day hands it over (the daily job runs a day
// once; a re-run with the same statement takes the succeeded branch only if
// the recorded provider id is the own line's). The merchant was paid twice
// and the attempt carries no second_operation: no hold on the merchant's
// available money (holds follow the attempts core's divergences), no
// *.diverged, attempts.Verify clean.
//
// Fix: when the own line's report is refused, still record each extra
// operation on the attempt (a second_operation note the core accepts on an
// open attempt, or a pending note applied when the attempt is resolved),
// and do not word the double_payment as "resolved by this statement".
func TestOpenAttemptsSecondOperationReachesTheCoreWhenItsOwnLineMismatches_R9_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, unknown := e.withFault("14.00", sim.FaultErrorAfter)
	require.Equal(t, attempts.StatusUnknown, unknown.Status)
	// The own operation is listed with another amount, and a copy of it
	// under another id (the copy takes the lied amount too).
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAmount, Reference: unknown.Reference, Amount: "15.00"}))
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieDuplicate, Reference: unknown.Reference}))
	e.clock.Set(day.Add(51 * time.Hour))
	e.run()
	ks := byKind(e.all())
	require.Len(t, ks[reconcile.KindDoublePayment], 1, "the run saw the double payment")
	require.Len(t, ks[reconcile.KindAmountMismatch], 1, "and the mismatch")

	a, err := e.att.Get(e.ctx, e.pool, unknown.ID)
	require.NoError(t, err)
	require.True(t, a.Status.Open(), "the mismatch kept the attempt open (%s)", a.Status)
	dupID := ks[reconcile.KindDoublePayment][0].ProviderID
	require.NotEmpty(t, dupID)
	evs, err := e.att.Events(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	var second bool
	for _, ev := range evs {
		b, err := json.Marshal(ev)
		require.NoError(t, err)
		if containsAny(string(b), dupID) {
			second = true
		}
	}
	require.True(t, second, "the second operation %s (a double payment) is recorded nowhere on the attempt: "+
		"only the reconcile row knows (%d events)", dupID, len(evs))
}

func containsAny(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
