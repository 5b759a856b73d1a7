package payouts_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers/sim"
)

// withRetry replaces e.svc by a Service with the retry policy r, counting
// the final-status notifications it sends (by payout id).
func (e *env) withRetry(r payouts.RetryPolicy) map[string][]payouts.Status {
	var mu sync.Mutex
	finals := map[string][]payouts.Status{}
	svc, err := payouts.New(payouts.Config{Pool: e.pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock, Retry: r,
		OnFinal: func(_ context.Context, _ pgx.Tx, p payouts.Payout) error {
			mu.Lock()
			defer mu.Unlock()
			finals[p.ID] = append(finals[p.ID], p.Status)
			return nil
		}})
	require.NoError(e.t, err)
	e.svc = svc
	return finals
}

// causes lists the ledger transactions of a payout's attempts, in order.
func (e *env) causes(p payouts.Payout) []string {
	rows, err := e.pool.Query(e.ctx, `SELECT t.cause_kind FROM ledger_transactions t
		JOIN attempts a ON a.id::text = t.cause_id WHERE a.subject_id = $1 ORDER BY t.id`, p.ID)
	require.NoError(e.t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(e.t, err)
	return out
}

// Issue 20: a payout caught in a provider outage (503 before processing:
// unknown; past the consistency window the lookup proves nothing was done:
// failed) gets its next attempt by itself, with a NEW key and reference
// (R6), in the same transaction that records the failure; the reserve is
// carried to it without passing through available (R22), the payout stays
// processing and no final notification goes out; after the backoff the
// next attempt succeeds: one provider-side operation, one reserve movement
// per attempt, settled once.
func TestTransientFailureOpensNextAttemptWithReserveHeld_R6_R22(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	finals := e.withRetry(payouts.RetryPolicy{MaxAttempts: 3, Within: 24 * time.Hour, Backoff: 30 * time.Second})
	p, err := e.svc.CreatePayout(e.ctx, e.pix("10.00"))
	require.NoError(t, err)
	first := e.attempt(p)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: first.Reference}))
	require.Equal(t, attempts.StatusUnknown, e.execute(p).Status)
	rr := e.resolveAfter(p, time.Hour)
	require.Equal(t, attempts.StatusFailed, rr.Attempt.Status)
	require.Equal(t, attempts.FailureNotFound, rr.Attempt.FailureCode)

	v := e.get(p)
	require.Equal(t, payouts.StatusProcessing, v.Status, "the payout goes on")
	require.Equal(t, 2, v.AttemptCount)
	require.NotEqual(t, first.ID, *v.CurrentAttemptID)
	second := e.attempt(v.Payout)
	require.Equal(t, attempts.StatusPending, second.Status)
	require.NotEqual(t, first.IdempotencyKey, second.IdempotencyKey, "R6: a new key")
	require.NotEqual(t, first.Reference, second.Reference)
	require.NotNil(t, second.NextSendAt, "the next attempt waits out its backoff")
	av, res := e.balances()
	require.Equal(t, "90.00", av, "the reserve never went back to available")
	require.Equal(t, "10.00", res)
	require.Empty(t, finals[p.ID], "no final notification for an attempt")
	require.Equal(t, []string{payouts.CauseReserve, payouts.CauseReserveCarry}, e.causes(p))

	// Before the backoff: nothing is sent.
	r, err := e.att.Execute(e.ctx, second.ID)
	require.NoError(t, err)
	require.False(t, r.Sent)
	require.Positive(t, r.RetryIn)
	e.clock.Advance(r.RetryIn + time.Second)
	require.Equal(t, attempts.StatusSucceeded, e.execute(v.Payout).Status)

	v = e.get(p)
	require.Equal(t, payouts.StatusSucceeded, v.Status)
	require.Len(t, v.Attempts, 2, "the API shows both attempts")
	require.Equal(t, []payouts.Status{payouts.StatusSucceeded}, finals[p.ID], "one notification, for the final status")
	av, res = e.balances()
	require.Equal(t, "90.00", av)
	require.Equal(t, "0.00", res)
	require.Equal(t, []string{payouts.CauseReserve, payouts.CauseReserveCarry, payouts.CauseSettle}, e.causes(p))
	require.Empty(t, e.srv.Operations(first.Reference), "the first attempt never reached the provider")
	require.Len(t, e.srv.Operations(second.Reference), 1)
}

