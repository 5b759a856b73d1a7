package attempts

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExecuteAgainstServers runs one Execute against each kind of server
// (R2) and checks the outcome, the status, the events and how many times
// the server saw the key.
func TestExecuteAgainstServers(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		plan       behaviour
		dead       bool
		outcome    Outcome
		status     Status
		events     []string
		keySeen    int
		retry      bool
		resolver   bool
		ownerCalls int
	}{
		{name: "connection refused", dead: true, outcome: OutcomeNotSent, status: StatusPending,
			events: []string{"opened", "call:not_sent"}, keySeen: 0, retry: true},
		{name: "accepts and hangs past the read timeout", plan: behaveHang, outcome: OutcomeUnknown, status: StatusUnknown,
			events: []string{"opened", "call:unknown", "transition:pending->unknown"}, keySeen: 1, resolver: true},
		{name: "500 after recording", plan: behave500AfterRecord, outcome: OutcomeUnknown, status: StatusUnknown,
			events: []string{"opened", "call:unknown", "transition:pending->unknown"}, keySeen: 1, resolver: true},
		{name: "429 with Retry-After", plan: behave429, outcome: OutcomeRateLimited, status: StatusPending,
			events: []string{"opened", "call:rate_limited"}, keySeen: 1, retry: true},
		{name: "409 in flight", plan: behave409, outcome: OutcomeInFlight, status: StatusUnknown,
			events: []string{"opened", "call:in_flight", "transition:pending->unknown"}, keySeen: 1, resolver: true},
		{name: "402 declined", plan: behaveDecline, outcome: OutcomeFailed, status: StatusFailed,
			events: []string{"opened", "call:failed", "transition:pending->failed"}, keySeen: 1, ownerCalls: 1},
		{name: "201 succeeded", plan: behaveOK, outcome: OutcomeSucceeded, status: StatusSucceeded,
			events: []string{"opened", "call:succeeded", "transition:pending->succeeded"}, keySeen: 1, ownerCalls: 1},
		{name: "202 processing", plan: behaveProcessing, outcome: OutcomeProcessing, status: StatusPending,
			events: []string{"opened", "call:processing", "processing"}, keySeen: 1, resolver: true},
		{name: "400 key misuse", plan: behaveKeyMisuse, outcome: OutcomeKeyMisuse, status: StatusUnknown,
			events: []string{"opened", "call:key_misuse", "transition:pending->unknown", "review"}, keySeen: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rt := 10 * time.Second // generous: a loaded machine must not manufacture unknowns (R3)
			if c.plan == behaveHang {
				rt = 300 * time.Millisecond
			}
			h := setup(t, harnessOpts{plan: []behaviour{c.plan}, readTimeout: rt})
			if c.dead {
				h.prov.setBase(deadURL(t))
			}
			a := h.open(newSubject())
			r, err := h.svc.Execute(h.ctx, a.ID)
			require.NoError(t, err)
			require.True(t, r.Sent)
			require.Equal(t, c.outcome, r.Outcome)
			require.Equal(t, c.status, r.Attempt.Status)
			got := h.get(a.ID)
			require.Equal(t, c.status, got.Status)
			require.Equal(t, 1, got.CallCount)
			require.Equal(t, 1, got.CallsRecorded)
			require.Equal(t, c.events, eventTypes(h.events(a.ID)))
			require.Equal(t, c.keySeen, h.psp.seen(a.IdempotencyKey))
			require.Equal(t, c.retry, r.RetryIn > 0, "retry in %s", r.RetryIn)
			if c.resolver {
				require.Equal(t, 1, h.liveJobs(ResolveAttemptKind, a.ID))
			}
			require.Equal(t, c.ownerCalls, h.owner.count(a.ID))
			require.Equal(t, float64(1), testCounter(h.metrics.Calls))
			transitions := 0
			for _, e := range c.events {
				if strings.HasPrefix(e, "transition:") {
					transitions++
				}
			}
			require.Equal(t, float64(transitions), testCounter(h.metrics.Transitions))
			require.Len(t, h.ownerEffects(a.ID), c.ownerCalls)
			call := h.events(a.ID)[1]
			require.Equal(t, 1, call.CallNumber)
			require.NotNil(t, call.StartedAt)
			if !c.dead && c.plan != behaveHang {
				require.NotEmpty(t, call.ProviderRequestID)
				require.NotZero(t, call.StatusCode)
			}
			if c.plan == behave429 {
				require.Equal(t, 7*time.Second, r.RetryIn, "Retry-After is honoured")
			}
			if !c.dead && c.plan == behaveOK {
				require.Equal(t, "op_"+a.Reference[:12], got.ProviderID)
			}
			if c.plan == behaveKeyMisuse {
				require.True(t, got.Review)
				require.EqualValues(t, 1, h.reviews.Load())
			}
			h.requireNoViolations()
		})
	}
}

