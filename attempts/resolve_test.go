package attempts

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// unknownAttempt opens an attempt and executes it against a server that
// records the operation and answers 500: unknown, operation exists.
func unknownAttempt(t *testing.T, h *harness) Attempt {
	t.Helper()
	h.psp.setPlan(behave500AfterRecord)
	a := h.open(newSubject())
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusUnknown, r.Attempt.Status)
	return r.Attempt
}

// unknownNeverFound is an attempt gone unknown (a 500, nothing recorded)
// at a provider whose consistency window never passes: every lookup comes
// back "not found" and concludes nothing.
func unknownNeverFound(t *testing.T) (*harness, Attempt) {
	t.Helper()
	caps := stdCaps()
	caps.ConsistencyWindow = 365 * 24 * time.Hour
	h := setup(t, harnessOpts{caps: &caps, plan: []behaviour{behave500NoRecord}})
	a := h.open(newSubject())
	_, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	return h, a
}

// TestResolverSchedule (R15): the first lookup waits 30s, then 1, 2, 5, 10,
// 30 minutes, then every 30 minutes, all with the injected clock.
func TestResolverSchedule(t *testing.T) {
	t.Parallel()
	h, a := unknownNeverFound(t)

	r, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, r.RetryIn, "first lookup after 30s")
	require.Zero(t, h.psp.lookupCount())
	h.clock.Advance(29 * time.Second)
	r, err = h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, time.Second, r.RetryIn)
	require.Zero(t, h.psp.lookupCount())
	h.clock.Advance(time.Second)

	want := []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute,
		30 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	for i, w := range want {
		r, err := h.svc.Resolve(h.ctx, a.ID)
		require.NoError(t, err)
		require.Equal(t, i+1, h.psp.lookupCount())
		require.Equal(t, StatusUnknown, r.Attempt.Status)
		require.Equal(t, w, r.RetryIn, "after lookup %d", i+1)
		h.clock.Advance(w)
	}
	require.Zero(t, h.psp.totalSubmits()-1, "never re-sent")
}

// TestResolveNotFoundRespectsWindow (R16): "not found" fails the attempt only
// after the consistency window since the last call.
func TestResolveNotFoundRespectsWindow(t *testing.T) {
	t.Parallel()
	caps := stdCaps()
	caps.ConsistencyWindow = 10 * time.Minute
	h := setup(t, harnessOpts{caps: &caps, plan: []behaviour{behave500NoRecord}, tune: func(c *Config) {
		c.ResolveSchedule = []time.Duration{time.Minute}
	}})
	a := h.open(newSubject())
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusUnknown, r.Attempt.Status)

	for i := range 9 {
		h.clock.Advance(time.Minute)
		rr, err := h.svc.Resolve(h.ctx, a.ID)
		require.NoError(t, err)
		require.Equal(t, StatusUnknown, rr.Attempt.Status, "minute %d: not found is not proof of absence", i+1)
	}
	h.clock.Advance(time.Minute)
	rr, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.True(t, rr.Transitioned)
	require.Equal(t, StatusFailed, rr.Attempt.Status)
	require.Equal(t, "not_found", rr.Attempt.FailureCode)
	require.Equal(t, 10, h.psp.lookupCount())
	require.Equal(t, 1, h.psp.seen(a.IdempotencyKey))
	require.Equal(t, 1, h.owner.count(a.ID))
	require.Equal(t, []string{"failed"}, h.ownerEffects(a.ID))
	h.requireNoViolations()
}

