package payouts_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers/sim"
)

// outageThenDivergence drives a payout under the retry policy to this
// point: attempt 1 hit a 503 (unknown), was failed by "not found" past the
// window and got attempt 2 (reserve carried); attempt 2 was sent into the
// same outage (503: unknown, its call recorded, so nothing holds it);
// then the provider's webhook says attempt 1 paid after all (divergence).
// Attempt 2 is left to the resolver (holdSiblings skips a sent attempt).
func outageThenDivergence(t *testing.T, e *env, r payouts.RetryPolicy) (payouts.Payout, attempts.Attempt, attempts.Attempt) {
	t.Helper()
	e.withRetry(r)
	p, first, second := e.secondAttemptSentIntoOutage()

	e.lateSuccess(first, "10.00") // attempt 1 paid after all: divergence
	sec, err := e.att.Get(e.ctx, e.pool, second.ID)
	require.NoError(t, err)
	require.False(t, sec.Review, "attempt 2 was sent: left to the resolver")
	return p, first, sec
}

// R6, R9, R19: once the provider reported attempt 1 paid (a divergence),
// the payout has been paid: Service.Retry refuses a new attempt "settled or
// not" (TestRetryRefusedForDivergedPayout_R6_R9), and so does the retry
// policy. Here attempt 2 (sent before the divergence was known, so not
// held) is failed by "not found" past the window: no attempt 3 is opened,
// so settling the divergence later can send nothing that would pay the
// recipient a second time.
func TestRetryPolicyOpensNoSuccessorAfterADivergence_R6_R9(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	p, first, second := outageThenDivergence(t, e,
		payouts.RetryPolicy{MaxAttempts: 3, Within: 24 * time.Hour, Backoff: 30 * time.Second})

	rr := e.resolveAfter(e.get(p).Payout, time.Hour)
	require.Equal(t, second.ID, rr.Attempt.ID)
	require.Equal(t, attempts.StatusFailed, rr.Attempt.Status)
	require.Equal(t, attempts.FailureNotFound, rr.Attempt.FailureCode)

	v := e.get(p)
	require.Equal(t, 2, v.AttemptCount, "no attempt 3: attempt 1 paid")
	require.Equal(t, payouts.StatusFailed, v.Status)
	require.True(t, v.NeedsAttention, "the divergence waits for an operator")
	t.Cleanup(func() { e.settleDivergence(first) })
}

// secondAttemptSentIntoOutage brings a payout of 10.00 (under the retry
// policy set before) to the point the divergence tests start from: attempt
// 1 hit a 503 (unknown) and was failed by "not found" past the window, its
// reserve carried to attempt 2, which was sent into the same outage
// (unknown, its call recorded).
func (e *env) secondAttemptSentIntoOutage() (payouts.Payout, attempts.Attempt, attempts.Attempt) {
	t := e.t
	t.Helper()
	p, err := e.svc.CreatePayout(e.ctx, e.pix("10.00"))
	require.NoError(t, err)
	first := e.attempt(p)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: first.Reference}))
	require.Equal(t, attempts.StatusUnknown, e.execute(p).Status)
	require.Equal(t, attempts.StatusFailed, e.resolveAfter(p, time.Hour).Attempt.Status)
	second := e.attempt(e.get(p).Payout)
	require.NotEqual(t, first.ID, second.ID, "the reserve was carried to attempt 2")
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: second.Reference}))
	e.clock.Advance(time.Minute) // past the backoff
	require.Equal(t, attempts.StatusUnknown, e.execute(e.get(p).Payout).Status, "attempt 2 sent into the outage")
	return p, first, second
}
