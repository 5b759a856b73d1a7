package attempts

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/pgproxy"
	"github.com/saldo/saldo/internal/testdb"
)

// setupProxied is setup with the Service's connections going through a
// pgproxy; h.pool (the test's reads) goes direct.
func setupProxied(t *testing.T, plan ...behaviour) (*harness, *pgproxy.Proxy) {
	t.Helper()
	var proxy *pgproxy.Proxy
	h := setup(t, harnessOpts{plan: plan, tune: func(cfg *Config) {
		url := testdb.AdminURL(t, cfg.Pool)
		proxy = pgproxy.Start(t, url)
		proxied, err := pgxpool.New(t.Context(), proxy.URL(url))
		require.NoError(t, err)
		t.Cleanup(proxied.Close)
		cfg.Pool = proxied
	}})
	return h, proxy
}

// executeTogether executes the attempts ids at once, their results reaching
// the recorder together (so record batches form), and returns each
// Execute's answer.
func (h *harness) executeTogether(ids []uuid.UUID) ([]ExecuteResult, []error) {
	n := len(ids)
	var arrived atomic.Int32
	allIn := make(chan struct{})
	h.svc.hookAfterCall = func(Attempt) error {
		if arrived.Add(1) == int32(n) {
			close(allIn)
		}
		<-allIn
		return nil
	}
	defer func() { h.svc.hookAfterCall = nil }()
	res, errs := make([]ExecuteResult, n), make([]error, n)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = h.svc.Execute(h.ctx, id)
		}()
	}
	wg.Wait()
	return res, errs
}

// Issue 13 finding 1 (R9, R12): a record batch's COMMIT commits but its
// answer is lost. Its calls must not be recorded a second time: no second
// call event, no second owner hand-over; each Execute answers the attempt
// as it committed. A call alone in its batch takes the same path.
func TestAmbiguousCommitOfRecordBatchRecordsOnce_R9(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 8} {
		t.Run(fmt.Sprintf("calls_%d", n), func(t *testing.T) {
			t.Parallel()
			h, proxy := setupProxied(t)
			bo := newBatchRecorder()
			for _, k := range Kinds {
				h.svc.RegisterOwner(k, bo)
			}
			proxy.LoseCommitAnswer("calls_recorded = GREATEST(a.calls_recorded", 1) // recordSQL
			var ids []uuid.UUID
			for range n {
				ids = append(ids, h.open(newSubject()).ID)
			}
			res, errs := h.executeTogether(ids)
			require.Equal(t, 1, proxy.Cuts(), "a record batch lost its commit answer")
			for i, id := range ids {
				assert.NoError(t, errs[i])
				assert.Equal(t, StatusSucceeded, res[i].Attempt.Status)
				h.requireSucceededOnFirstCall(t, id, "each call recorded once")
			}
			h.requireNoViolations()
		})
	}
}

// The first-send mark (one statement, no redo) whose answer is lost: the
// call never left, but the attempt says a call started. The executor gets
// an error; the next execution sees the call in flight and goes to unknown
// (resolved by lookup), never re-sending blind (R14); nothing was sent.
func TestAmbiguousCommitOfFirstSendMarkNeverSendsBlind_R14(t *testing.T) {
	t.Parallel()
	h, proxy := setupProxied(t)
	a := h.open(newSubject())
	proxy.LoseCommitAnswer("call_count = 1, call_started_at", 1) // firstSendSQL
	_, err := h.svc.Execute(h.ctx, a.ID)
	require.Error(t, err, "the executor cannot know whether its mark took")
	require.Equal(t, 1, proxy.Cuts())
	require.Equal(t, 1, h.get(a.ID).CallCount, "the mark committed")
	res, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, res.Sent)
	require.Equal(t, StatusUnknown, res.Attempt.Status)
	require.Zero(t, h.psp.totalSubmits(), "nothing re-sent blind")
	h.requireNoViolations()
}

// The call-start mark of a re-send (startSQL, batched, no redo) whose answer
// is lost: the executor gets an error, the mark committed, and the next
// execution finds the call in flight and goes to unknown without sending
// (R14): the PSP saw only the first call (a 429).
func TestAmbiguousCommitOfCallStartMarkNeverSendsBlind_R14(t *testing.T) {
	t.Parallel()
	h, proxy := setupProxied(t, behave429, behaveOK)
	a := h.open(newSubject())
	res, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, OutcomeRateLimited, res.Outcome)
	h.clock.Advance(res.RetryIn + time.Second)
	proxy.LoseCommitAnswer("a.call_count = u.call_no - 1", 1) // startSQL
	_, err = h.svc.Execute(h.ctx, a.ID)
	require.Error(t, err)
	require.Equal(t, 1, proxy.Cuts())
	require.Equal(t, 2, h.get(a.ID).CallCount, "the mark committed")
	res, err = h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, res.Sent)
	require.Equal(t, StatusUnknown, res.Attempt.Status)
	require.Equal(t, 1, h.psp.totalSubmits(), "nothing re-sent blind")
	h.requireNoViolations()
}
