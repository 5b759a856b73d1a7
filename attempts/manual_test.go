package attempts

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// Issue 13 finding 5. An operator's "failed" on a pending attempt whose call
// is in flight is refused with a typed error saying why (R22: the reserve
// would go back while the provider may be paying). The call's answer then
// resolves the attempt as the provider says, and its owner is told once.
func TestManualFailRefusedWhileCallInFlight_R22(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	a := h.open(newSubject())
	var manualErr error
	var during ResolveResult
	h.svc.hookAfterCall = func(Attempt) error {
		during, manualErr = h.svc.ResolveManually(h.ctx, a.ID, StatusFailed, "op_1", "looks stuck to me", nil)
		return nil
	}
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.ErrorIs(t, manualErr, ErrManualFailRefused)
	var mr *ManualFailRefusedError
	require.True(t, errors.As(manualErr, &mr))
	require.Contains(t, mr.Reason, "in flight")
	require.False(t, during.Transitioned)
	require.Equal(t, StatusSucceeded, r.Attempt.Status, "the provider's answer decides")
	require.Equal(t, []string{"succeeded"}, h.ownerEffects(a.ID))
	require.Nil(t, h.get(a.ID).DivergedAt)

	// Through the reference door too: an operator's failed is refused alike.
	h.svc.hookAfterCall = nil
	b := unknownAttempt(t, h)
	_, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: b.Reference, State: providers.StateFailed,
		Source: SourceOperator, Actor: "op_1", Reason: "looks stuck"})
	require.ErrorIs(t, err, ErrManualFailRefused)
	require.Equal(t, StatusUnknown, h.get(b.ID).Status)
	require.Empty(t, h.ownerEffects(b.ID))
	h.requireNoViolations()
}

// Issue 13 finding 5 (R16, R22). A manual "failed" needs a lookup past the
// consistency window that came back not found. Before the window it is
// refused without a lookup; after it, ResolveManually looks the reference
// up itself: found (the provider has the operation) it is refused again,
// and the provider's answer is left to the resolver. The operator records
// the decision again once it is allowed: an acknowledged operation the
// provider's search never shows, in review, may be failed by a human.
func TestManualFailNeedsNotFoundPastWindow_R16_R22(t *testing.T) {
	t.Parallel()
	t.Run("found", func(t *testing.T) {
		t.Parallel()
		h := setup(t, harnessOpts{})
		a := unknownAttempt(t, h) // the PSP holds it, succeeded; it answered 500
		_, err := h.svc.ResolveManually(h.ctx, a.ID, StatusFailed, "op_1", "no answer from the PSP", nil)
		require.ErrorIs(t, err, ErrManualFailRefused)
		require.Contains(t, err.Error(), "consistency window")
		require.Zero(t, h.psp.lookupCount(), "no lookup before the window: it would prove nothing")

		h.clock.Advance(3 * time.Minute)
		_, err = h.svc.ResolveManually(h.ctx, a.ID, StatusFailed, "op_1", "no answer from the PSP", nil)
		require.ErrorIs(t, err, ErrManualFailRefused)
		require.Contains(t, err.Error(), "succeeded")
		require.Equal(t, 1, h.psp.lookupCount())
		// The lookup's answer is the provider's word: applied at once.
		require.Equal(t, StatusSucceeded, h.get(a.ID).Status)
		require.Equal(t, []string{"succeeded"}, h.ownerEffects(a.ID))

		r, err := h.svc.Resolve(h.ctx, a.ID)
		require.NoError(t, err)
		require.Equal(t, StatusSucceeded, r.Attempt.Status)
		require.Equal(t, []string{"succeeded"}, h.ownerEffects(a.ID), "told once")
		h.requireNoViolations()
	})
	t.Run("acknowledged_never_found", func(t *testing.T) {
		t.Parallel()
		h := setup(t, harnessOpts{})
		psp := newAckPSP(t, 409, `{"code":"idempotency_in_flight"}`)
		h.prov.setBase(psp.srv.URL)
		a := h.open(newSubject())
		r, err := h.svc.Execute(h.ctx, a.ID)
		require.NoError(t, err)
		require.Equal(t, StatusUnknown, r.Attempt.Status)
		_, err = h.svc.ResolveManually(h.ctx, a.ID, StatusFailed, "op_1", "PSP support says it never arrived", nil)
		require.ErrorIs(t, err, ErrManualFailRefused)

		h.clock.Advance(time.Hour)
		m, err := h.svc.ResolveManually(h.ctx, a.ID, StatusFailed, "op_1", "PSP support says it never arrived", nil)
		require.NoError(t, err)
		require.True(t, m.Transitioned)
		require.Equal(t, StatusFailed, m.Attempt.Status)
		require.EqualValues(t, 1, psp.lookups.Load(), "ResolveManually looked the reference up itself")
		require.Equal(t, []string{"failed"}, h.ownerEffects(a.ID))
		h.requireNoViolations()
	})
	t.Run("not_found_then_named_again", func(t *testing.T) {
		t.Parallel()
		h := setup(t, harnessOpts{})
		psp := newAckPSP(t, 409, `{"code":"idempotency_in_flight"}`)
		h.prov.setBase(psp.srv.URL)
		a := h.open(newSubject())
		_, err := h.svc.Execute(h.ctx, a.ID)
		require.NoError(t, err)
		h.clock.Advance(time.Hour)
		r, err := h.svc.Resolve(h.ctx, a.ID) // not found past the window; acknowledged: stays unknown
		require.NoError(t, err)
		require.Equal(t, StatusUnknown, r.Attempt.Status)
		require.EqualValues(t, 1, psp.lookups.Load())
		// Then the provider names the operation again (processing).
		h.clock.Advance(time.Minute)
		_, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateProcessing,
			ProviderID: "op_named", Source: SourceWebhook, Actor: "evt_p"})
		require.NoError(t, err)
		// The older "not found" proves nothing now: a fresh lookup decides.
		h.clock.Advance(time.Minute)
		m, err := h.svc.ResolveManually(h.ctx, a.ID, StatusFailed, "op_1", "PSP support says it was cancelled", nil)
		require.NoError(t, err)
		require.True(t, m.Transitioned)
		require.EqualValues(t, 2, psp.lookups.Load(), "a lookup newer than the provider's last word")
		h.requireNoViolations()
	})
	t.Run("never_sent", func(t *testing.T) {
		t.Parallel()
		h := setup(t, harnessOpts{})
		a := h.open(newSubject())
		m, err := h.svc.ResolveManually(h.ctx, a.ID, StatusFailed, "op_1", "cancelled before sending", nil)
		require.NoError(t, err, "nothing ever left: nothing can be paid")
		require.True(t, m.Transitioned)
		require.Zero(t, h.psp.totalSubmits())
		h.requireNoViolations()
	})
}

