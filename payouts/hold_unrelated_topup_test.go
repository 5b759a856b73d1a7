package payouts_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/holds"
	"github.com/saldo/saldo/providers/sim"
)

// R9, R22: a merchant with 100.00 available has an unrelated payout of
// 100.00 in flight (reserved) when a payout of 10.00, failed before, is
// reported paid: the hold finds nothing available (short by 10.00). The
// unrelated payout then fails and its 100.00 goes back to available: the
// release's transaction tops the open short hold up (10.00 held, 90.00
// available; key divergence_hold:<diverged attempt>:<releasing attempt>),
// so the money in doubt cannot be paid out. Before, all 100.00 came back
// to available and the shortfall stayed for the operator. Audit clean.
func TestUnrelatedReleaseTopsUpAShortPaidAfterFailureHold_R9_R22(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	_, a := e.failedPayout("10.00")
	other, err := e.svc.CreatePayout(e.ctx, e.pix("100.00"))
	require.NoError(t, err)
	oa := e.attempt(other)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: oa.Reference}))
	require.Equal(t, attempts.StatusUnknown, e.execute(other).Status, "the unrelated payout is in flight")

	e.lateSuccess(a, "10.00")
	t.Cleanup(func() { e.settleDivergence(a) })
	avail, reserved := e.balances()
	require.Equal(t, "0.00", avail)
	require.Equal(t, "100.00", reserved)
	require.Equal(t, "0.00", e.heldOf(merchant), "nothing available to hold: short by 10.00")

	require.Equal(t, attempts.StatusFailed, e.resolveAfter(other, time.Hour).Attempt.Status)
	avail, reserved = e.balances()
	require.Equal(t, "10.00", e.heldOf(merchant), "the unrelated release fills the short hold")
	require.Equal(t, "90.00", avail)
	require.Equal(t, "0.00", reserved)
	require.Equal(t, 1, e.count(`SELECT count(*) FROM ledger_transactions WHERE idempotency_key = $1 AND cause_kind = $2
		AND cause_id = $3 AND metadata->>'released_by_attempt' = $4`,
		holds.CauseHold+":"+a.ID.String()+":"+oa.ID.String(), holds.CauseHold, a.ID.String(), oa.ID.String()))
	e.requireHoldsClean()

	// A second unrelated release finds the hold whole: nothing more held.
	_, _ = e.failedPayout("50.00")
	require.Equal(t, "10.00", e.heldOf(merchant))
	avail, _ = e.balances()
	require.Equal(t, "90.00", avail)
	e.requireHoldsClean()
}

// R9, R21, R22: a charge's 100.00 is all the merchant has available when
// an unrelated payout of 100.00 goes in flight; the charge is then
// disputed: the hold finds nothing available (short by 100.00). The
// unrelated payout fails: its release tops the dispute's hold up to the
// 100.00 in doubt, in the release's transaction; "book" (cleanup) moves it.
func TestUnrelatedReleaseTopsUpAShortDisputeHold_R9_R21_R22(t *testing.T) {
	t.Parallel()
	e, c := refundEnv(t)
	po, err := e.svc.CreatePayout(e.ctx, e.pix("500.00"))
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, e.execute(po).Status)
	other, err := e.svc.CreatePayout(e.ctx, e.pix("100.00"))
	require.NoError(t, err)
	oa := e.attempt(other)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: oa.Reference}))
	require.Equal(t, attempts.StatusUnknown, e.execute(other).Status, "the unrelated payout is in flight")

	ca := e.disputeCharge(c)
	t.Cleanup(func() { e.settleDivergence(ca) })
	avail, reserved := e.balances()
	require.Equal(t, "0.00", avail)
	require.Equal(t, "100.00", reserved)
	require.Equal(t, "0.00", e.heldOf(merchant), "nothing available to hold: short by 100.00")

	require.Equal(t, attempts.StatusFailed, e.resolveAfter(other, time.Hour).Attempt.Status)
	avail, reserved = e.balances()
	require.Equal(t, "100.00", e.heldOf(merchant), "the unrelated release fills the dispute's short hold")
	require.Equal(t, "0.00", avail)
	require.Equal(t, "0.00", reserved)
	require.Equal(t, 1, e.count(`SELECT count(*) FROM ledger_transactions WHERE idempotency_key = $1 AND cause_kind = $2 AND cause_id = $3`,
		holds.CauseHold+":"+ca.ID.String()+":"+oa.ID.String(), holds.CauseHold, ca.ID.String()))
	e.requireHoldsClean()
}
