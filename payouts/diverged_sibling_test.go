package payouts_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// lateSuccess is the provider's webhook saying the attempt a paid after
// saldo resolved it failed by "not found" (R16's accepted risk): what
// api.Server.webhook does with it.
func (e *env) lateSuccess(a attempts.Attempt, amount string) {
	_, err := e.att.ResolveByReference(e.ctx, attempts.ResolveInput{Reference: a.Reference, Provider: a.Provider,
		Operation: providers.Operation(a.Operation), Amount: amount, Currency: "BRL", State: providers.StateSucceeded,
		ProviderID: "late_op_1", Source: attempts.SourceWebhook, Actor: "evt_late_1"})
	require.NoError(e.t, err)
	got, err := e.att.Get(e.ctx, e.pool, a.ID)
	require.NoError(e.t, err)
	require.NotNil(e.t, got.DivergedAt, "saldo knows the failed attempt paid (divergence)")
}

// settleDivergence lets the cleanup audit run on what the test shows.
func (e *env) settleDivergence(a attempts.Attempt) {
	_, err := e.att.SettleDivergence(e.ctx, a.ID, "op_review", "review test: double payment shown", attempts.HoldBook)
	require.NoError(e.t, err)
}

// R6, R9, R19: the retry policy opened attempt 2 (new key) after attempt 1
// was failed by "not found" past the window. Before attempt 2's first call
// (its backoff), the provider's webhook says attempt 1 paid: a divergence.
// Attempt 2 exists only because attempt 1 was thought failed (R6); sending
// it would pay the recipient twice although saldo knew, before sending,
// that the first payment went through. It must not be sent.
func TestLateSuccessStopsTheSuccessorAttempt_R6_R9_R19(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	e.withRetry(payouts.RetryPolicy{MaxAttempts: 3, Within: 24 * time.Hour, Backoff: 30 * time.Second})
	p, err := e.svc.CreatePayout(e.ctx, e.pix("10.00"))
	require.NoError(t, err)
	first := e.attempt(p)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: first.Reference}))
	require.Equal(t, attempts.StatusUnknown, e.execute(p).Status)
	require.Equal(t, attempts.StatusFailed, e.resolveAfter(p, time.Hour).Attempt.Status)
	second := e.attempt(e.get(p).Payout)
	require.Equal(t, attempts.StatusPending, second.Status)
	require.Zero(t, second.CallCount, "attempt 2 has not been sent yet (backoff)")

	e.lateSuccess(first, "10.00")
	require.True(t, e.get(p).NeedsAttention)
	t.Cleanup(func() { e.settleDivergence(first) })

	e.clock.Advance(time.Minute) // past the backoff
	r, err := e.att.Execute(e.ctx, second.ID)
	require.NoError(t, err)
	require.False(t, r.Sent, "attempt 2 must not be sent once the provider said attempt 1 paid (double payment)")
	require.Zero(t, e.opsFor(second), "the provider paid the payout a second time")
}

// R9, R19, R22: the divergence's own transaction puts the subject's unsent
// attempt in review: the payout shows needs_attention through its current
// attempt, attempt 2 stays pending with the reserve carried to it (nothing
// freed, nothing sent), and it stays held after the divergence is settled:
// an operator decides (here: fails it, which releases the reserve once).
func TestDivergenceHoldsTheSuccessorInReview_R9_R19_R22(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	e.withRetry(payouts.RetryPolicy{MaxAttempts: 3, Within: 24 * time.Hour, Backoff: 30 * time.Second})
	p, err := e.svc.CreatePayout(e.ctx, e.pix("10.00"))
	require.NoError(t, err)
	first := e.attempt(p)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: first.Reference}))
	require.Equal(t, attempts.StatusUnknown, e.execute(p).Status)
	require.Equal(t, attempts.StatusFailed, e.resolveAfter(p, time.Hour).Attempt.Status)
	second := e.attempt(e.get(p).Payout)
	require.NotEqual(t, first.ID, second.ID)

	e.lateSuccess(first, "10.00")
	held, err := e.att.Get(e.ctx, e.pool, second.ID)
	require.NoError(t, err)
	require.True(t, held.Review, "held in review by the divergence's transaction")
	require.Contains(t, held.ReviewReason, first.ID.String())
	require.Equal(t, attempts.StatusPending, held.Status)
	v := e.get(p)
	require.True(t, v.NeedsAttention)
	require.Equal(t, payouts.StatusProcessing, v.Status)
	avail, reserved := e.balances()
	require.Equal(t, "90.00", avail, "nothing freed")
	require.Equal(t, "10.00", reserved)

	e.settleDivergence(first)
	e.clock.Advance(time.Hour)
	r, err := e.att.Execute(e.ctx, second.ID)
	require.NoError(t, err)
	require.False(t, r.Sent, "in review: an operator decides, the worker sends nothing")
	require.Zero(t, e.opsFor(second))

	_, err = e.att.ResolveManually(e.ctx, second.ID, attempts.StatusFailed, "op_1",
		"attempt 1 paid the recipient (divergence settled)", nil)
	require.NoError(t, err)
	require.Equal(t, payouts.StatusFailed, e.get(p).Status)
	require.Zero(t, e.opsFor(second))
}
