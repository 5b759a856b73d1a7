package attempts

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// resolveUntil runs the resolver on the attempt id as its job would: a
// Resolve, then the clock moved to the next lookup it asks for, again,
// until the attempt is in review or no longer awaits resolution, or the
// next step would take the clock past until. It returns the last result.
func resolveUntil(t *testing.T, h *harness, id uuid.UUID, until time.Time) ResolveResult {
	t.Helper()
	for {
		r, err := h.svc.Resolve(h.ctx, id)
		require.NoError(t, err)
		if r.Attempt.Review || !r.Attempt.AwaitingResolution() {
			return r
		}
		require.Positive(t, r.RetryIn, "an attempt awaiting resolution is looked up again later")
		if h.clock.Now().Add(r.RetryIn).After(until) {
			return r
		}
		h.clock.Advance(r.RetryIn)
	}
}

// lookupNow moves the clock to the attempt's next lookup and runs the
// resolver once, which must look it up.
func lookupNow(t *testing.T, h *harness, id uuid.UUID) ResolveResult {
	t.Helper()
	a := h.get(id)
	require.NotNil(t, a.NextLookupAt)
	if d := a.NextLookupAt.Sub(h.clock.Now()); d > 0 {
		h.clock.Advance(d)
	}
	before := h.psp.lookupCount()
	r, err := h.svc.Resolve(h.ctx, id)
	require.NoError(t, err)
	require.Equal(t, before+1, h.psp.lookupCount(), "the resolver looked the attempt up")
	return r
}

// TestProcessingLookupsDoNotExhaustMaxLookups_R15_R18: a provider that
// keeps answering "processing" (a Pix cob nobody has paid yet, a payout in
// transit) is bounded by ProcessingReviewAfter, not by MaxLookups: its
// answered lookups go far past MaxLookups without review (a cob went to
// review, with an alert, after about 4h47m under saldo dev's schedule;
// found by review). They still move the attempt along the resolve
// schedule, so it is looked up at the longest delay, not every few
// seconds (R15).
func TestProcessingLookupsDoNotExhaustMaxLookups_R15_R18(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{plan: []behaviour{behaveProcessing}, tune: func(c *Config) { c.MaxLookups = 3 }})
	a := h.open(newSubject())
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, "processing", r.Attempt.ProviderState)
	since := *r.Attempt.ProcessingFrom

	rr := resolveUntil(t, h, a.ID, since.Add(23*time.Hour))
	got := h.get(a.ID)
	require.False(t, got.Review, "processing answers are not lookups that cannot tell: %s", got.ReviewReason)
	require.Greater(t, got.LookupCount, 40, "far more lookups than MaxLookups (3)")
	require.Equal(t, got.LookupCount, got.LookupsProcessing)
	require.Zero(t, got.LookupsUndecided())
	// The schedule's backoff still works: at its longest delay, about 50
	// lookups in 23 hours, not thousands.
	require.Equal(t, 30*time.Minute, got.NextLookupAt.Sub(*got.LastLookupAt))
	require.Equal(t, 30*time.Minute, rr.RetryIn.Round(time.Minute))
	require.Less(t, h.psp.lookupCount(), 60)
	require.Zero(t, h.reviews.Load())

	rr = resolveUntil(t, h, a.ID, since.Add(25*time.Hour))
	require.True(t, rr.Attempt.Review, "ProcessingReviewAfter (24h) still bounds it")
	require.Equal(t, StatusPending, rr.Attempt.Status)
	require.Contains(t, rr.Attempt.ReviewReason, "processing since")
	require.False(t, rr.Attempt.ReviewAt.Before(since.Add(24*time.Hour)))
	require.EqualValues(t, 1, h.reviews.Load())
	require.Zero(t, h.owner.count(a.ID))
	h.requireNoViolations()
}