// TestResolveFindsSucceeded: unknown after a 500 that recorded the
// operation; the lookup finds it succeeded; no re-send ever (R14).
func TestResolveFindsSucceeded(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	a := unknownAttempt(t, h)
	h.clock.Advance(30 * time.Second)
	r, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.True(t, r.Transitioned)
	require.Equal(t, StatusSucceeded, r.Attempt.Status)
	require.Equal(t, "op_"+a.Reference[:12], r.Attempt.ProviderID)
	require.Equal(t, ActorResolver, Actor(r.Attempt.ResolvedBy))
	require.Zero(t, r.RetryIn)
	require.Equal(t, 1, h.psp.seen(a.IdempotencyKey))
	require.Equal(t, []string{"opened", "call:unknown", "transition:pending->unknown", "lookup:found_succeeded",
		"transition:unknown->succeeded"}, eventTypes(h.events(a.ID)))
	// Executing again sends nothing.
	e, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, e.Sent)
	require.Equal(t, 1, h.psp.seen(a.IdempotencyKey))
	// Resolving again does nothing.
	r, err = h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, r.Transitioned)
	require.Equal(t, 1, h.psp.lookupCount())
	require.Equal(t, 1, h.owner.count(a.ID))
	h.requireNoViolations()
}

// TestProcessingResolvedByLookup: 202 processing keeps the attempt pending;
// the resolver follows it until the provider says succeeded.
func TestProcessingResolvedByLookup(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{plan: []behaviour{behaveProcessing}})
	a := h.open(newSubject())
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusPending, r.Attempt.Status)
	require.Equal(t, "processing", r.Attempt.ProviderState)
	require.True(t, r.Attempt.AwaitingResolution())
	// Execute never re-sends a processing attempt.
	e, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, e.Sent)

	h.clock.Advance(30 * time.Second)
	rr, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusPending, rr.Attempt.Status)
	require.Equal(t, time.Minute, rr.RetryIn)

	h.psp.setOp(a.Reference, "succeeded")
	h.clock.Advance(time.Minute)
	rr, err = h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.True(t, rr.Transitioned)
	require.Equal(t, StatusSucceeded, rr.Attempt.Status)
	require.Equal(t, 1, h.psp.seen(a.IdempotencyKey))
	require.Equal(t, 1, h.owner.count(a.ID))
	h.requireNoViolations()
}

// TestProcessingTooLongGoesToReview (R18): a provider that keeps answering
// processing sends the attempt to review, never to failed.
func TestProcessingTooLongGoesToReview(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{plan: []behaviour{behaveProcessing}, tune: func(c *Config) {
		c.ProcessingReviewAfter = time.Hour
	}})
	a := h.open(newSubject())
	_, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	var r ResolveResult
	for range 20 {
		h.clock.Advance(10 * time.Minute)
		r, err = h.svc.Resolve(h.ctx, a.ID)
		require.NoError(t, err)
		if r.Attempt.Review {
			break
		}
	}
	require.True(t, r.Attempt.Review)
	require.Equal(t, StatusPending, r.Attempt.Status)
	require.Contains(t, r.Attempt.ReviewReason, "processing since")
	require.Zero(t, r.RetryIn)
	require.EqualValues(t, 1, h.reviews.Load())
	require.Zero(t, h.owner.count(a.ID))
	// Sweeps don't bring a resolver back for a reviewed attempt.
	_, err = h.svc.Sweep(h.ctx)
	require.NoError(t, err)
	h.requireNoViolations()
	// Review queue lists it; an operator resolves it.
	q, next, err := h.svc.ReviewQueue(h.ctx, h.pool, ReviewQueueParams{})
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, q, 1)
	require.Equal(t, a.ID, q[0].ID)
	_, err = h.svc.ResolveManually(h.ctx, a.ID, StatusSucceeded, "", "no operator", nil)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = h.svc.ResolveManually(h.ctx, a.ID, StatusUnknown, "op_1", "x", nil)
	require.ErrorIs(t, err, ErrInvalid)
	m, err := h.svc.ResolveManually(h.ctx, a.ID, StatusSucceeded, "op_1", "confirmed on the PSP dashboard",
		json.RawMessage(`{"ticket":"T-1"}`))
	require.NoError(t, err)
	require.True(t, m.Transitioned)
	require.Equal(t, StatusSucceeded, m.Attempt.Status)
	ev := h.events(a.ID)
	last := ev[len(ev)-1]
	require.Equal(t, ActorOperator, last.Actor)
	require.Equal(t, "op_1", last.ActorID)
	require.JSONEq(t, `{"ticket":"T-1"}`, string(last.Evidence))
	// Again: same status is a no-op, a different one refused.
	m, err = h.svc.ResolveManually(h.ctx, a.ID, StatusSucceeded, "op_1", "again", nil)
	require.NoError(t, err)
	require.False(t, m.Transitioned)
	_, err = h.svc.ResolveManually(h.ctx, a.ID, StatusFailed, "op_1", "change of mind", nil)
	require.ErrorIs(t, err, ErrTransition)
	q, _, err = h.svc.ReviewQueue(h.ctx, h.pool, ReviewQueueParams{})
	require.NoError(t, err)
	require.Empty(t, q)
	require.Equal(t, 1, h.owner.count(a.ID))
}

