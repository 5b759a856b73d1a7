package attempts

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/providers"
)

// restart builds a second Service on the same database, as a new process
// would after a crash.
func (h *harness) restart() *Service {
	h.t.Helper()
	svc, err := New(Config{Pool: h.pool, Providers: map[string]providers.Provider{"fake": h.prov}, Clock: h.clock})
	require.NoError(h.t, err)
	for _, k := range Kinds {
		svc.RegisterOwner(k, h.owner)
	}
	return svc
}

// TestCrashAfterOpen: the process stops right after opening. The attempt and
// its submit job were committed together; a new process sends it once, with
// the key made at open. If the job itself was lost, the sweeper re-creates it.
func TestCrashAfterOpen(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	a := h.open(newSubject())
	require.Equal(t, 1, h.liveJobs(SubmitAttemptKind, a.ID))

	// The job is lost too (discarded by hand): the sweeper brings it back.
	_, err := h.pool.Exec(h.ctx, `DELETE FROM river_job WHERE args->>'attempt_id' = $1`, a.ID.String())
	require.NoError(t, err)
	svc := h.restart()
	sr, err := svc.Sweep(h.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, sr.SubmitsEnqueued)
	require.Equal(t, 1, h.liveJobs(SubmitAttemptKind, a.ID))
	sr, err = svc.Sweep(h.ctx)
	require.NoError(t, err)
	require.Zero(t, sr.SubmitsEnqueued, "one submit job per attempt")

	r, err := svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusSucceeded, r.Attempt.Status)
	require.Equal(t, 1, h.psp.seen(a.IdempotencyKey))
	require.Equal(t, 1, h.psp.totalSubmits())
	h.requireNoViolations()
}

var errCrash = errors.New("simulated crash between the call and its record")

// TestCrashAfterCallBeforeRecord: the call left (the provider recorded the
// operation), the process died before phase 3. The next execution sees a
// call in flight with nothing recorded and makes the attempt unknown instead
// of re-sending; the resolver finds it by lookup. One key, one call.
func TestCrashAfterCallBeforeRecord(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	a := h.open(newSubject())
	h.svc.hookAfterCall = func(Attempt) error { return errCrash }
	_, err := h.svc.Execute(h.ctx, a.ID)
	require.ErrorIs(t, err, errCrash)
	got := h.get(a.ID)
	require.Equal(t, StatusPending, got.Status)
	require.Equal(t, 1, got.CallCount)
	require.Zero(t, got.CallsRecorded)
	require.Equal(t, 1, h.psp.seen(a.IdempotencyKey))

	svc := h.restart()
	r, err := svc.Execute(h.ctx, a.ID) // the job's retry in the new process
	require.NoError(t, err)
	require.False(t, r.Sent, "never re-sent blind")
	require.Equal(t, StatusUnknown, r.Attempt.Status)
	require.Equal(t, 1, h.liveJobs(ResolveAttemptKind, a.ID))

	h.clock.Advance(30 * time.Second)
	rr, err := svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusSucceeded, rr.Attempt.Status)
	require.Equal(t, 1, h.psp.totalSubmits(), "no second call, no other key")
	require.Equal(t, 1, h.owner.count(a.ID))
	require.Equal(t, []string{"opened", "transition:pending->unknown", "lookup:found_succeeded",
		"transition:unknown->succeeded"}, eventTypes(h.events(a.ID)))
	h.requireNoViolations()
}

// TestSweeperTurnsStaleCallUnknown: same crash, found by the sweeper after
// StaleCallAfter (time moved by the clock).
func TestSweeperTurnsStaleCallUnknown(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{tune: func(c *Config) { c.StaleCallAfter = 10 * time.Minute }})
	a := h.open(newSubject())
	h.svc.hookAfterCall = func(Attempt) error { return errCrash }
	_, err := h.svc.Execute(h.ctx, a.ID)
	require.ErrorIs(t, err, errCrash)
	h.svc.hookAfterCall = nil

	h.clock.Advance(9 * time.Minute)
	sr, err := h.svc.Sweep(h.ctx)
	require.NoError(t, err)
	require.Zero(t, sr.StaleToUnknown, "a call may still be running")
	h.clock.Advance(2 * time.Minute)
	sr, err = h.svc.Sweep(h.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, sr.StaleToUnknown)
	got := h.get(a.ID)
	require.Equal(t, StatusUnknown, got.Status)
	ev := h.events(a.ID)
	require.Equal(t, ActorSweeper, ev[len(ev)-1].Actor)
	require.Equal(t, 1, h.liveJobs(ResolveAttemptKind, a.ID))
	require.Zero(t, promGaugeValue(h.metrics.OldestUnknownAge), "just became unknown")
	require.Zero(t, promGaugeValue(h.metrics.ReviewQueueSize))

	// A lost resolver job is found by Verify and re-created by the sweeper.
	_, err = h.pool.Exec(h.ctx, `DELETE FROM river_job WHERE kind = $1`, ResolveAttemptKind)
	require.NoError(t, err)
	vs, err := Verify(h.ctx, h.pool)
	require.NoError(t, err)
	require.Len(t, vs, 1)
	require.Equal(t, "unresolved_orphan", vs[0].Code)
	h.clock.Advance(time.Minute)
	sr, err = h.svc.Sweep(h.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, sr.ResolversEnqueued)
	require.Equal(t, float64(60), promGaugeValue(h.metrics.OldestUnknownAge))
	h.requireNoViolations()

	rr, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusSucceeded, rr.Attempt.Status)
	require.Equal(t, 1, h.psp.totalSubmits())
}

