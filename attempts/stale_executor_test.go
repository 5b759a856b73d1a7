package attempts

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// Two executors of one attempt at once (a duplicate submit job): the
// batched call-start mark and Execute answer as one at a time would.

// pausingClock is a fakeClock whose Now can be made to stop once, on its nth
// call from now (every caller counts), until released: a pause at a known
// point of an execution, as a GC pause or a descheduled goroutine would make.
type pausingClock struct {
	*fakeClock
	mu      sync.Mutex
	left    int
	hit     chan struct{}
	release chan struct{}
}

// arm stops the nth call of Now from now until the returned release is
// called; hit is closed when that call arrives.
func (c *pausingClock) arm(n int) (hit <-chan struct{}, release func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.left, c.hit, c.release = n, make(chan struct{}), make(chan struct{})
	rel := c.release
	var once sync.Once
	return c.hit, func() { once.Do(func() { close(rel) }) }
}

func (c *pausingClock) Now() time.Time {
	c.mu.Lock()
	if c.left > 0 {
		c.left--
		if c.left == 0 {
			hit, rel := c.hit, c.release
			c.mu.Unlock()
			close(hit)
			<-rel
			return c.fakeClock.Now()
		}
	}
	c.mu.Unlock()
	return c.fakeClock.Now()
}

// The batched call-start mark (startMany) answers each request as the
// one-at-a-time mark would (decision 0002; R10, R12): an attempt named twice
// in one batch by two executors that read it at different calls (a stale
// one asking for call 2, a fresh one for call 3) is marked for call 3, and
// only the request for call 3 is told it marked.
func TestStartManyAnswersByCall_R10_R12(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{plan: []behaviour{behave429}})
	a := h.open(newSubject())
	for call := 1; call <= 2; call++ {
		r, err := h.svc.Execute(h.ctx, a.ID)
		require.NoError(t, err)
		require.True(t, r.Sent)
		require.Equal(t, OutcomeRateLimited, r.Outcome)
		h.clock.Advance(8 * time.Second) // past Retry-After: 7
	}
	got := h.get(a.ID)
	require.Equal(t, StatusPending, got.Status)
	require.Equal(t, 2, got.CallCount)
	require.Equal(t, 2, got.CallsRecorded)

	now := h.clock.Now()
	stale := startReq{id: a.ID, callNo: 2, started: now} // read before call 2 was made
	fresh := startReq{id: a.ID, callNo: 3, started: now} // read after call 2 was recorded
	res := h.svc.startMany(h.ctx, []startReq{stale, fresh})
	require.NoError(t, res[0].Err)
	require.NoError(t, res[1].Err)
	got = h.get(a.ID)
	require.Equal(t, 3, got.CallCount, "the statement marked call 3 (the fresh request's)")
	// One at a time: call 2 cannot be marked (call_count is 2, not 1); call 3 is.
	require.Equal(t, []bool{false, true}, []bool{res[0].Value, res[1].Value},
		"the mark of call 3 was answered to the request for call 2: the stale executor calls, the fresh one does not")
}

// The same race through Execute: two executors of one attempt, one paused
// between its read and its call-start mark while the other makes call 2,
// then both reach the call-start batcher together. As one at a time, the
// stale one's mark (call 2) is refused and the fresh one makes call 3 and
// records the provider's answer (R1, R12): with a plain owner and with a
// BatchOwner (payouts, charges, recorded by recordSQL).
func TestStaleExecutorNeverGetsTheMark_R1_R12(t *testing.T) {
	t.Parallel()
	for _, batched := range []bool{false, true} {
		name := "owner"
		if batched {
			name = "batch_owner"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			staleExecutorRace(t, batched)
		})
	}
}

