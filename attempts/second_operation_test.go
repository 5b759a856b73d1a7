package attempts

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// A Pix cob paid twice: the PSP notifies a second Pix (another endToEndId)
// under the txid of a charge attempt that already succeeded with the first.
// Nothing moves (R9: the status, the provider id and the ledger stay; the
// owner is told once), but the second operation is not silent: a note
// naming it and a conflict counted, besides reconciliation's double_payment.
func TestSecondOperationOnASucceededAttemptIsNoted_R9(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	a := unknownAttempt(t, h)
	r, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
		ProviderID: "E12345678202009091221aaaaaaaaaaa", Source: SourceWebhook, Actor: "pix:E1"})
	require.NoError(t, err)
	require.True(t, r.Transitioned)
	before := len(h.events(a.ID))

	r, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
		ProviderID: "E12345678202009091221bbbbbbbbbbb", Source: SourceWebhook, Actor: "pix:E2"})
	require.NoError(t, err)
	require.False(t, r.Transitioned)
	got := h.get(a.ID)
	require.Equal(t, StatusSucceeded, got.Status)
	require.Equal(t, "E12345678202009091221aaaaaaaaaaa", got.ProviderID)
	evs := h.events(a.ID)
	require.Len(t, evs, before+1)
	require.Equal(t, EventNote, evs[len(evs)-1].Type)
	require.Contains(t, evs[len(evs)-1].Reason, "E12345678202009091221bbbbbbbbbbb")
	require.Equal(t, float64(1), testCounter(h.metrics.Conflicts))
	require.Equal(t, 1, h.owner.count(a.ID), "the owner is told once")

	// A repeat of the first operation's report notes nothing.
	_, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
		ProviderID: "E12345678202009091221aaaaaaaaaaa", Source: SourceWebhook, Actor: "pix:E1"})
	require.NoError(t, err)
	require.Len(t, h.events(a.ID), before+1, "a repeat of the first operation's report notes nothing")
	h.requireNoViolations()
}