// TestCrashChildProcess kills a real process (os.Exit in a child test
// binary) after the call left and before it was recorded.
func TestCrashChildProcess(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	a := h.open(newSubject())

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChildHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ATTEMPTS_CRASH_DB="+testdb.AdminURL(t, h.pool),
		"ATTEMPTS_CRASH_PSP="+h.psp.srv.URL, "ATTEMPTS_CRASH_ATTEMPT="+a.ID.String(),
		"ATTEMPTS_CRASH_NOW="+h.clock.Now().Format(time.RFC3339Nano))
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	require.ErrorAs(t, err, &exitErr, "child output: %s", out)
	require.Equal(t, 3, exitErr.ExitCode(), "child output: %s", out)

	got := h.get(a.ID)
	require.Equal(t, StatusPending, got.Status)
	require.True(t, got.CallInFlight())
	require.Equal(t, 1, h.psp.seen(a.IdempotencyKey), "the call left the dead process")

	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, r.Sent)
	require.Equal(t, StatusUnknown, r.Attempt.Status)
	h.clock.Advance(30 * time.Second)
	rr, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusSucceeded, rr.Attempt.Status)
	require.Equal(t, 1, h.psp.totalSubmits())
	require.Equal(t, 1, h.owner.count(a.ID))
	h.requireNoViolations()
}

// TestCrashChildHelper is the child of TestCrashChildProcess: it executes
// the attempt and exits the process between the call and the record. Run
// alone (without the environment) it only checks that it is not the child.
func TestCrashChildHelper(t *testing.T) {
	dbURL := os.Getenv("ATTEMPTS_CRASH_DB")
	if dbURL == "" {
		require.Empty(t, os.Getenv("ATTEMPTS_CRASH_ATTEMPT"))
		return
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	now, err := time.Parse(time.RFC3339Nano, os.Getenv("ATTEMPTS_CRASH_NOW"))
	require.NoError(t, err)
	clock := &fakeClock{now: now}
	prov := newTestProvider("fake", os.Getenv("ATTEMPTS_CRASH_PSP"), stdCaps(), 5*time.Second)
	svc, err := New(Config{Pool: pool, Providers: map[string]providers.Provider{"fake": prov}, Clock: clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	svc.hookAfterCall = func(Attempt) error {
		os.Exit(3) // the process dies: no deferred function, no record
		return nil
	}
	_, _ = svc.Execute(ctx, uuid.MustParse(os.Getenv("ATTEMPTS_CRASH_ATTEMPT")))
	t.Fatal("the child should have exited during Execute")
}

// TestWindowCountsFromGivingUp (R16): after a crash noticed late by the
// sweeper, the consistency window runs from when we stopped waiting, not from
// the call's start, so a request that lingered is not declared absent early.
func TestWindowCountsFromGivingUp(t *testing.T) {
	t.Parallel()
	caps := stdCaps()
	caps.ConsistencyWindow = 5 * time.Minute
	h := setup(t, harnessOpts{caps: &caps, plan: []behaviour{behave500NoRecord}, tune: func(c *Config) {
		c.StaleCallAfter = 10 * time.Minute
		c.ResolveSchedule = []time.Duration{time.Minute}
	}})
	a := h.open(newSubject())
	h.svc.hookAfterCall = func(Attempt) error { return errCrash }
	_, err := h.svc.Execute(h.ctx, a.ID)
	require.ErrorIs(t, err, errCrash)
	h.svc.hookAfterCall = nil
	h.clock.Advance(11 * time.Minute)
	sr, err := h.svc.Sweep(h.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, sr.StaleToUnknown)
	for i := range 4 {
		h.clock.Advance(time.Minute)
		r, err := h.svc.Resolve(h.ctx, a.ID)
		require.NoError(t, err)
		require.Equal(t, StatusUnknown, r.Attempt.Status, "lookup %d, %d min after giving up", i+1, i+1)
	}
	h.clock.Advance(time.Minute)
	r, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusFailed, r.Attempt.Status)
	require.Equal(t, 1, h.psp.totalSubmits())
	h.requireNoViolations()
}