func staleExecutorRace(t *testing.T, batched bool) {
	gc := &pausingClock{fakeClock: newFakeClock()}
	h := setup(t, harnessOpts{plan: []behaviour{behave429}, tune: func(c *Config) { c.Clock = gc }})
	h.clock = gc.fakeClock
	if batched {
		bo := newBatchRecorder()
		for _, k := range Kinds {
			h.svc.RegisterOwner(k, bo)
		}
	}
	x := h.open(newSubject())
	y := h.open(newSubject()) // holds the call-start batcher busy at the right moment
	for _, id := range []uuid.UUID{x.ID, y.ID} {
		r, err := h.svc.Execute(h.ctx, id)
		require.NoError(t, err)
		require.Equal(t, OutcomeRateLimited, r.Outcome)
	}
	h.clock.Advance(8 * time.Second)

	// E1: reads x at call 1 (recorded), then pauses before its mark (the
	// second Now of its execution: firstSendMany's, then Execute's own).
	hit, release := gc.arm(2)
	type result struct {
		r   ExecuteResult
		err error
	}
	e1, e1id := make(chan result, 1), make(chan string, 1)
	go func() {
		e1id <- goid()
		r, err := h.svc.Execute(h.ctx, x.ID)
		e1 <- result{r, err}
	}()
	select {
	case <-hit:
	case <-time.After(10 * time.Second):
		t.Fatal("E1 never reached its pause")
	}

	// E2 (the regular job): call 2 of x, rate limited again.
	r2, err := h.svc.Execute(h.ctx, x.ID)
	require.NoError(t, err)
	require.True(t, r2.Sent)
	require.Equal(t, OutcomeRateLimited, r2.Outcome)
	h.clock.Advance(8 * time.Second)

	// Keep the call-start batcher busy: y's mark waits on a row lock.
	tx, err := h.pool.Begin(h.ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck
	_, err = tx.Exec(h.ctx, `SELECT 1 FROM attempts WHERE id = $1 FOR UPDATE`, y.ID)
	require.NoError(t, err)
	ey, eyid := make(chan result, 1), make(chan string, 1)
	go func() {
		eyid <- goid()
		r, err := h.svc.Execute(h.ctx, y.ID)
		ey <- result{r, err}
	}()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
		return n >= 1
	}, 10*time.Second, 10*time.Millisecond, "y's call-start mark waits on the lock")

	// E1 resumes and queues its mark (call 2, from its stale read); then
	// E3 (the regular job, due again) reads x at call 2 and queues call 3.
	// Each step waits for its evidence, not for a fixed time: past its
	// pause, an executor's next wait is the call-start batcher's queue, so
	// the goroutines of y, E1, then E3 too are seen waiting there. Were E1's
	// or E3's mark not yet queued when y's lock goes, the two marks would
	// not share a batch and the race would go unseen (the test would pass
	// with the defect).
	release()
	yID, e1ID := <-eyid, <-e1id
	waitQueued(t, yID, e1ID)
	hit3, release3 := gc.arm(2) // E3's read time, as E1's above
	defer release3()
	e3, e3id := make(chan result, 1), make(chan string, 1)
	go func() {
		e3id <- goid()
		r, err := h.svc.Execute(h.ctx, x.ID)
		e3 <- result{r, err}
	}()
	select {
	case <-hit3:
	case <-time.After(30 * time.Second):
		t.Fatal("E3 never read x")
	}
	release3()
	waitQueued(t, yID, e1ID, <-e3id)

	h.psp.setPlan(behaveOK)
	require.NoError(t, tx.Commit(h.ctx))
	r1, r3, ry := <-e1, <-e3, <-ey
	require.NoError(t, r1.err)
	require.NoError(t, r3.err)
	require.NoError(t, ry.err)
	t.Logf("E1 (stale): sent=%v outcome=%s; E3 (fresh): sent=%v outcome=%s", r1.r.Sent, r1.r.Outcome, r3.r.Sent, r3.r.Outcome)
	require.Equal(t, 3, h.psp.seen(x.IdempotencyKey), "x was called three times in all")

	got := h.get(x.ID)
	t.Logf("x: status=%s call_count=%d calls_recorded=%d events=%v", got.Status, got.CallCount, got.CallsRecorded,
		eventTypes(h.events(x.ID)))
	require.Equal(t, StatusSucceeded, got.Status, "the provider answered call 3 succeeded: that answer must be recorded (R1)")
	require.Equal(t, got.CallCount, got.CallsRecorded, "every call recorded (R12)")
	require.False(t, r1.r.Sent, "the stale executor (call 2 already made) must not be the one to call")
}

