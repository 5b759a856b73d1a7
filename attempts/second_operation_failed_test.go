package attempts

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// R9, R19: a succeeded attempt (provider operation A) and a report that
// ANOTHER operation (B) under its reference failed. B moved no money and
// says nothing about A: a note, never a divergence. Before, applyReport
// sent it to lateConflict before it looked at the provider id, so A was
// recorded as a reversal: the operator was told the money "came back or
// never left" and would book it back, although A's money did move (found
// by review).
func TestFailedSecondOperationOnASucceededAttemptIsNoReversal_R9_R19(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	a := succeededAttempt(t, h, "op_A")
	_, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateFailed,
		ProviderID: "op_B", Source: SourceWebhook, Actor: "evt_B"})
	require.NoError(t, err)
	got := h.get(a.ID)
	kind, err := DivergenceKind(h.ctx, h.pool, a.ID)
	require.NoError(t, err)
	require.NotEqual(t, DivergenceReversal, kind, "operation op_B failing is no reversal of op_A: %s", got.Divergence)
	require.Nil(t, got.DivergedAt, "a failed second operation moved no money: a note")
}
