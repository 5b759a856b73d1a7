package attempts

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// unknownUnacked is an attempt gone unknown after a 500 the provider
// recorded nothing for: nothing acknowledged, no provider id.
func unknownUnacked(t *testing.T, h *harness) Attempt {
	t.Helper()
	h.psp.setPlan(behave500NoRecord)
	a := h.open(newSubject())
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusUnknown, r.Attempt.Status)
	require.False(t, r.Attempt.Acknowledged())
	return r.Attempt
}

// R16: once the provider has named the operation, a later "not found" is
// its search lagging and never fails the attempt. A lookup ResolveManually
// makes that finds the operation (processing, with its provider id) is the
// provider naming it, as the resolver's own lookup finding it is: kept, so
// the resolver's next lookup, answered "not found" by a lagging search past
// the window, does not fail the attempt and release the reserve.
func TestManualLookupFoundIsKeptAsAcknowledgement_R16(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	a := unknownUnacked(t, h)
	// The request had in fact reached the provider: it holds the
	// operation, processing.
	h.psp.setOp(a.Reference, "processing")
	h.clock.Advance(5 * time.Minute) // past the 2-minute window and the first lookup's time

	_, err := h.svc.ResolveManually(h.ctx, a.ID, StatusFailed, "op_1", "looks stuck", nil)
	require.ErrorIs(t, err, ErrManualFailRefused, "the lookup found the operation: refused")
	found := false
	for _, e := range h.events(a.ID) {
		if e.Type == EventLookup && e.Outcome == "found_processing" {
			found = true
		}
	}
	require.True(t, found, "the manual lookup that found the operation is recorded")

	// The provider's search lags from now on (the operation exists).
	h.psp.mu.Lock()
	h.psp.hideUntil = 1 << 30
	h.psp.mu.Unlock()
	h.clock.Advance(time.Hour)
	r, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	got := h.get(a.ID)
	require.Equal(t, StatusUnknown, got.Status,
		"R16: the provider named the operation (manual lookup found it processing, id %q): a later not found proves nothing; got %s/%s",
		"op_"+a.Reference[:12], r.Attempt.Status, got.FailureCode)
	require.Zero(t, h.owner.count(a.ID), "the reserve stays held")
}

// R18/R20: MaxLookups counts the lookups the provider answered; an
// unanswered one (5xx, 429, transport error) proves nothing and counts in
// lookups_unanswered and the run that began at unanswered_since, whoever
// made it: a manual lookup that got a 503 is no "answered lookup".
func TestManualUnansweredLookupCountsAsUnanswered_R18_R20(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{tune: func(c *Config) { c.MaxLookups = 1 }})
	a := unknownUnacked(t, h)
	h.clock.Advance(5 * time.Minute)
	h.psp.failLookups(lookupFail{status: 503})
	_, err := h.svc.ResolveManually(h.ctx, a.ID, StatusFailed, "op_1", "looks stuck", nil)
	require.ErrorIs(t, err, ErrManualFailRefused, "an inconclusive lookup refuses it")
	got := h.get(a.ID)
	require.Equal(t, 1, got.LookupCount)
	require.Equal(t, 0, got.LookupsAnswered(),
		"the provider answered no lookup (503): LookupsAnswered must stay 0, got lookups_unanswered=%d", got.LookupsUnanswered)
	require.NotNil(t, got.UnansweredSince, "an unanswered lookup starts the unanswered run (R18, R20)")
}

// R18: "UnansweredReviewAfter of lookups the provider did not answer, in a
// row". A manual lookup the provider answered (here found processing) ends
// the run, as any answered resolver lookup does (unanswered_since NULL).
func TestManualAnsweredLookupEndsUnansweredRun_R18(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	a := unknownUnacked(t, h)
	h.clock.Advance(5 * time.Minute)
	// An outage: the resolver's lookup goes unanswered.
	h.psp.failLookups(lookupFail{status: 503})
	_, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	got := h.get(a.ID)
	require.NotNil(t, got.UnansweredSince)
	// The provider is back and answers an operator's lookup.
	h.psp.setOp(a.Reference, "processing")
	h.clock.Advance(time.Minute)
	_, err = h.svc.ResolveManually(h.ctx, a.ID, StatusFailed, "op_1", "looks stuck", nil)
	require.ErrorIs(t, err, ErrManualFailRefused)
	got = h.get(a.ID)
	require.Nil(t, got.UnansweredSince, "the provider answered a lookup: the unanswered run ended (R18)")
}