// goid is the calling goroutine's id, as its stack names it.
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return strings.Fields(string(buf))[1]
}

// waitQueued waits until each goroutine named (goid) waits in a batcher's
// Do called from Execute. Past its clock pause (pausingClock), an
// execution of a due attempt has only the call-start batcher left to wait
// in, so this is exact for the executions the caller has released; it reads
// the goroutines' stacks because the batcher's queue is not visible.
func waitQueued(t *testing.T, ids ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		waiting := queuedExecutions()
		all := true
		for _, id := range ids {
			all = all && waiting[id]
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines %v: not all waiting in a batcher (waiting: %v)", ids, waiting)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// queuedExecutions is the set of goroutines waiting in a batcher's Do
// called from Execute.
func queuedExecutions() map[string]bool {
	buf := make([]byte, 1<<20)
	for {
		k := runtime.Stack(buf, true)
		if k < len(buf) {
			buf = buf[:k]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]bool{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		lines := strings.Split(g, "\n")
		if len(lines) < 4 || !strings.Contains(lines[0], "[select") {
			continue
		}
		// lines[1]: the innermost function, lines[2] its file, lines[3]
		// its caller.
		if strings.Contains(lines[1], "/internal/groupcommit.(*Batcher[") && strings.Contains(lines[1], "]).Do(") &&
			strings.Contains(lines[3], "/attempts.(*Service).Execute(") {
			out[strings.Fields(lines[0])[1]] = true
		}
	}
	return out
}

// A second executor reads the attempt while the first one's call is in
// flight; the first records its answer (429: nothing processed, stays
// pending, re-sent later with the same key, R2) before the second locks the
// row. The second looks again under the lock (as Sweep does) and leaves it
// pending: a call proven not processed is sent again, not resolved by a
// lookup that would fail it "not found".
func TestExecuteLooksAgainBeforeMakingAnAttemptUnknown_R2(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{plan: []behaviour{behave429}})
	a := h.open(newSubject())
	inFlight, goOn := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.svc.hookAfterCall = func(Attempt) error {
		once.Do(func() { close(inFlight); <-goOn })
		return nil
	}
	type result struct {
		r   ExecuteResult
		err error
	}
	first := make(chan result, 1)
	go func() {
		r, err := h.svc.Execute(h.ctx, a.ID)
		first <- result{r, err}
	}()
	<-inFlight

	tx, err := h.pool.Begin(h.ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck
	_, err = tx.Exec(h.ctx, `SELECT 1 FROM attempts WHERE id = $1 FOR UPDATE`, a.ID)
	require.NoError(t, err)
	waiting := func(n int) func() bool {
		return func() bool {
			var got int
			require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got))
			return got >= n
		}
	}
	close(goOn) // the first executor records its 429: waits on the row
	require.Eventually(t, waiting(1), 10*time.Second, 10*time.Millisecond)
	second := make(chan result, 1)
	go func() {
		r, err := h.svc.Execute(h.ctx, a.ID) // reads "call 1 in flight"
		second <- result{r, err}
	}()
	require.Eventually(t, waiting(2), 10*time.Second, 10*time.Millisecond)
	require.NoError(t, tx.Commit(h.ctx))
	r1, r2 := <-first, <-second
	require.NoError(t, r1.err)
	require.NoError(t, r2.err)
	require.Equal(t, OutcomeRateLimited, r1.r.Outcome)

	got := h.get(a.ID)
	t.Logf("status=%s call_count=%d calls_recorded=%d events=%v last=%q", got.Status, got.CallCount, got.CallsRecorded,
		eventTypes(h.events(a.ID)), h.events(a.ID)[len(h.events(a.ID))-1].Reason)
	require.Equal(t, StatusPending, got.Status, "call 1 was recorded rate limited (nothing processed): it stays pending (R2)")
}