// A definitive failure (declined) is never retried: the reserve is released
// at once and the payout fails.
func TestDefinitiveFailureIsNotRetried_R6(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{Balances: map[string]string{"BRL": "10.00"}}, "100.00")
	finals := e.withRetry(payouts.RetryPolicy{MaxAttempts: 3, Backoff: time.Second})
	p, err := e.svc.CreatePayout(e.ctx, e.pix("50.00"))
	require.NoError(t, err)
	require.Equal(t, attempts.StatusFailed, e.execute(p).Status)
	v := e.get(p)
	require.Equal(t, payouts.StatusFailed, v.Status)
	require.Equal(t, 1, v.AttemptCount)
	require.Equal(t, []payouts.Status{payouts.StatusFailed}, finals[p.ID])
	require.Equal(t, []string{payouts.CauseReserve, payouts.CauseRelease}, e.causes(p))
}

// When the policy gives up (MaxAttempts), the payout fails and the reserve
// is released then, once.
func TestRetryPolicyGivesUpAndReleasesOnce_R22(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	finals := e.withRetry(payouts.RetryPolicy{MaxAttempts: 2, Backoff: time.Second})
	p, err := e.svc.CreatePayout(e.ctx, e.pix("10.00"))
	require.NoError(t, err)
	for i := range 2 {
		cur := e.attempt(e.get(p).Payout)
		require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: cur.Reference}))
		e.clock.Advance(time.Minute) // past any backoff
		require.Equal(t, attempts.StatusUnknown, e.execute(e.get(p).Payout).Status, "attempt %d", i+1)
		require.Equal(t, attempts.StatusFailed, e.resolveAfter(e.get(p).Payout, time.Hour).Attempt.Status)
	}
	v := e.get(p)
	require.Equal(t, payouts.StatusFailed, v.Status)
	require.Equal(t, 2, v.AttemptCount)
	require.Equal(t, []payouts.Status{payouts.StatusFailed}, finals[p.ID])
	require.Equal(t, []string{payouts.CauseReserve, payouts.CauseReserveCarry, payouts.CauseRelease}, e.causes(p))
	av, res := e.balances()
	require.Equal(t, "100.00", av)
	require.Equal(t, "0.00", res)
}

// The policy's deadline (Within, counted from the payout's creation): a
// transient failure after it is final; the payout fails and its reserve is
// released once.
func TestRetryPolicyDeadlineReleasesOnce_R22(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	finals := e.withRetry(payouts.RetryPolicy{MaxAttempts: 5, Within: 30 * time.Minute, Backoff: time.Second})
	p, err := e.svc.CreatePayout(e.ctx, e.pix("10.00"))
	require.NoError(t, err)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: e.attempt(p).Reference}))
	require.Equal(t, attempts.StatusUnknown, e.execute(p).Status)
	require.Equal(t, attempts.StatusFailed, e.resolveAfter(p, time.Hour).Attempt.Status, "proven absent an hour later")
	v := e.get(p)
	require.Equal(t, payouts.StatusFailed, v.Status, "past Within: no next attempt")
	require.Equal(t, 1, v.AttemptCount)
	require.Equal(t, []payouts.Status{payouts.StatusFailed}, finals[p.ID])
	require.Equal(t, []string{payouts.CauseReserve, payouts.CauseRelease}, e.causes(p))
	av, res := e.balances()
	require.Equal(t, "100.00", av)
	require.Equal(t, "0.00", res)
}
