package payouts_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// R6, R9, R22: attempt 1 of a payout (its reserve carried to attempt 2 by
// the retry policy) is reported paid while attempt 2, already sent, is
// being failed. The divergence's transaction (here by hand, as the real one
// does it: attempt 1's row, then the payout's row, attempts.SubjectLocker)
// holds nothing (the reserve is still attempt 2's when it looks). Attempt
// 2's failure waits for the payout's row (attemptsFinalSQL), then sees the
// divergence: it opens no attempt 3 (that would pay the recipient twice)
// and its release tops up the hold. Before, the failure read the payout's
// attempts from a snapshot without the divergence: it opened attempt 3
// (or, with no retry left, released the reserve and held nothing: the
// 10.00 that left stayed in available).
func TestReleaseWaitsForASiblingsDivergenceInFlight_R9_R22(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	e.withRetry(payouts.RetryPolicy{MaxAttempts: 3, Within: 24 * time.Hour, Backoff: 30 * time.Second})
	p, first, _ := e.secondAttemptSentIntoOutage()

	// The divergence's transaction, caught after it recorded attempt 1's
	// divergence and found nothing to hold (attempt 2 still holds the
	// reserve), before it commits.
	div, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer div.Rollback(e.ctx) //nolint:errcheck
	now := e.clock.Now()
	why := "divergence: provider reports success for an attempt resolved failed (race test)"
	_, err = div.Exec(e.ctx, `UPDATE attempts SET diverged_at = $2, divergence = $3, divergence_kind = 'paid_after_failure',
		review = true, review_reason = $3, review_at = $2, updated_at = $2 WHERE id = $1 AND status = 'failed'`, first.ID, now, why)
	require.NoError(t, err)
	_, err = div.Exec(e.ctx, `SELECT 1 FROM payouts WHERE id = $1 FOR UPDATE`, p.ID)
	require.NoError(t, err)
	_, err = div.Exec(e.ctx, `INSERT INTO attempt_events (attempt_id, at, type, actor, reason) VALUES ($1, $2, 'review', 'webhook', $3)`,
		first.ID, now, why)
	require.NoError(t, err)

	done := make(chan attempts.Status, 1)
	go func() {
		done <- e.resolveAfter(e.get(p).Payout, time.Hour).Attempt.Status
	}()
	require.Eventually(t, func() bool {
		var n int
		_ = e.pool.QueryRow(e.ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock'`).Scan(&n)
		return n == 1
	}, 10*time.Second, 10*time.Millisecond, "attempt 2's failure waits for the payout's row, locked by attempt 1's divergence in flight")
	require.NoError(t, div.Commit(e.ctx))
	require.Equal(t, attempts.StatusFailed, <-done)

	v := e.get(p)
	require.Equal(t, 2, v.Payout.AttemptCount, "no attempt 3 once attempt 1 is known paid (R6)")
	require.Equal(t, payouts.StatusFailed, v.Payout.Status)
	require.Equal(t, 2, e.count(`SELECT count(*) FROM attempts WHERE subject_id = $1`, p.ID))
	got, err := e.att.Get(e.ctx, e.pool, first.ID)
	require.NoError(t, err)
	t.Cleanup(func() { e.settleDivergence(got) })
	avail, reserved := e.balances()
	require.Equal(t, "0.00", reserved)
	require.Equal(t, "10.00", e.heldOf(merchant), "attempt 1 paid 10.00: held once attempt 2 released the reserve")
	require.Equal(t, "90.00", avail)
}

// raceEnv is a payout whose attempt 1 failed (its reserve carried to
// attempt 2 by the retry policy, MaxAttempts 3) and whose attempt 2 was
// sent into an outage (unknown); onDiverged runs in every divergence's
// transaction.
func raceEnv(t *testing.T, onDiverged func()) (*env, payouts.Payout, attempts.Attempt, attempts.Attempt) {
	e := setup(t, sim.Config{}, "100.00")
	svc, err := payouts.New(payouts.Config{Pool: e.pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock,
		Retry: payouts.RetryPolicy{MaxAttempts: 3, Within: 24 * time.Hour, Backoff: 30 * time.Second},
		OnDiverged: func(context.Context, pgx.Tx, payouts.Payout, attempts.Attempt) error {
			if onDiverged != nil {
				onDiverged()
			}
			return nil
		}})
	require.NoError(t, err)
	e.svc = svc
	p, first, second := e.secondAttemptSentIntoOutage()
	return e, p, first, second
}

// lockWaiters is how many backends of the test's database wait for a lock.
func (e *env) lockWaiters() int {
	var n int
	_ = e.pool.QueryRow(e.ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		AND wait_event_type = 'Lock'`).Scan(&n)
	return n
}

// paidLate is the provider's webhook saying a paid (lateSuccess), its
// error on done.
func (e *env) paidLate(a attempts.Attempt, done chan<- error) {
	_, err := e.att.ResolveByReference(e.ctx, attempts.ResolveInput{Reference: a.Reference, Provider: a.Provider,
		Operation: providers.Operation(a.Operation), Amount: "10.00", Currency: "BRL", State: providers.StateSucceeded,
		ProviderID: "late_op_1", Source: attempts.SourceWebhook, Actor: "evt_late_1"})
	done <- err
}

// R6, R9, R22: the real divergence's transaction, caught (its OnDiverged
// hook) after it recorded attempt 1 paid and locked the payout's row
// (payouts.LockSubject), while attempt 2 is failed. The failure waits for
// the payout's row, then sees the divergence: no attempt 3 (that would pay
// the recipient twice), and its release tops up the hold to 10.00. Before,
// the divergence never took the payout's row: the failure read the
// payout's attempts from a snapshot without it and opened attempt 3.
func TestAttemptFailureWaitsForTheDivergenceHoldingThePayout_R6_R9_R22(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e, p, first, second := raceEnv(t, func() {
		once.Do(func() {
			close(entered)
			<-release
		})
	})
	div := make(chan error, 1)
	go e.paidLate(first, div)
	select {
	case <-entered:
	case err := <-div:
		t.Fatalf("the divergence finished without its hook: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the divergence never reached its hook")
	}
	e.clock.Advance(time.Hour)
	done := make(chan attempts.Status, 1)
	go func() {
		r, err := e.att.Resolve(e.ctx, second.ID)
		assert.NoError(t, err)
		done <- r.Attempt.Status
	}()
	waited := assert.Eventually(t, func() bool { return e.lockWaiters() == 1 }, 10*time.Second, 10*time.Millisecond,
		"attempt 2's failure waits for the payout's row, locked by attempt 1's divergence in flight")
	close(release)
	require.NoError(t, <-div)
	require.Equal(t, attempts.StatusFailed, <-done)
	require.True(t, waited)

	v := e.get(p)
	require.Equal(t, 2, v.Payout.AttemptCount, "no attempt 3 once attempt 1 is known paid (R6)")
	require.Equal(t, payouts.StatusFailed, v.Payout.Status)
	got, err := e.att.Get(e.ctx, e.pool, first.ID)
	require.NoError(t, err)
	t.Cleanup(func() { e.settleDivergence(got) })
	avail, reserved := e.balances()
	require.Equal(t, "0.00", reserved)
	require.Equal(t, "10.00", e.heldOf(merchant), "attempt 1 paid 10.00: held once attempt 2 released the reserve")
	require.Equal(t, "90.00", avail)
}

// R6, R9, R22: the other order. Attempt 2's failure opened attempt 3 (the
// retry policy) and holds the payout's row, caught before its commit (a
// lock on the merchant's reserved account delays its ledger postings);
// then the provider reports attempt 1 paid. The divergence waits for the
// payout's row, then sees attempt 3 and holds it in review: it is never
// sent (the recipient would be paid twice). Before, the divergence looked
// for unsent siblings in a snapshot without attempt 3, and attempt 3 was
// sent once its backoff passed.
func TestDivergenceWaitsForTheFailureOpeningTheNextAttempt_R6_R9_R22(t *testing.T) {
	t.Parallel()
	e, p, first, second := raceEnv(t, nil)
	blocker, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer blocker.Rollback(e.ctx) //nolint:errcheck
	// A posting on the merchant's reserved account, never committed: it
	// holds the account's row.
	av, err := ledger.EnsureAccount(e.ctx, blocker, ledger.MerchantAvailable(merchant, brl("0").Currency()))
	require.NoError(t, err)
	rs, err := ledger.EnsureAccount(e.ctx, blocker, ledger.MerchantReserved(merchant, brl("0").Currency()))
	require.NoError(t, err)
	_, err = ledger.Post(e.ctx, blocker, ledger.TransactionInput{IdempotencyKey: "race-test-blocker", CauseKind: "test",
		CauseID: "race-test", Description: "holds the reserved account's row (rolled back)", Postings: []ledger.PostingInput{
			{AccountID: av.ID, Amount: decimal.RequireFromString("-0.01"), Currency: brl("0").Currency()},
			{AccountID: rs.ID, Amount: decimal.RequireFromString("0.01"), Currency: brl("0").Currency()}}})
	require.NoError(t, err)

	e.clock.Advance(time.Hour)
	done := make(chan attempts.Status, 1)
	go func() {
		r, err := e.att.Resolve(e.ctx, second.ID)
		assert.NoError(t, err)
		done <- r.Attempt.Status
	}()
	require.Eventually(t, func() bool { return e.lockWaiters() == 1 }, 10*time.Second, 10*time.Millisecond,
		"attempt 2's failure, attempt 3 opened, waits for the reserved account")
	div := make(chan error, 1)
	go e.paidLate(first, div)
	waited := assert.Eventually(t, func() bool { return e.lockWaiters() == 2 }, 10*time.Second, 10*time.Millisecond,
		"the divergence waits for the payout's row, held by attempt 2's failure")
	require.NoError(t, blocker.Rollback(e.ctx))
	require.Equal(t, attempts.StatusFailed, <-done)
	require.NoError(t, <-div)
	require.True(t, waited)

	v := e.get(p)
	require.Equal(t, 3, v.Payout.AttemptCount)
	third := e.attempt(v.Payout)
	require.NotEqual(t, second.ID, third.ID)
	require.True(t, third.Review, "attempt 3 held in review by attempt 1's divergence")
	e.clock.Advance(time.Hour)
	e.execute(v.Payout)
	require.Zero(t, e.opsFor(third), "attempt 3 never sent")
	got, err := e.att.Get(e.ctx, e.pool, first.ID)
	require.NoError(t, err)
	t.Cleanup(func() { e.settleDivergence(got) })
	_, reserved := e.balances()
	require.Equal(t, "10.00", reserved, "the reserve stays with attempt 3 in review (R22)")
}