// TestUndecidedLookupsBoundedAcrossProcessing_R16_R18: an attempt unknown
// for lookups that cannot tell ("not found" inside the consistency
// window), then found processing, then not found again, reaches review
// once MaxLookups undecided lookups are counted, all of them: the
// processing ones in between neither count nor reset the count. Never
// failed: the provider acknowledged the operation (R16).
func TestUndecidedLookupsBoundedAcrossProcessing_R16_R18(t *testing.T) {
	t.Parallel()
	caps := stdCaps()
	caps.ConsistencyWindow = 365 * 24 * time.Hour
	h := setup(t, harnessOpts{caps: &caps, plan: []behaviour{behave500NoRecord}, tune: func(c *Config) { c.MaxLookups = 4 }})
	a := h.open(newSubject())
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusUnknown, r.Attempt.Status)

	for range 2 {
		rr := lookupNow(t, h, a.ID)
		require.False(t, rr.Attempt.Review)
	}
	h.psp.setOp(a.Reference, "processing")
	for range 3 {
		rr := lookupNow(t, h, a.ID)
		require.False(t, rr.Attempt.Review, "%d undecided lookups, the rest processing: %s",
			rr.Attempt.LookupsUndecided(), rr.Attempt.ReviewReason)
		require.Equal(t, StatusUnknown, rr.Attempt.Status)
	}
	got := h.get(a.ID)
	require.Equal(t, 3, got.LookupsProcessing)
	require.Equal(t, 2, got.LookupsUndecided())

	h.psp.dropOp(a.Reference)
	for range 2 {
		rr := lookupNow(t, h, a.ID)
		require.False(t, rr.Attempt.Review)
		require.Equal(t, StatusUnknown, rr.Attempt.Status, "not found after processing proves nothing (R16)")
	}
	got = h.get(a.ID)
	require.Equal(t, 4, got.LookupsUndecided())
	h.clock.Advance(got.NextLookupAt.Sub(h.clock.Now()))
	rr, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.True(t, rr.Attempt.Review, "MaxLookups undecided lookups, counted across the processing ones")
	require.Equal(t, StatusUnknown, rr.Attempt.Status)
	require.Equal(t, 7, rr.Attempt.LookupCount)
	require.Contains(t, rr.Attempt.ReviewReason, "4 answered lookups could not tell")
	require.EqualValues(t, 1, h.reviews.Load())
	require.Zero(t, h.owner.count(a.ID))
	h.requireNoViolations()
}

// TestExpectedArrivalDelaysProcessingReview_R18: a bank payout the
// provider expects to arrive in 3 days (Stripe's arrival_date, as
// ExpectedBy) is not in review after ProcessingReviewAfter (24h): every
// slow payout reached review (found by review). It reaches review once the
// expected date plus ProcessingExpectedMargin has passed, and the reason
// names the date.
func TestExpectedArrivalDelaysProcessingReview_R18(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{plan: []behaviour{behaveProcessing}})
	expected := h.clock.Now().Add(72 * time.Hour)
	h.psp.setExpectedBy("", expected)
	a := h.open(newSubject())
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, "processing", r.Attempt.ProviderState)
	require.NotNil(t, r.Attempt.ProcessingExpectedBy, "the submit's ExpectedBy is kept")
	require.True(t, r.Attempt.ProcessingExpectedBy.Equal(expected))
	since := *r.Attempt.ProcessingFrom
	require.True(t, h.svc.ProcessingReviewAt(r.Attempt).Equal(expected.Add(DefaultProcessingExpectedMargin)))

	rr := resolveUntil(t, h, a.ID, since.Add(25*time.Hour))
	require.False(t, rr.Attempt.Review, "in transit as the provider said: %s", rr.Attempt.ReviewReason)
	rr = resolveUntil(t, h, a.ID, expected.Add(DefaultProcessingExpectedMargin-time.Minute))
	require.False(t, rr.Attempt.Review, "not late before arrival + margin: %s", rr.Attempt.ReviewReason)
	require.Zero(t, h.reviews.Load())

	rr = resolveUntil(t, h, a.ID, expected.Add(DefaultProcessingExpectedMargin+time.Hour))
	require.True(t, rr.Attempt.Review, "late: arrival + margin has passed")
	require.Equal(t, StatusPending, rr.Attempt.Status)
	require.False(t, rr.Attempt.ReviewAt.Before(expected.Add(DefaultProcessingExpectedMargin)))
	require.Contains(t, rr.Attempt.ReviewReason, "expected it to end by "+fmtTime(&expected))
	require.EqualValues(t, 1, h.reviews.Load())
	require.Zero(t, h.owner.count(a.ID))
	h.requireNoViolations()
}

