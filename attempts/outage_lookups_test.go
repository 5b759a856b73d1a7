package attempts

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// R15, R18, R20 during an outage: a provider without idempotency keys (the
// Pix adapter) rate-limits (or refuses the connection to) the first call,
// so the attempt stays pending and every later Execute first looks the
// reference up (lookupBeforeResend). While the outage lasts the lookup
// answers 503: inconclusive, and no call is made, so the call count never
// grows. The wait before the next lookup must back off by the number of
// unanswered lookups (it used to be backoff(..., CallCount): 0.5-1 s for the
// whole outage, a lookup storm), and the lookups must be counted on the
// attempt as the resolver counts its own (lookups_unanswered,
// unanswered_since: R15).
func TestNoKeysPendingLookupsBackOffDuringOutage_R15_R20(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{caps: noKeyCaps(), plan: []behaviour{behave429, behaveOK}})
	a := h.open(newSubject())
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, OutcomeRateLimited, r.Outcome)
	h.clock.Advance(time.Minute) // the consistency window since the call

	fails := make([]lookupFail, 400)
	for i := range fails {
		fails[i] = lookupFail{status: 503}
	}
	h.psp.failLookups(fails...)
	start := h.clock.Now()
	var last time.Duration
	const runs = 120
	for range runs {
		r, err := h.svc.Execute(h.ctx, a.ID)
		require.NoError(t, err)
		require.False(t, r.Sent)
		last = r.RetryIn
		h.clock.Advance(max(r.RetryIn, time.Millisecond))
	}
	elapsed := h.clock.Now().Sub(start)
	got := h.get(a.ID)
	t.Logf("%d lookups in %s of outage; last wait %s; status %s, review %v, lookups_unanswered %d",
		h.psp.lookupCount(), elapsed.Round(time.Second), last, got.Status, got.Review, got.LookupsUnanswered)
	require.Greater(t, last, 10*time.Second,
		"after %d unanswered lookups the wait before the next one is still %s: no backoff during an outage", runs, last)
	require.Equal(t, runs, h.psp.lookupCount())
	require.Equal(t, runs, got.LookupsUnanswered, "every unanswered lookup is counted on the attempt")
	require.Equal(t, runs, got.LookupCount)
	require.NotNil(t, got.UnansweredSince)
	require.Equal(t, StatusPending, got.Status)
	require.Equal(t, 1, h.psp.totalSubmits(), "nothing re-sent without an answer (R20)")
}

// R18, R20: once the lookups before a re-send have gone unanswered for
// UnansweredReviewAfter, the pending attempt goes to review, as the
// resolver sends an unknown one (R18): its reserve is held and an operator
// is told (OnReview), and no further lookup or call is made by the worker.
func TestNoKeysUnansweredLookupsGoToReview_R18_R20(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{caps: noKeyCaps(), plan: []behaviour{behave429, behaveOK},
		tune: func(c *Config) { c.UnansweredReviewAfter = time.Hour }})
	a := h.open(newSubject())
	_, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	h.clock.Advance(time.Minute)
	fails := make([]lookupFail, 400)
	for i := range fails {
		fails[i] = lookupFail{status: 503}
	}
	h.psp.failLookups(fails...)
	start := h.clock.Now()
	var r ExecuteResult
	for range 100 {
		r, err = h.svc.Execute(h.ctx, a.ID)
		require.NoError(t, err)
		require.False(t, r.Sent)
		if r.Attempt.Review {
			break
		}
		require.Positive(t, r.RetryIn)
		h.clock.Advance(r.RetryIn)
	}
	got := h.get(a.ID)
	require.True(t, got.Review, "unanswered for %s: review", h.clock.Now().Sub(start))
	require.Contains(t, got.ReviewReason, "answered none")
	require.Equal(t, StatusPending, got.Status, "never failed automatically (R18)")
	require.Zero(t, r.RetryIn, "the submit job ends: an operator decides")
	require.GreaterOrEqual(t, h.clock.Now().Sub(start), time.Hour)
	require.Less(t, h.clock.Now().Sub(start), time.Hour+6*time.Minute)
	require.Equal(t, int32(1), h.reviews.Load())

	lookups := h.psp.lookupCount()
	h.clock.Advance(time.Hour)
	r, err = h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, r.Sent)
	require.Equal(t, lookups, h.psp.lookupCount(), "in review: no more lookups")
	require.Equal(t, 1, h.psp.totalSubmits())
}

// R12, R20: while the provider's circuit is open, a pending attempt of a
// provider without keys waits before its lookup too, not only before the
// call: the breaker is consulted first.
func TestNoKeysOpenCircuitHoldsTheLookup_R20(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{caps: noKeyCaps(), plan: []behaviour{behave429, behave500NoRecord}, tune: func(c *Config) {
		c.Breaker = BreakerConfig{Window: time.Hour, MinCalls: 3, FailureRate: 0.5, OpenFor: 10 * time.Minute}
	}})
	a := h.open(newSubject())
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, OutcomeRateLimited, r.Outcome)
	for range 2 {
		b := h.open(newSubject())
		r, err := h.svc.Execute(h.ctx, b.ID)
		require.NoError(t, err)
		require.True(t, r.Sent)
		require.Equal(t, StatusUnknown, r.Attempt.Status)
	}
	require.Equal(t, CircuitOpen, h.svc.Circuit("fake", "pix_transfer"))
	h.clock.Advance(time.Minute) // past the window and the 429's Retry-After
	r, err = h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, r.Sent)
	require.Positive(t, r.RetryIn)
	require.Zero(t, h.psp.lookupCount(), "no lookup while the circuit is open")
	require.Equal(t, StatusPending, h.get(a.ID).Status)
}
