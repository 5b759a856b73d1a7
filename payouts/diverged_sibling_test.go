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
	_, err := e.att.SettleDivergence(e.ctx, a.ID, "op_review", "review test: double payment shown")
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

// secondAttemptSentUnknown brings a new payout of 10.00 under a retry
// policy to: attempt 1 failed by the resolver's "not found" past the
// window, attempt 2 opened by the policy with the reserve carried, sent
// after its backoff and unknown (a 503). holdSiblings leaves such an
// attempt to the resolver when a divergence of attempt 1 is recorded: it
// has been sent, and review would stop its lookups.
func (e *env) secondAttemptSentUnknown() (payouts.Payout, attempts.Attempt, attempts.Attempt, map[string][]payouts.Status) {
	finals := e.withRetry(payouts.RetryPolicy{MaxAttempts: 3, Within: 24 * time.Hour, Backoff: 30 * time.Second})
	p, err := e.svc.CreatePayout(e.ctx, e.pix("10.00"))
	require.NoError(e.t, err)
	first := e.attempt(p)
	require.NoError(e.t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: first.Reference}))
	require.Equal(e.t, attempts.StatusUnknown, e.execute(p).Status)
	require.Equal(e.t, attempts.StatusFailed, e.resolveAfter(p, time.Hour).Attempt.Status)
	v := e.get(p)
	second := e.attempt(v.Payout)
	require.NotEqual(e.t, first.ID, second.ID)
	require.NoError(e.t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: second.Reference}))
	e.clock.Advance(time.Minute) // past the backoff
	require.Equal(e.t, attempts.StatusUnknown, e.execute(v.Payout).Status)
	return v.Payout, first, second, finals
}

// subjectAttempts counts the attempts of payout p (every one ever opened).
func (e *env) subjectAttempts(p payouts.Payout) int {
	var n int
	require.NoError(e.t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM attempts WHERE direction = 'out' AND subject_id = $1`,
		p.ID).Scan(&n))
	return n
}

// requireNoNextAttempt checks what must hold once p's attempt second failed
// transiently while attempt first of p had an unsettled divergence: no
// attempt 3 (no row, no key, no carry of the reserve to it), the payout
// failed with its reserve released once (the ledger's view after any
// divergence: the money went back to available while the provider says it
// left, for the operator to book), and the divergence still in the review
// queue with the payout needing attention.
func (e *env) requireNoNextAttempt(p payouts.Payout, first, second attempts.Attempt) {
	e.t.Helper()
	v := e.get(p)
	require.Equal(e.t, 2, e.subjectAttempts(p), "the retry policy opened attempt 3 although attempt 1 was reported paid: "+
		"only the send-time guard stands between it and a second payment")
	require.Equal(e.t, second.ID, *v.CurrentAttemptID)
	require.Equal(e.t, 2, v.AttemptCount)
	require.Equal(e.t, payouts.StatusFailed, v.Status)
	require.True(e.t, v.NeedsAttention)
	require.Equal(e.t, []string{payouts.CauseReserve, payouts.CauseReserveCarry, payouts.CauseRelease}, e.causes(p),
		"no reserve carried to a new attempt; attempt 2's reserve released once")
	avail, reserved := e.balances()
	require.Equal(e.t, "100.00", avail)
	require.Equal(e.t, "0.00", reserved)
	queue, _, err := e.att.ReviewQueue(e.ctx, e.pool, attempts.ReviewQueueParams{Limit: 10})
	require.NoError(e.t, err)
	var ids []string
	for _, a := range queue {
		ids = append(ids, a.ID.String())
	}
	require.Contains(e.t, ids, first.ID.String(), "the divergence stays in the review queue for a human")
	require.Zero(e.t, e.opsFor(second))
}

// R6, R9, R19, R22: attempt 2 (opened by the retry policy after attempt 1
// failed by "not found") was sent and is unknown when the provider reports
// attempt 1 paid. The resolver then proves attempt 2 absent: a transient
// failure, for which the policy would open attempt 3 with a NEW key and the
// reserve carried. Attempt 1's unsettled divergence says the recipient was
// paid: a new attempt could only pay twice (R6: a new key only after a
// definitive failure, and a failure the provider contradicts is none), so
// none is opened, not even one the send-time guard would hold.
func TestNoNextAttemptOpensWhileASiblingDiverged_R6_R9_R22(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	p, first, second, finals := e.secondAttemptSentUnknown()

	e.lateSuccess(first, "10.00")
	t.Cleanup(func() { e.settleDivergence(first) })
	sent, err := e.att.Get(e.ctx, e.pool, second.ID)
	require.NoError(t, err)
	require.False(t, sent.Review, "sent and unknown: left to the resolver")

	rr := e.resolveAfter(p, time.Hour)
	require.Equal(t, attempts.StatusFailed, rr.Attempt.Status)
	require.Equal(t, attempts.FailureNotFound, rr.Attempt.FailureCode)
	e.requireNoNextAttempt(p, first, second)
	require.Equal(t, []payouts.Status{payouts.StatusFailed}, finals[p.ID])
}

// R6, R9, R10: the same when the divergence commits while attempt 2's
// failure is being recorded. The test holds the divergence's transaction
// open after its UPDATE of attempt 1 (lateConflict's statement), resolves
// attempt 2, and commits only once the resolution waits on a lock (or has
// finished: before the fix it never waited, and opened attempt 3 while the
// divergence was uncommitted). The check in openNext locks the subject's
// failed attempts, so it waits for the divergence and then sees it.
func TestNoNextAttemptOpensWhileASiblingDivergenceCommits_R6_R9(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	p, first, second, _ := e.secondAttemptSentUnknown()

	tx, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	why := "divergence: test reported succeeded after the attempt was resolved failed"
	tag, err := tx.Exec(e.ctx, `UPDATE attempts SET diverged_at = $2, divergence = $3,
		review = true, review_reason = $3, review_at = $2, updated_at = $2
		WHERE id = $1 AND status = 'failed' AND diverged_at IS NULL`, first.ID, e.clock.Now(), why)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	e.clock.Advance(time.Hour)
	type result struct {
		r   attempts.ResolveResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := e.att.Resolve(e.ctx, second.ID)
		done <- result{r, err}
	}()
	var res *result
	deadline := time.Now().Add(20 * time.Second)
	for res == nil {
		select {
		case r := <-done:
			res = &r
		case <-time.After(20 * time.Millisecond):
		}
		if res != nil {
			break
		}
		var waiting int
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		if waiting > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the resolution neither finished nor waited on a lock")
	}
	require.NoError(t, tx.Commit(e.ctx))
	t.Cleanup(func() { e.settleDivergence(first) })
	if res == nil {
		r := <-done
		res = &r
	}
	require.NoError(t, res.err)
	require.Equal(t, attempts.StatusFailed, res.r.Attempt.Status)
	e.requireNoNextAttempt(p, first, second)
}
