package attempts

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An unknown attempt in review (the resolver stops looking it up) whose
// operation the provider now reports definitively failed. The operator asks
// to fail it; ResolveManually's own lookup finds the operation "failed" and
// applies it, as the resolver's lookup would (the provider's word, R17's
// checks): the attempt is failed and its reserve released, never left
// unknown for ever with every operator decision refused (R18, R22).
func TestManualLookupFoundFailedResolvesAnAttemptInReview_R18_R22(t *testing.T) {
	t.Parallel()
	// In review by the processing deadline: "processing" answers no longer
	// count toward MaxLookups (R18).
	h := setup(t, harnessOpts{tune: func(c *Config) { c.MaxLookups = 1; c.ProcessingReviewAfter = time.Hour }})
	a := unknownUnacked(t, h)
	h.psp.setOp(a.Reference, "processing")
	h.clock.Advance(5 * time.Minute)
	for i := 0; i < 3 && !h.get(a.ID).Review; i++ {
		_, err := h.svc.Resolve(h.ctx, a.ID)
		require.NoError(t, err)
		h.clock.Advance(time.Hour)
	}
	got := h.get(a.ID)
	require.True(t, got.Review, "set-up: the attempt is in review (R18)")
	require.Equal(t, StatusUnknown, got.Status)

	// The provider now says the operation failed definitively.
	h.psp.setOp(a.Reference, "failed")
	h.clock.Advance(time.Hour)
	_, err := h.svc.ResolveManually(h.ctx, a.ID, StatusFailed, "op_1", "provider says failed", nil)
	t.Logf("first manual failed: %v", err)
	_, err = h.svc.Resolve(h.ctx, a.ID) // the resolver's turn
	require.NoError(t, err)
	h.clock.Advance(time.Hour)
	_, err2 := h.svc.ResolveManually(h.ctx, a.ID, StatusFailed, "op_1", "provider says failed", nil)
	t.Logf("second manual failed: %v", err2)

	got = h.get(a.ID)
	require.Equal(t, StatusFailed, got.Status,
		"the provider's own lookup answer says failed: it must resolve the attempt (applied as the resolver or a webhook "+
			"would, or the operator's failed allowed); got %s, review=%v, acknowledged=%v, last refusal: %v",
		got.Status, got.Review, got.Acknowledged(), err2)
}
