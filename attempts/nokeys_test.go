package attempts

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

func noKeyCaps() *providers.Capabilities {
	c := stdCaps()
	c.IdempotencyKeys = false
	c.KeyLifetime = 0
	c.ConsistencyWindow = time.Minute
	return &c
}

// TestNoKeysResendOnlyAfterLookup (R20): a provider without idempotency keys
// is re-sent only after the consistency window since the last call AND a
// lookup that finds nothing.
func TestNoKeysResendOnlyAfterLookup(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{caps: noKeyCaps(), plan: []behaviour{behave429, behaveOK}})
	a := h.open(newSubject())
	require.Nil(t, a.KeyExpiresAt)
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, OutcomeRateLimited, r.Outcome)

	h.clock.Advance(7 * time.Second) // Retry-After passed, the window has not
	r, err = h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, r.Sent)
	require.Equal(t, 53*time.Second, r.RetryIn)
	require.Zero(t, h.psp.lookupCount())

	h.clock.Advance(53 * time.Second)
	r, err = h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.True(t, r.Sent)
	require.Equal(t, StatusSucceeded, r.Attempt.Status)
	require.Equal(t, 1, h.psp.lookupCount(), "looked up before the re-send")
	require.Equal(t, 2, h.psp.totalSubmits())
	require.Equal(t, 1, h.psp.opCount())
	require.Equal(t, []string{"opened", "call:rate_limited", "lookup:not_found", "call:succeeded",
		"transition:pending->succeeded"}, eventTypes(h.events(a.ID)))
	h.requireNoViolations()
}

// TestNoKeysFoundMeansNoResend (R20): the lookup before a re-send finds the
// operation (the provider processed it despite the error): no re-send.
func TestNoKeysFoundMeansNoResend(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{caps: noKeyCaps(), plan: []behaviour{behave429, behaveOK}})
	a := h.open(newSubject())
	_, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	h.psp.setOp(a.Reference, "succeeded") // it exists after all
	h.clock.Advance(time.Minute)
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, r.Sent)
	require.Equal(t, StatusSucceeded, r.Attempt.Status)
	require.Equal(t, 1, h.psp.totalSubmits())
	require.Equal(t, 1, h.owner.count(a.ID))
}

// TestNoKeysNoLookupNeverResends (R20, R25): without keys and without lookup
// any re-send could pay twice: unknown, then review.
func TestNoKeysNoLookupNeverResends(t *testing.T) {
	t.Parallel()
	caps := noKeyCaps()
	caps.LookupByReference = false
	h := setup(t, harnessOpts{caps: caps, plan: []behaviour{behave429, behaveOK}})
	a := h.open(newSubject())
	_, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	h.clock.Advance(time.Hour)
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, r.Sent)
	require.Equal(t, StatusUnknown, r.Attempt.Status)
	rr, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.True(t, rr.Attempt.Review)
	require.Equal(t, 1, h.psp.totalSubmits())
}

// TestNoKeysTimeoutIsUnknown (R20): every timeout is unknown, no exception.
func TestNoKeysTimeoutIsUnknown(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{caps: noKeyCaps(), plan: []behaviour{behaveHang}, readTimeout: 200 * time.Millisecond})
	a := h.open(newSubject())
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusUnknown, r.Attempt.Status)
	h.clock.Advance(time.Hour)
	r, err = h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, r.Sent)
	require.Equal(t, 1, h.psp.totalSubmits())
}
