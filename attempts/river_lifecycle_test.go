package attempts

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// panickyProvider wraps a provider: the first panicSubmits Submit calls make
// the real HTTP call (the request reaches the PSP) and then panic; the first
// panicLookups Lookup calls panic before asking.
type panickyProvider struct {
	providers.Provider
	panicSubmits, panicLookups atomic.Int32
	submits, lookups           atomic.Int32
}

func (p *panickyProvider) Submit(ctx context.Context, req providers.SubmitRequest) providers.SubmitResult {
	p.submits.Add(1)
	r := p.Provider.Submit(ctx, req)
	if p.panicSubmits.Add(-1) >= 0 {
		panic("test: worker dies after the request left")
	}
	return r
}

func (p *panickyProvider) Lookup(ctx context.Context, op providers.Operation, ref string) (providers.LookupResult, error) {
	p.lookups.Add(1)
	if p.panicLookups.Add(-1) >= 0 {
		panic("test: worker dies before the lookup")
	}
	return p.Provider.Lookup(ctx, op, ref)
}

// startRealRiver starts a real River client working h.svc's jobs, with
// the periodic sweeper when sweep is set.
func startRealRiver(t *testing.T, h *harness, sweep bool, tune func(*river.Config)) *river.Client[pgx.Tx] {
	t.Helper()
	workers := river.NewWorkers()
	h.svc.AddWorkers(workers)
	cfg := &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers:           workers,
		FetchPollInterval: 20 * time.Millisecond,
		FetchCooldown:     5 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		TestOnly:          true,
	}
	if sweep {
		cfg.PeriodicJobs = h.svc.PeriodicJobs()
	}
	if tune != nil {
		tune(cfg)
	}
	client, err := river.NewClient(riverpgxv5.New(h.pool), cfg)
	require.NoError(t, err)
	h.svc.SetRiverClient(client)
	ctx, cancel := context.WithCancel(h.ctx)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = client.Stop(stopCtx)
		cancel()
	})
	return client
}

// riverWaitStatus waits until the attempt reaches want.
func riverWaitStatus(t *testing.T, h *harness, a Attempt, want Status, within time.Duration) Attempt {
	t.Helper()
	var got Attempt
	require.Eventually(t, func() bool {
		got = h.get(a.ID)
		return got.Status == want
	}, within, 20*time.Millisecond, "attempt %s never reached %s (last: %s review=%v calls=%d/%d)", a.ID, want,
		got.Status, got.Review, got.CallCount, got.CallsRecorded)
	return got
}

// A worker died mid-call (the request reached the PSP, nothing recorded) and
// its submit job stays "running". River's rescuer (real, short
// RescueStuckJobsAfter) makes the job retryable and another worker runs it:
// the attempt goes unknown and is resolved by lookup, never sent a second
// time (R11, R12). Then duplicate submit and resolve jobs inserted after the
// originals completed (what uniqueness allows once the cleaner deleted or
// completed them) change nothing. No other test drives River's rescuer.
func TestRescuedStuckSubmitNeverResends_R12(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{tune: func(c *Config) {
		c.Clock = SystemClock{}
		c.ResolveSchedule = []time.Duration{100 * time.Millisecond}
		c.JobTimeout = time.Second
	}})
	a := h.open(newSubject())
	h.svc.hookAfterCall = func(Attempt) error { return errCrash }
	_, err := h.svc.Execute(h.ctx, a.ID)
	require.ErrorIs(t, err, errCrash)
	h.svc.hookAfterCall = nil
	require.Equal(t, 1, h.psp.seen(a.IdempotencyKey))
	// The dead worker's job: running since a minute ago.
	tag, err := h.pool.Exec(h.ctx, `UPDATE river_job SET state = 'running', attempt = 1,
		attempted_at = now() - interval '1 minute', attempted_by = '{dead-worker}'
		WHERE kind = $1 AND args->>'attempt_id' = $2`, SubmitAttemptKind, a.ID.String())
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	client := startRealRiver(t, h, false, func(c *river.Config) {
		c.JobTimeout = time.Second
		c.RescueStuckJobsAfter = 2 * time.Second
	})
	got := riverWaitStatus(t, h, a, StatusSucceeded, 30*time.Second)
	require.Equal(t, ActorResolver, Actor(got.ResolvedBy))
	require.Equal(t, 1, h.psp.seen(a.IdempotencyKey), "the rescued job re-sent the attempt")
	require.Equal(t, 1, h.owner.count(a.ID))

	// Jobs inserted again for the same attempt once the first ones are no
	// longer live: nothing is sent or booked twice.
	require.Eventually(t, func() bool {
		return h.liveJobs(SubmitAttemptKind, a.ID)+h.liveJobs(ResolveAttemptKind, a.ID) == 0
	}, 10*time.Second, 20*time.Millisecond)
	_, err = h.pool.Exec(h.ctx, `DELETE FROM river_job WHERE args->>'attempt_id' = $1`, a.ID.String())
	require.NoError(t, err)
	r1, err := client.Insert(h.ctx, SubmitAttemptArgs{AttemptID: a.ID}, h.svc.submitOpts())
	require.NoError(t, err)
	r2, err := client.Insert(h.ctx, ResolveAttemptArgs{AttemptID: a.ID}, h.svc.resolveOpts())
	require.NoError(t, err)
	require.False(t, r1.UniqueSkippedAsDuplicate || r2.UniqueSkippedAsDuplicate)
	require.Eventually(t, func() bool {
		return h.liveJobs(SubmitAttemptKind, a.ID)+h.liveJobs(ResolveAttemptKind, a.ID) == 0
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, h.psp.seen(a.IdempotencyKey))
	require.Equal(t, 1, h.owner.count(a.ID))
	h.requireNoViolations()
}