// TestLookupsExhaustedGoToReview (R18) and providers without lookup (R25):
// MaxLookups answered lookups ("not found" inside a window that never
// passes) end in review, never in failed.
func TestLookupsExhaustedGoToReview(t *testing.T) {
	t.Parallel()
	caps := stdCaps()
	caps.ConsistencyWindow = 365 * 24 * time.Hour
	h := setup(t, harnessOpts{caps: &caps, tune: func(c *Config) { c.MaxLookups = 3 }})
	h.psp.mu.Lock()
	h.psp.hideUntil = 1 << 30
	h.psp.mu.Unlock()
	a := unknownAttempt(t, h)
	for range 10 {
		h.clock.Advance(time.Hour)
		r, err := h.svc.Resolve(h.ctx, a.ID)
		require.NoError(t, err)
		require.Equal(t, StatusUnknown, r.Attempt.Status, "not found inside the window proves nothing")
		if r.Attempt.Review {
			break
		}
	}
	got := h.get(a.ID)
	require.True(t, got.Review)
	require.Equal(t, 3, got.LookupCount)
	require.Zero(t, got.LookupsUnanswered)
	require.Contains(t, got.ReviewReason, "3 answered lookups")
	require.EqualValues(t, 1, h.reviews.Load())
	require.Equal(t, float64(1), testCounter(h.metrics.ReviewFlagged))
}

// TestUnansweredLookupsGoToReviewAfterADay (R15, R18): lookups that fail at
// transport level prove nothing and do not use up MaxLookups; an attempt
// whose lookups have gone unanswered for UnansweredReviewAfter in a row
// goes to review, never to failed.
func TestUnansweredLookupsGoToReviewAfterADay(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{tune: func(c *Config) {
		c.MaxLookups = 3
		c.UnansweredReviewAfter = 5 * time.Hour
	}})
	a := unknownAttempt(t, h)
	h.prov.setBase(deadURL(t))
	var firstUnanswered time.Time
	for i := range 20 {
		h.clock.Advance(time.Hour)
		if i == 0 {
			firstUnanswered = h.clock.Now()
		}
		r, err := h.svc.Resolve(h.ctx, a.ID)
		require.NoError(t, err)
		require.Equal(t, StatusUnknown, r.Attempt.Status, "a lookup that failed proves nothing")
		if r.Attempt.Review {
			break
		}
		require.Equal(t, i+1, r.Attempt.LookupsUnanswered)
		require.NotNil(t, r.Attempt.UnansweredSince)
		require.True(t, r.Attempt.UnansweredSince.Equal(firstUnanswered), "the run began at the first unanswered lookup")
	}
	got := h.get(a.ID)
	require.True(t, got.Review)
	require.Equal(t, 5, got.LookupCount, "unanswered lookups at 1h..5h; the 6th hour's run flags it without looking up")
	require.Equal(t, 5, got.LookupsUnanswered)
	require.Contains(t, got.ReviewReason, "answered none of the 5 lookups")
	require.EqualValues(t, 1, h.reviews.Load())
}

