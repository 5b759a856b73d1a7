package attempts

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// R6, R9, R19: an attempt opened for a subject whose earlier attempt has an
// unsettled divergence (the provider reported it succeeded after it was
// resolved failed) is never sent: the first-send statement (firstSendSQL)
// refuses to mark it and Execute's checked path holds it in review, open,
// naming the diverged attempt. Settling the divergence does not send it:
// it is in review, an operator decides.
func TestAttemptOfDivergedSubjectIsHeldNotSent_R6_R9_R19(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{plan: []behaviour{behave500NoRecord, behaveOK}})
	subject := newSubject()
	a := h.open(subject)
	_, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	h.clock.Advance(3 * time.Minute)
	r, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusFailed, r.Attempt.Status)
	_, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
		ProviderID: "op_late", Source: SourceWebhook, Actor: "evt_late"})
	require.NoError(t, err)
	require.NotNil(t, h.get(a.ID).DivergedAt)

	b := h.open(subject) // opened after the divergence: nothing flagged it yet
	require.False(t, b.Review)
	res, err := h.svc.Execute(h.ctx, b.ID)
	require.NoError(t, err)
	require.False(t, res.Sent)
	got := h.get(b.ID)
	require.Equal(t, StatusPending, got.Status)
	require.Zero(t, got.CallCount, "no call marked")
	require.True(t, got.Review)
	require.Contains(t, got.ReviewReason, a.ID.String())
	require.Equal(t, 1, h.psp.totalSubmits(), "only attempt 1's call")

	// Another subject is not held.
	c := h.open(newSubject())
	res, err = h.svc.Execute(h.ctx, c.ID)
	require.NoError(t, err)
	require.True(t, res.Sent)

	_, err = h.svc.SettleDivergence(h.ctx, a.ID, "op_1", "booked: attempt 1 paid", HoldNone)
	require.NoError(t, err)
	h.clock.Advance(time.Hour)
	res, err = h.svc.Execute(h.ctx, b.ID)
	require.NoError(t, err)
	require.False(t, res.Sent, "in review: the worker sends nothing")
	require.Equal(t, 2, h.psp.totalSubmits())
}