// TestNotSentResendsSameKeyAndBytes (R5): after "connection refused" the
// re-send carries the same key and byte-identical payload, after the backoff.
func TestNotSentResendsSameKeyAndBytes(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	live := h.psp.srv.URL
	h.prov.setBase(deadURL(t))
	a := h.open(newSubject())
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, OutcomeNotSent, r.Outcome)
	require.Positive(t, r.RetryIn)

	// Too early: no call, just the remaining wait.
	h.prov.setBase(live)
	r2, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, r2.Sent)
	require.Positive(t, r2.RetryIn)
	require.Zero(t, h.psp.totalSubmits())

	h.clock.Advance(r.RetryIn)
	r3, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.True(t, r3.Sent)
	require.Equal(t, StatusSucceeded, r3.Attempt.Status)
	require.Equal(t, 1, h.psp.seen(a.IdempotencyKey))
	require.Equal(t, [][]byte{a.Payload}, h.psp.bodies[a.IdempotencyKey])
	require.Equal(t, 2, r3.Attempt.CallCount)
	require.Equal(t, []string{"opened", "call:not_sent", "call:succeeded", "transition:pending->succeeded"},
		eventTypes(h.events(a.ID)))
}

// TestRateLimitedThenSucceeds: 429 honours Retry-After with the injected
// clock and re-sends with the same key.
func TestRateLimitedThenSucceeds(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{plan: []behaviour{behave429, behaveOK}})
	a := h.open(newSubject())
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, 7*time.Second, r.RetryIn)
	h.clock.Advance(6 * time.Second)
	r, err = h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, r.Sent)
	require.Equal(t, time.Second, r.RetryIn)
	h.clock.Advance(time.Second)
	r, err = h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusSucceeded, r.Attempt.Status)
	require.Equal(t, 2, h.psp.seen(a.IdempotencyKey))
	for _, b := range h.psp.bodies[a.IdempotencyKey] {
		require.Equal(t, a.Payload, b)
	}
	require.Equal(t, 1, h.owner.count(a.ID))
}

// TestKeyExpiredNeverResends (R14): a re-send after the provider's key
// lifetime could create a second operation; the attempt becomes unknown.
func TestKeyExpiredNeverResends(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{plan: []behaviour{behave429, behaveOK}})
	a := h.open(newSubject())
	_, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	h.clock.Advance(25 * time.Hour)
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, r.Sent)
	require.Equal(t, StatusUnknown, r.Attempt.Status)
	require.Equal(t, 1, h.psp.seen(a.IdempotencyKey))
	require.Equal(t, 1, h.liveJobs(ResolveAttemptKind, a.ID))
	ev := h.events(a.ID)
	require.Contains(t, ev[len(ev)-1].Reason, "key expired")
}

// TestMaxSends: a provider that keeps refusing connections is not called
// forever; after MaxSends the attempt is unknown and resolved by lookup.
func TestMaxSends(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{tune: func(c *Config) { c.MaxSends = 3 }})
	h.prov.setBase(deadURL(t))
	a := h.open(newSubject())
	for i := 1; i <= 3; i++ {
		r, err := h.svc.Execute(h.ctx, a.ID)
		require.NoError(t, err)
		require.True(t, r.Sent)
		h.clock.Advance(time.Hour)
		if i < 3 {
			require.Equal(t, StatusPending, r.Attempt.Status)
		} else {
			require.Equal(t, StatusUnknown, r.Attempt.Status)
		}
	}
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, r.Sent)
	require.Equal(t, 3, h.get(a.ID).CallCount)
}

// TestOwnerErrorRollsBackTransition: the owner's refusal rolls back the
// transition; nothing is re-sent; the attempt is recovered by lookup.
func TestOwnerErrorRollsBackTransition(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	a := h.open(newSubject())
	h.owner.fail.Store(true)
	_, err := h.svc.Execute(h.ctx, a.ID)
	require.Error(t, err)
	got := h.get(a.ID)
	require.Equal(t, StatusPending, got.Status)
	require.True(t, got.CallInFlight(), "the call is durably marked, its record rolled back")

	h.owner.fail.Store(false)
	r, err := h.svc.Execute(h.ctx, a.ID) // the job's retry
	require.NoError(t, err)
	require.False(t, r.Sent, "never re-sent blind")
	require.Equal(t, StatusUnknown, r.Attempt.Status)
	h.clock.Advance(30 * time.Second)
	rr, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.True(t, rr.Transitioned)
	require.Equal(t, StatusSucceeded, rr.Attempt.Status)
	require.Equal(t, 1, h.psp.seen(a.IdempotencyKey))
	require.Equal(t, 1, h.owner.count(a.ID))
	h.requireNoViolations()
}

// TestConcurrentExecute: two executions of one attempt at once make one call.
func TestConcurrentExecute(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	for range 5 {
		a := h.open(newSubject())
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := h.svc.Execute(h.ctx, a.ID)
				assert.NoError(t, err) // not require: FailNow only from the test goroutine
			}()
		}
		wg.Wait()
		require.Equal(t, 1, h.psp.seen(a.IdempotencyKey))
		got := h.get(a.ID)
		require.Equal(t, StatusSucceeded, got.Status)
		require.Equal(t, 1, h.owner.count(a.ID))
	}
	h.requireNoViolations()
}

// TestPayloadHashGuardedByDatabase (R5): the stored hash cannot drift from the
// stored bytes (CHECK sha256(payload) = payload_sha256), and Execute checks it
// again before anything leaves the process.
func TestPayloadHashGuardedByDatabase(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	a := h.open(newSubject())
	_, err := h.pool.Exec(h.ctx, `UPDATE attempts SET payload_sha256 = sha256('x'::bytea) WHERE id = $1`, a.ID)
	require.Error(t, err, "the database refuses a hash change")
	require.Zero(t, h.psp.totalSubmits())
}