// TestUnansweredLookupKeepsTheSchedule (R15): a lookup the provider did not
// answer (5xx, 429) does not push the next one further out: it comes after
// the same step's delay again, or after the provider's Retry-After when
// longer (capped at the schedule's longest delay); only answered lookups
// move the attempt along the schedule. A run of refused lookups used to
// carry an attempt to the 30 min step, past the chaos long form's 15 min
// (docs/reliability.md).
func TestUnansweredLookupKeepsTheSchedule(t *testing.T) {
	t.Parallel()
	h, a := unknownNeverFound(t)
	h.clock.Advance(30 * time.Second)

	steps := []struct {
		fail    *lookupFail
		wait    time.Duration
		answers int
	}{
		{nil, time.Minute, 1},                                             // answered (not found): step 1
		{&lookupFail{status: 503}, time.Minute, 1},                        // unanswered: step 1 again
		{&lookupFail{status: 429, retryAfter: "180"}, 3 * time.Minute, 1}, // Retry-After longer than the step
		{&lookupFail{status: 429, retryAfter: "5"}, time.Minute, 1},       // shorter: the step
		{&lookupFail{status: 500}, time.Minute, 1},
		{nil, 2 * time.Minute, 2}, // answered: step 2
		{nil, 5 * time.Minute, 3},
		{nil, 10 * time.Minute, 4},
		{nil, 30 * time.Minute, 5},
		{&lookupFail{status: 429, retryAfter: "7200"}, 30 * time.Minute, 5}, // capped at the longest delay
		{&lookupFail{status: 502}, 30 * time.Minute, 5},
		{nil, 30 * time.Minute, 6},
	}
	var since *time.Time
	unanswered := 0
	for i, st := range steps {
		if st.fail != nil {
			h.psp.failLookups(*st.fail)
			unanswered++
			if since == nil {
				now := h.clock.Now()
				since = &now
			}
		} else {
			since = nil
		}
		r, err := h.svc.Resolve(h.ctx, a.ID)
		require.NoError(t, err)
		require.Equal(t, i+1, h.psp.lookupCount())
		require.Equal(t, StatusUnknown, r.Attempt.Status)
		require.Equal(t, st.wait, r.RetryIn, "after lookup %d", i+1)
		require.Equal(t, i+1, r.Attempt.LookupCount)
		require.Equal(t, unanswered, r.Attempt.LookupsUnanswered, "after lookup %d", i+1)
		require.Equal(t, st.answers, r.Attempt.LookupCount-r.Attempt.LookupsUnanswered)
		if since == nil {
			require.Nil(t, r.Attempt.UnansweredSince, "after lookup %d", i+1)
		} else {
			require.NotNil(t, r.Attempt.UnansweredSince, "after lookup %d", i+1)
			require.True(t, since.Equal(*r.Attempt.UnansweredSince), "after lookup %d", i+1)
		}
		h.clock.Advance(st.wait)
	}
	require.Zero(t, h.psp.totalSubmits()-1, "never re-sent")
	lookups := func(outcome string) float64 {
		return testutil.ToFloat64(h.metrics.Lookups.WithLabelValues(string(a.Kind), a.Provider, outcome))
	}
	require.Equal(t, float64(unanswered), lookups("unanswered"), "saldo_attempts_lookups_total")
	require.Equal(t, float64(len(steps)-unanswered), lookups("not_found"))
	require.Zero(t, lookups("found"))
	h.requireNoViolations()
}

func TestNoLookupProviderGoesToReview(t *testing.T) {
	t.Parallel()
	caps := stdCaps()
	caps.LookupByReference = false
	h := setup(t, harnessOpts{caps: &caps})
	a := unknownAttempt(t, h)
	r, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.True(t, r.Attempt.Review)
	require.Contains(t, r.Attempt.ReviewReason, "R25")
	require.Equal(t, StatusUnknown, r.Attempt.Status)
	h.requireNoViolations()
}

