package payouts_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers/sim"
)

// REVIEW (holds), FAILING: a payout under the retry policy. Attempt 1 is
// failed by "not found" past the window and its reserve is CARRIED to
// attempt 2 (payout_reserve_carry, no release under attempt 1's id).
// Attempt 2 then fails too and ITS failure releases the payout's reserve
// into available (payout_release, cause id = attempt 2). Then the provider
// reports attempt 1 paid after all (paid_after_failure).
//
// What is wrong: payouts.Service.DivergenceHold holds only when a
// payout_release exists with cause id = the diverged attempt (attempt 1).
// Here the release was posted under attempt 2's id, so nothing is held: the
// merchant's available balance still shows the 10.00 that left, and the
// merchant can pay it out a second time (R9, R22: money freed while the
// provider has paid it). The audit's holds/hold_exceeds has the same blind
// spot (it requires the release under the diverged attempt's id), so verify
// is clean too.
//
// Why it matters: money, the exact case holds were built for (a payout paid
// after saldo released its reserve), reached through the retry policy.
//
// Fix: in DivergenceHold, decide "released" per payout, not per attempt:
// the payout's reserve was released (a payout_release of ANY attempt of the
// payout, and no open attempt still holds the carried reserve) -> hold the
// payout's amount. Adjust holdExceedsSQL the same way (release of any
// attempt of the subject).
func TestReviewHolds_PayoutPaidAfterFailureHoldsWhenALaterAttemptReleasedTheReserve_R9_R22(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	e.withRetry(payouts.RetryPolicy{MaxAttempts: 2, Within: 24 * time.Hour, Backoff: 30 * time.Second})
	p, first, _ := e.secondAttemptSentIntoOutage()
	require.Equal(t, attempts.StatusFailed, e.resolveAfter(e.get(p).Payout, time.Hour).Attempt.Status)
	require.Equal(t, payouts.StatusFailed, e.get(p).Status, "no attempt 3: the payout failed, its reserve released")
	avail, reserved := e.balances()
	require.Equal(t, "100.00", avail)
	require.Equal(t, "0.00", reserved)

	e.lateSuccess(first, "10.00") // attempt 1 paid after all
	t.Cleanup(func() { e.settleDivergence(first) })

	avail, _ = e.balances()
	require.Equal(t, "10.00", e.heldOf(merchant), "the 10.00 that left must be held (it was released by attempt 2)")
	require.Equal(t, "90.00", avail, "available must not show the money the provider paid")
}

// REVIEW (holds), FAILING: the same gap in the other order, the one the
// existing outageThenDivergence helper builds: attempt 1 diverges while
// attempt 2 (carried reserve, sent into the outage) is open, so nothing is
// held (correct at that moment: the reserve is still reserved). Then the
// resolver fails attempt 2 by "not found" past the window: its release puts
// the 10.00 back into available, and nothing holds it, although the
// divergence is open and says the money left. The runbook tells the
// operator to fail such an attempt only "once you have booked what
// happened", but here the resolver does it by itself.
//
// Fix: when a payout's reserve is released (payout_release) while an
// attempt of that payout has an open paid_after_failure divergence whose
// hold holds nothing, post the hold then (in the release's transaction:
// available -> held for the released amount), or release into held instead
// of available.
func TestReviewHolds_PayoutReleaseAfterSiblingDivergenceIsHeld_R9_R22(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	p, _, second := outageThenDivergence(t, e,
		payouts.RetryPolicy{MaxAttempts: 3, Within: 24 * time.Hour, Backoff: 30 * time.Second})
	rr := e.resolveAfter(e.get(p).Payout, time.Hour)
	require.Equal(t, second.ID, rr.Attempt.ID)
	require.Equal(t, attempts.StatusFailed, rr.Attempt.Status)
	first := e.firstAttemptOf(p)
	t.Cleanup(func() { e.settleDivergence(first) })

	avail, reserved := e.balances()
	require.Equal(t, "0.00", reserved)
	require.Equal(t, "10.00", e.heldOf(merchant), "attempt 1 paid 10.00: once the reserve is released it must be held")
	require.Equal(t, "90.00", avail)
}

func (e *env) firstAttemptOf(p payouts.Payout) attempts.Attempt {
	e.t.Helper()
	var id uuid.UUID
	require.NoError(e.t, e.pool.QueryRow(e.ctx, `SELECT id FROM attempts WHERE subject_id = $1 AND diverged_at IS NOT NULL`, p.ID).Scan(&id))
	a, err := e.att.Get(e.ctx, e.pool, id)
	require.NoError(e.t, err)
	return a
}