// Issue 13 finding 5 (R9, R19). A provider success reported after the
// attempt was resolved failed (here by the resolver, on a lookup that
// never saw the operation) is a divergence: the final status stays failed
// (R9) and nothing moves in the ledger, but the attempt is flagged for
// review (it is listed in the review queue), counted, logged as an error,
// and Verify reports it until a human settles it.
func TestLateSuccessAfterFailedIsDivergence_R9_R19(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{plan: []behaviour{behave500NoRecord}})
	a := h.open(newSubject())
	_, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	h.clock.Advance(3 * time.Minute)
	r, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusFailed, r.Attempt.Status)
	h.requireNoViolations()

	res, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
		ProviderID: "op_late", Source: SourceWebhook, Actor: "evt_late"})
	require.NoError(t, err)
	require.False(t, res.Transitioned)
	got := h.get(a.ID)
	require.Equal(t, StatusFailed, got.Status, "final never changes (R9)")
	require.NotNil(t, got.DivergedAt)
	require.Contains(t, got.Divergence, "succeeded")
	require.True(t, got.Review)
	require.Equal(t, []string{"failed"}, h.ownerEffects(a.ID), "no ledger move")
	require.Equal(t, float64(1), testCounter(h.metrics.Divergences))
	q, _, err := h.svc.ReviewQueue(h.ctx, h.pool, ReviewQueueParams{})
	require.NoError(t, err)
	require.Len(t, q, 1)
	require.Equal(t, a.ID, q[0].ID)

	vs, err := Verify(h.ctx, h.pool)
	require.NoError(t, err)
	require.Len(t, vs, 1)
	require.Equal(t, "diverged", vs[0].Code)
	require.Equal(t, a.ID.String(), vs[0].AttemptID)

	// Duplicates of the late event change nothing more.
	_, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
		ProviderID: "op_late", Source: SourceWebhook, Actor: "evt_late_2"})
	require.NoError(t, err)
	require.Equal(t, float64(1), testCounter(h.metrics.Divergences))
	require.Equal(t, got.DivergedAt, h.get(a.ID).DivergedAt)
}