// A submit job whose worker panics after the request left and a resolver
// job whose worker panics before its lookup are both discarded by real River
// (their last attempt), leaving no live job for either attempt. The periodic
// sweeper (real River periodic job) brings each back to a live job, and the
// attempts end resolved, each sent once (R15). No other test drives
// discard-then-periodic-sweep.
func TestDiscardedJobsAreSweptBack_R15(t *testing.T) {
	t.Parallel()
	var pp *panickyProvider
	h := setup(t, harnessOpts{plan: []behaviour{behaveOK}, tune: func(c *Config) {
		c.Clock = SystemClock{}
		c.ResolveSchedule = []time.Duration{100 * time.Millisecond}
		c.SweepInterval = time.Second
		c.StaleCallAfter = 3 * time.Second
		c.JobTimeout = 2 * time.Second
		pp = &panickyProvider{Provider: c.Providers["fake"]}
		c.Providers = map[string]providers.Provider{"fake": pp}
	}})
	pp.panicSubmits.Store(1)
	sent := h.open(newSubject())
	_, err := h.pool.Exec(h.ctx, `UPDATE river_job SET max_attempts = 1 WHERE args->>'attempt_id' = $1`, sent.ID.String())
	require.NoError(t, err)

	startRealRiver(t, h, true, func(c *river.Config) { c.JobTimeout = 2 * time.Second })
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'discarded'
			AND args->>'attempt_id' = $2`, SubmitAttemptKind, sent.ID.String()).Scan(&n))
		return n == 1
	}, 10*time.Second, 20*time.Millisecond, "the panicking submit job is discarded")
	got := riverWaitStatus(t, h, sent, StatusSucceeded, 30*time.Second)
	require.Equal(t, 1, h.psp.seen(sent.IdempotencyKey))
	require.Equal(t, ActorResolver, Actor(got.ResolvedBy))

	// A resolver job discarded by a panic before its lookup.
	h.psp.setPlan(behave500AfterRecord)
	pp.panicLookups.Store(1)
	lost := h.open(newSubject())
	require.Eventually(t, func() bool {
		_, err := h.pool.Exec(h.ctx, `UPDATE river_job SET max_attempts = 1 WHERE kind = $1 AND args->>'attempt_id' = $2
			AND state <> 'running'`, ResolveAttemptKind, lost.ID.String())
		require.NoError(t, err)
		var n int
		require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'discarded'
			AND args->>'attempt_id' = $2`, ResolveAttemptKind, lost.ID.String()).Scan(&n))
		return n >= 1 || h.get(lost.ID).Status.Final()
	}, 20*time.Second, 5*time.Millisecond)
	riverWaitStatus(t, h, lost, StatusSucceeded, 30*time.Second)
	var states []string
	require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT array_agg(state::text ORDER BY id) FROM river_job WHERE kind = $1
		AND args->>'attempt_id' = $2`, ResolveAttemptKind, lost.ID.String()).Scan(&states))
	t.Logf("resolver jobs of the lost attempt: %v; lookups: %d", states, pp.lookups.Load())
	require.Equal(t, 1, h.psp.seen(lost.IdempotencyKey))
	for _, a := range []Attempt{sent, lost} {
		require.Equal(t, 1, h.owner.count(a.ID))
	}
	h.requireNoViolations()
}

// The PSP records the operation and never answers; the submit job's timeout
// (real River) cuts the call. The answer is unknown (R11), and the resolver
// finds the operation by lookup, never by re-sending (R14): one send. No
// other test drives River's job timeout.
func TestJobTimeoutMidCallIsResolvedByLookup_R11_R14(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{plan: []behaviour{behaveHang, behaveOK}, readTimeout: time.Minute, tune: func(c *Config) {
		c.Clock = SystemClock{}
		c.ResolveSchedule = []time.Duration{100 * time.Millisecond}
		c.JobTimeout = time.Second
		c.SweepInterval = time.Second
	}})
	a := h.open(newSubject())
	startRealRiver(t, h, true, func(c *river.Config) { c.JobTimeout = time.Second })
	got := riverWaitStatus(t, h, a, StatusSucceeded, 30*time.Second)
	require.Equal(t, ActorResolver, Actor(got.ResolvedBy))
	require.Equal(t, 1, h.psp.seen(a.IdempotencyKey))
	require.Equal(t, 1, got.CallCount)
	require.Equal(t, 1, h.owner.count(a.ID))
	h.requireNoViolations()
}
