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

	"github.com/saldo/saldo/providers"
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
	// Two refused calls recorded (call_count counts a call from its mark,
	// before its dial: waiting on it let call 2 dial the live server).
	require.Eventually(t, func() bool { return h.get(refused.ID).CallsRecorded >= 2 }, 30*time.Second, 10*time.Millisecond)
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
	}, 30*time.Second, 20*time.Millisecond)
	h.requireNoViolations()

	// Open in a caller's transaction with the working client set.
	require.NoError(t, pgx.BeginFunc(h.ctx, h.pool, func(tx pgx.Tx) error {
		_, err := h.svc.Open(h.ctx, tx, OpenParams{Kind: KindPixTransfer, SubjectID: newSubject(), Provider: "fake",
			Input: ok.inputForTest()})
		return err
	}))
}

// TestResolverJobScheduledForFirstLookup (R15): an attempt whose first
// lookup is due further out than River's scheduler interval gets its
// resolver job inserted scheduled for then (it used to run at once only to
// snooze until the lookup was due); one due sooner gets an available job,
// which waits for its lookup by snoozing. Both ways an attempt becomes
// unknown (the record batch, a transition) and a "processing" report do it.
func TestResolverJobScheduledForFirstLookup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		first     time.Duration
		scheduled bool
	}{{30 * time.Second, true}, {100 * time.Millisecond, false}} {
		t.Run(tc.first.String(), func(t *testing.T) {
			t.Parallel()
			h := setup(t, harnessOpts{plan: []behaviour{behave500NoRecord}, tune: func(c *Config) {
				c.Clock = SystemClock{}
				c.ResolveSchedule = []time.Duration{tc.first, time.Minute}
			}})
			requireJob := func(a Attempt) {
				t.Helper()
				var state string
				var at time.Time
				require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT state, scheduled_at FROM river_job
					WHERE kind = $1 AND args->>'attempt_id' = $2`, ResolveAttemptKind, a.ID.String()).Scan(&state, &at))
				require.NotNil(t, a.NextLookupAt)
				if !tc.scheduled {
					require.Equal(t, "available", state)
					return
				}
				require.Equal(t, "scheduled", state)
				require.WithinDuration(t, *a.NextLookupAt, at, time.Second, "the job runs when the first lookup is due")
			}

			// Gone unknown in the record batch.
			r, err := h.svc.Execute(h.ctx, h.open(newSubject()).ID)
			require.NoError(t, err)
			require.Equal(t, StatusUnknown, r.Attempt.Status)
			requireJob(r.Attempt)

			// Reported processing by a webhook before any call.
			p := h.open(newSubject())
			_, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: p.Reference, State: providers.StateProcessing,
				ProviderID: "op_p", Source: SourceWebhook, Actor: "evt_p"})
			require.NoError(t, err)
			requireJob(h.get(p.ID))

			// Turned unknown by the sweeper: a call started long ago that
			// recorded nothing.
			s := h.open(newSubject())
			_, err = h.pool.Exec(h.ctx, `UPDATE attempts SET call_count = 1, call_started_at = now() - interval '1 hour'
				WHERE id = $1`, s.ID)
			require.NoError(t, err)
			_, err = h.svc.Sweep(h.ctx)
			require.NoError(t, err)
			got := h.get(s.ID)
			require.Equal(t, StatusUnknown, got.Status)
			requireJob(got)
		})
	}
}