// TestExpectedBeforeReviewAfterChangesNothing_R18: a date sooner than
// ProcessingReviewAfter never brings the review forward: the later of the
// two deadlines counts.
func TestExpectedBeforeReviewAfterChangesNothing_R18(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{plan: []behaviour{behaveProcessing}})
	h.psp.setExpectedBy("", h.clock.Now().Add(time.Hour))
	a := h.open(newSubject())
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	since := *r.Attempt.ProcessingFrom
	require.True(t, h.svc.ProcessingReviewAt(r.Attempt).Equal(since.Add(24*time.Hour)))
	rr := resolveUntil(t, h, a.ID, since.Add(24*time.Hour-time.Minute))
	require.False(t, rr.Attempt.Review, rr.Attempt.ReviewReason)
	rr = resolveUntil(t, h, a.ID, since.Add(25*time.Hour))
	require.True(t, rr.Attempt.Review)
	require.Contains(t, rr.Attempt.ReviewReason, "more than 24h0m0s since it began")
}

// TestFarFutureExpectedByIsCapped_R18: a bogus date ten years out cannot
// keep a stuck attempt, and its reserve, out of review: it is kept capped
// at MaxProcessingExpectedAfter after processing began, and the attempt
// reaches review after that plus the margin, the reason saying so.
func TestFarFutureExpectedByIsCapped_R18(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{plan: []behaviour{behaveProcessing}, tune: func(c *Config) {
		c.ResolveSchedule = []time.Duration{time.Hour, 6 * time.Hour}
	}})
	h.psp.setExpectedBy("", h.clock.Now().AddDate(10, 0, 0))
	a := h.open(newSubject())
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	since := *r.Attempt.ProcessingFrom
	limit := since.Add(MaxProcessingExpectedAfter)
	require.NotNil(t, r.Attempt.ProcessingExpectedBy)
	require.True(t, r.Attempt.ProcessingExpectedBy.Equal(limit), "kept capped: %s", r.Attempt.ProcessingExpectedBy)

	rr := resolveUntil(t, h, a.ID, limit.Add(DefaultProcessingExpectedMargin-time.Minute))
	require.False(t, rr.Attempt.Review, rr.Attempt.ReviewReason)
	got := h.get(a.ID)
	require.True(t, got.ProcessingExpectedBy.Equal(limit), "every lookup's date capped again: %s", got.ProcessingExpectedBy)

	rr = resolveUntil(t, h, a.ID, limit.Add(DefaultProcessingExpectedMargin+6*time.Hour))
	require.True(t, rr.Attempt.Review, "the cap bounds the review")
	require.Contains(t, rr.Attempt.ReviewReason, "capped at 720h0m0s after processing began")
	require.Equal(t, StatusPending, rr.Attempt.Status)
	require.EqualValues(t, 1, h.reviews.Load())
	h.requireNoViolations()
}

// TestProcessingReportKeepsLatestExpectedBy_R17_R18: a provider's
// processing report (a webhook, through ResolveByReference) carries its
// ExpectedBy onto the attempt; a later report with another date replaces
// it, one without a date keeps it.
func TestProcessingReportKeepsLatestExpectedBy_R17_R18(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{plan: []behaviour{behaveProcessing}})
	a := h.open(newSubject())
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Nil(t, r.Attempt.ProcessingExpectedBy)

	report := func(at time.Time) Attempt {
		t.Helper()
		res, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, Provider: "fake",
			Operation: providers.OpPixTransfer, State: providers.StateProcessing, Source: SourceWebhook,
			Actor: "evt_" + uuid.NewString(), ExpectedBy: at})
		require.NoError(t, err)
		return res.Attempt
	}
	first := h.clock.Now().Add(48 * time.Hour)
	got := report(first)
	require.NotNil(t, got.ProcessingExpectedBy)
	require.True(t, got.ProcessingExpectedBy.Equal(first))
	got = report(time.Time{})
	require.True(t, got.ProcessingExpectedBy.Equal(first), "a report without a date keeps the last one")
	later := first.Add(72 * time.Hour)
	got = report(later)
	require.True(t, got.ProcessingExpectedBy.Equal(later), "the provider's latest date counts")
	require.True(t, h.get(a.ID).ProcessingExpectedBy.Equal(later))
	require.False(t, got.Review)
}