// TestResolveByReference (R17): idempotent, duplicates and out-of-order
// events harmless, processing never downgrades, finals never change.
func TestResolveByReference(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	a := unknownAttempt(t, h)

	_, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: NewReference(), State: providers.StateSucceeded, Source: SourceWebhook})
	require.ErrorIs(t, err, ErrNotFound)
	_, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: "paid", Source: SourceWebhook})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded, Source: "email"})
	require.ErrorIs(t, err, ErrInvalid)

	// processing first: stays unknown, no downgrade, no transition.
	r, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateProcessing,
		Source: SourceWebhook, Actor: "evt_1"})
	require.NoError(t, err)
	require.False(t, r.Transitioned)
	require.Equal(t, StatusUnknown, r.Attempt.Status)

	// A different provider id than the one the provider will report: flagged.
	r, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
		ProviderID: "op_x", Source: SourceWebhook, Actor: "evt_2"})
	require.NoError(t, err)
	require.True(t, r.Transitioned)
	require.Equal(t, StatusSucceeded, r.Attempt.Status)
	require.Equal(t, "op_x", r.Attempt.ProviderID)

	for _, st := range []providers.State{providers.StateSucceeded, providers.StateProcessing, providers.StateFailed} {
		r, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: st, Source: SourceWebhook, Actor: "evt_late"})
		require.NoError(t, err)
		require.False(t, r.Transitioned, st)
		require.Equal(t, StatusSucceeded, r.Attempt.Status, st)
	}
	require.Equal(t, 1, h.owner.count(a.ID))
	ev := h.events(a.ID)
	require.Equal(t, EventNote, ev[len(ev)-2].Type, "a contradicting late event is kept as a note")
	// R9, R19: the late "failed" is a reversal: the status stays, the
	// divergence is recorded and the attempt is in review until settled.
	require.Equal(t, EventReview, ev[len(ev)-1].Type)
	require.Equal(t, float64(1), testCounter(h.metrics.Conflicts))
	got := h.get(a.ID)
	require.NotNil(t, got.DivergedAt)
	require.True(t, got.Review)
	_, err = h.svc.SettleDivergence(h.ctx, a.ID, "op_1", "booked the reversal with the merchant", HoldNone)
	require.NoError(t, err)
	h.requireNoViolations()

	// Provider id contradiction on an open attempt: review, no transition.
	b := unknownAttempt(t, h)
	_, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: b.Reference, State: providers.StateProcessing,
		ProviderID: "op_first", Source: SourceWebhook})
	require.NoError(t, err)
	r, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: b.Reference, State: providers.StateSucceeded,
		ProviderID: "op_second", Source: SourceWebhook})
	require.ErrorIs(t, err, ErrProviderIDMismatch)
	require.False(t, r.Transitioned)
	require.True(t, r.Attempt.Review)
	require.Equal(t, StatusUnknown, h.get(b.ID).Status)
	require.Zero(t, h.owner.count(b.ID))

	// Operator via reference needs an id and a reason.
	_, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: b.Reference, State: providers.StateFailed, Source: SourceOperator})
	require.ErrorIs(t, err, ErrInvalid)
}

// TestWebhookAndResolverRace (R10, R17): a webhook and the resolver resolve
// the same attempt at once: one transition, the owner called exactly once.
func TestWebhookAndResolverRace(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	for range 8 {
		a := unknownAttempt(t, h)
		h.clock.Advance(time.Minute)
		var wg sync.WaitGroup
		var mu sync.Mutex
		transitions := 0
		run := func(f func() (ResolveResult, error)) {
			defer wg.Done()
			r, err := f()
			assert.NoError(t, err) // not require: FailNow only from the test goroutine
			if r.Transitioned {
				mu.Lock()
				transitions++
				mu.Unlock()
			}
		}
		wg.Add(4)
		go run(func() (ResolveResult, error) { return h.svc.Resolve(h.ctx, a.ID) })
		go run(func() (ResolveResult, error) { return h.svc.Resolve(h.ctx, a.ID) })
		go run(func() (ResolveResult, error) {
			return h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
				ProviderID: "op_" + a.Reference[:12], Source: SourceWebhook, Actor: "evt_a"})
		})
		go run(func() (ResolveResult, error) {
			return h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
				ProviderID: "op_" + a.Reference[:12], Source: SourceWebhook, Actor: "evt_a"})
		})
		wg.Wait()
		require.Equal(t, 1, transitions)
		require.Equal(t, 1, h.owner.count(a.ID))
		require.Equal(t, []string{"succeeded"}, h.ownerEffects(a.ID))
		n := 0
		for _, e := range h.events(a.ID) {
			if e.Type == EventTransition && e.ToStatus == StatusSucceeded {
				n++
			}
		}
		require.Equal(t, 1, n)
	}
	h.requireNoViolations()
}

