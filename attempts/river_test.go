package attempts

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"
)

// TestRiverEndToEnd runs the real workers on a real River client with a
// short poll interval and the wall clock: a success, an unknown resolved by
// the resolver job's lookup, and a refused connection re-sent with the same
// key once the server is reachable.
func TestRiverEndToEnd(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{plan: []behaviour{behaveOK}, tune: func(c *Config) {
		c.Clock = SystemClock{}
		c.ResolveSchedule = []time.Duration{100 * time.Millisecond}
		c.SendBackoffBase = 50 * time.Millisecond
		c.SendBackoffMax = 100 * time.Millisecond
		c.SweepInterval = time.Second
	}})
	workers := river.NewWorkers()
	h.svc.AddWorkers(workers)
	client, err := river.NewClient(riverpgxv5.New(h.pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers:           workers,
		PeriodicJobs:      h.svc.PeriodicJobs(),
		FetchPollInterval: 20 * time.Millisecond,
		FetchCooldown:     5 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		TestOnly:          true,
	})
	require.NoError(t, err)
	h.svc.SetRiverClient(client)
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = client.Stop(stopCtx)
	})

	waitStatus := func(a Attempt, want Status) Attempt {
		t.Helper()
		var got Attempt
		require.Eventually(t, func() bool {
			got = h.get(a.ID)
			return got.Status == want
		}, 30*time.Second, 20*time.Millisecond, "attempt %s never reached %s", a.ID, want)
		return got
	}

	ok := h.open(newSubject())
	waitStatus(ok, StatusSucceeded)
	require.Equal(t, 1, h.psp.seen(ok.IdempotencyKey))

	h.psp.setPlan(behave500AfterRecord)
	lost := h.open(newSubject())
	got := waitStatus(lost, StatusSucceeded)
	require.Equal(t, ActorResolver, Actor(got.ResolvedBy))
	require.Equal(t, 1, h.psp.seen(lost.IdempotencyKey))
	require.Equal(t, 1, got.LookupCount)

	h.psp.setPlan(behaveOK)
	live := h.psp.srv.URL
	h.prov.setBase(deadURL(t))
	refused := h.open(newSubject())
	require.Eventually(t, func() bool { return h.get(refused.ID).CallCount >= 2 }, 30*time.Second, 10*time.Millisecond)
	h.prov.setBase(live)
	got = waitStatus(refused, StatusSucceeded)
	require.Equal(t, 1, h.psp.seen(refused.IdempotencyKey))
	require.GreaterOrEqual(t, got.CallCount, 3)

	for _, a := range []Attempt{ok, lost, refused} {
		require.Equal(t, 1, h.owner.count(a.ID))
	}
	// The submit and resolve jobs all complete (River's completer is async).
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT count(*) FROM river_job WHERE kind IN ($1, $2)
			AND state <> 'completed'`, SubmitAttemptKind, ResolveAttemptKind).Scan(&n))
		return n == 0
	}, 5*time.Second, 20*time.Millisecond)
	h.requireNoViolations()

	// Open in a caller's transaction with the working client set.
	require.NoError(t, pgx.BeginFunc(h.ctx, h.pool, func(tx pgx.Tx) error {
		_, err := h.svc.Open(h.ctx, tx, OpenParams{Kind: KindPixTransfer, SubjectID: newSubject(), Provider: "fake",
			Input: ok.inputForTest()})
		return err
	}))
}
