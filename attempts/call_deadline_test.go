package attempts

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// deadlineProvider tells, for each Submit, whether the call's context had
// already ended when it was asked (the request could not be written), then
// makes the call.
type deadlineProvider struct {
	*testProvider
	ended chan bool
}

func (p *deadlineProvider) Submit(ctx context.Context, req providers.SubmitRequest) providers.SubmitResult {
	p.ended <- ctx.Err() != nil
	return p.testProvider.Submit(ctx, req)
}

// R11, R16, R22: call_started_at is stamped before the call-start mark
// waits for its batch, a pool connection and row locks, and the sweeper
// and the R16 window take call_started_at + StaleCallAfter as the latest a
// call can still be on its way (serve lets StaleCallAfter be one exchange
// + 1 s for the sim and Stripe). So the call's context ends one second
// before that instant (callContext), and a call whose time is up never
// leaves. Say the process's pool is busy for 30 s (load, a slow query, a
// database stall) while a first send waits to be marked: the mark commits
// with call_started_at 30 s in the past, and the request is not sent (the
// provider never sees it; the attempt stays pending, with nothing in
// flight); sent again later with the same key and a fresh stamp, it pays
// once.
func TestCallNeverLeavesAfterItsStampsStaleCallAfter_R11_R16(t *testing.T) {
	t.Parallel()
	const exchange = time.Second + providers.DefaultTLSHandshakeTimeout + 10*time.Second // the harness's connect + TLS + read
	var dp *deadlineProvider
	h := setup(t, harnessOpts{tune: func(c *Config) {
		// What serve accepts for a one-exchange provider: the exchange + 1 s.
		c.StaleCallAfter = exchange + time.Second
		dp = &deadlineProvider{testProvider: c.Providers["fake"].(*testProvider), ended: make(chan bool, 4)}
		c.Providers["fake"] = dp
	}})
	a := h.open(newSubject())

	// The first-send mark stamps the call, then (the pool busy for 30 s)
	// the call is made only 30 s later.
	marked := h.svc.firstSendMany(h.ctx, []uuid.UUID{a.ID})
	require.NoError(t, marked[0].Err)
	ma := marked[0].Value
	require.Equal(t, a.ID, ma.ID)
	require.True(t, ma.CallInFlight())
	h.clock.Advance(30 * time.Second)
	r, err := h.svc.call(h.ctx, dp, ma, 1)
	require.NoError(t, err)
	require.True(t, <-dp.ended, "the call's context had ended before the request could be written")
	require.Equal(t, OutcomeNotSent, r.Outcome)
	require.Zero(t, h.psp.seen(a.IdempotencyKey), "the provider never saw the request")
	got := h.get(a.ID)
	require.Equal(t, StatusPending, got.Status)
	require.False(t, got.CallInFlight(), "recorded: nothing on its way")

	// Sent again later, with the same key and a fresh stamp: paid once.
	h.clock.Advance(time.Minute)
	r2, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, <-dp.ended)
	require.Equal(t, StatusSucceeded, r2.Attempt.Status)
	require.Equal(t, 1, h.psp.seen(a.IdempotencyKey))
	h.requireNoViolations()
}

// The sweeper's safety net for pending attempts ("a discarded job never
// strands an attempt", Sweep) takes the SweepBatch oldest pending,
// never-answered attempts without a live submit job, and not those in
// review: they are never sent, so each sweep would give them a new job that
// completes at once, and as the oldest by updated_at they would fill the
// batch before an attempt whose submit job was discarded (25 errors).
func TestSweepSkipsAttemptsInReviewForStrandedOnes(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{tune: func(c *Config) { c.SweepBatch = 2 }})

	// Two attempts held in review, never sent.
	var held []Attempt
	for range 2 {
		a := h.open(newSubject())
		require.NoError(t, h.svc.inTx(h.ctx, func(tx pgx.Tx, after *afterCommit) error {
			la, err := lockAttempt(h.ctx, tx, a.ID)
			if err != nil {
				return err
			}
			_, err = h.svc.flagReview(h.ctx, tx, after, la, ActorWorker, "held, not sent (test)")
			return err
		}))
		held = append(held, a)
	}
	// Later, an attempt whose submit job is discarded (River gave up on it
	// after 25 errors: the database, a provider missing in one process).
	h.clock.Advance(time.Hour)
	stranded := h.open(newSubject())
	_, err := h.pool.Exec(h.ctx, `UPDATE river_job SET state = 'discarded', finalized_at = now()
		WHERE kind = $1 AND args->>'attempt_id' = $2`, SubmitAttemptKind, stranded.ID.String())
	require.NoError(t, err)
	// The held attempts' own submit jobs have run (Execute does nothing
	// for an attempt in review) and completed.
	completeSubmits := func() {
		for _, a := range held {
			r, err := h.svc.Execute(h.ctx, a.ID)
			require.NoError(t, err)
			require.False(t, r.Sent)
		}
		_, err := h.pool.Exec(h.ctx, `UPDATE river_job SET state = 'completed', finalized_at = now()
			WHERE kind = $1 AND args->>'attempt_id' = ANY ($2) AND state IN ('available', 'scheduled', 'retryable')`,
			SubmitAttemptKind, []string{held[0].ID.String(), held[1].ID.String()})
		require.NoError(t, err)
	}
	completeSubmits()

	for i := range 5 { // five sweeper runs, a minute apart
		h.clock.Advance(time.Minute)
		res, err := h.svc.Sweep(h.ctx)
		require.NoError(t, err)
		t.Logf("sweep %d: %+v; live submit jobs of the stranded attempt: %d", i+1, res, h.liveJobs(SubmitAttemptKind, stranded.ID))
		completeSubmits()
	}
	vs, err := Verify(h.ctx, h.pool)
	require.NoError(t, err)
	t.Logf("Verify: %v", vs)
	require.Equal(t, StatusPending, h.get(stranded.ID).Status)
	require.Equal(t, 1, h.liveJobs(SubmitAttemptKind, stranded.ID),
		"a pending attempt with no submit job was never given one: the sweeper's batch went to attempts in review, "+
			"which are never sent")
}