// TestReviewQueuePaging pages with an opaque cursor.
func TestReviewQueuePaging(t *testing.T) {
	t.Parallel()
	caps := stdCaps()
	caps.LookupByReference = false
	h := setup(t, harnessOpts{caps: &caps})
	var ids []uuid.UUID
	for range 5 {
		a := unknownAttempt(t, h)
		h.clock.Advance(time.Second)
		_, err := h.svc.Resolve(h.ctx, a.ID)
		require.NoError(t, err)
		ids = append(ids, a.ID)
	}
	var got []uuid.UUID
	cursor := ""
	for {
		page, next, err := h.svc.ReviewQueue(h.ctx, h.pool, ReviewQueueParams{After: cursor, Limit: 2})
		require.NoError(t, err)
		for _, a := range page {
			got = append(got, a.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	require.Equal(t, ids, got)
	_, _, err := h.svc.ReviewQueue(h.ctx, h.pool, ReviewQueueParams{After: "garbage"})
	require.ErrorIs(t, err, ErrInvalid)
}

// TestPixChargeCobCreatedIsNotPaid: a pix_charge Submit that "succeeded"
// created the cob; the attempt stays open (processing, with the cob data)
// until the payer pays, and the owner hears only about the payment.
func TestPixChargeCobCreatedIsNotPaid(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	var a Attempt
	err := pgx.BeginFunc(h.ctx, h.pool, func(tx pgx.Tx) error {
		var err error
		a, err = h.svc.Open(h.ctx, tx, OpenParams{Kind: KindPixCharge, SubjectID: newSubject(), Provider: "fake",
			Input: providers.OperationInput{Operation: providers.OpPixCharge, Amount: "25.50", Currency: "BRL"}})
		return err
	})
	require.NoError(t, err)
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, OutcomeProcessing, r.Outcome)
	require.Equal(t, StatusPending, r.Attempt.Status)
	require.Equal(t, "processing", r.Attempt.ProviderState)
	require.Zero(t, h.owner.count(a.ID))

	res, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
		Source: SourceWebhook, Actor: "evt_paid"})
	require.NoError(t, err)
	require.True(t, res.Transitioned)
	require.Equal(t, StatusSucceeded, res.Attempt.Status)
	require.Equal(t, 1, h.owner.count(a.ID))
	h.requireNoViolations()
}

// TestNotFoundNeverFailsAnAcknowledgedOperation (R16, R18): once the provider
// named the operation (a webhook said processing), a later "not found" is a
// contradiction, not proof of absence: the attempt ends in review, not failed.
func TestNotFoundNeverFailsAnAcknowledgedOperation(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{plan: []behaviour{behave500NoRecord}, tune: func(c *Config) { c.MaxLookups = 5 }})
	a := h.open(newSubject())
	_, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	_, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateProcessing,
		ProviderID: "op_seen", Source: SourceWebhook, Actor: "evt_1"})
	require.NoError(t, err)
	for range 10 {
		h.clock.Advance(time.Hour)
		r, err := h.svc.Resolve(h.ctx, a.ID)
		require.NoError(t, err)
		require.Equal(t, StatusUnknown, r.Attempt.Status)
	}
	got := h.get(a.ID)
	require.True(t, got.Review)
	require.Equal(t, 5, got.LookupCount)
	require.Zero(t, h.owner.count(a.ID))
}
