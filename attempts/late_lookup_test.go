package attempts

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// hookLookupProvider runs after each lookup's answer arrived and before
// the resolver records it.
type hookLookupProvider struct {
	*testProvider
	after func(providers.LookupResult)
}

func (p *hookLookupProvider) Lookup(ctx context.Context, op providers.Operation, ref string) (providers.LookupResult, error) {
	lr, err := p.testProvider.Lookup(ctx, op, ref)
	if p.after != nil {
		p.after(lr)
	}
	return lr, err
}

// R9, R18, R19, R22: a lookup that finds the operation succeeded, recorded
// after the attempt was resolved failed in the meantime (a webhook,
// reconciliation or an operator while the lookup was on the wire), is a
// success after failed: the reserve went back while the money left.
// applyFound used to return early for a final attempt (and lookupFinals
// skips it), so only the lookup event was written: no divergence, no
// review, no final-conflict note. A found state now goes through
// applyProviderState whatever the status, as a webhook's does (lateConflict,
// TestLateSuccessAfterFailedIsDivergence_R9_R19): the status stays failed
// (R9) and the attempt is diverged and in the review queue.
func TestLookupSuccessAfterFailedIsDivergence_R9_R18_R19(t *testing.T) {
	t.Parallel()
	var hp *hookLookupProvider
	h := setup(t, harnessOpts{tune: func(c *Config) {
		hp = &hookLookupProvider{testProvider: c.Providers["fake"].(*testProvider)}
		c.Providers["fake"] = hp
	}})
	a := unknownAttempt(t, h) // the PSP holds the operation, succeeded
	h.clock.Advance(time.Minute)
	hp.after = func(lr providers.LookupResult) {
		hp.after = nil
		require.True(t, lr.Found)
		require.Equal(t, providers.StateSucceeded, lr.State)
		// Meanwhile the provider's webhook said failed.
		_, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateFailed,
			Source: SourceWebhook, Actor: "evt_1"})
		require.NoError(t, err)
	}
	rr, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	got := h.get(a.ID)
	require.Equal(t, StatusFailed, got.Status)
	var types []string
	for _, e := range h.events(a.ID) {
		types = append(types, string(e.Type)+":"+e.Outcome)
	}
	t.Logf("resolve result %s; events %v", rr.Attempt.Status, types)
	require.NotNil(t, got.DivergedAt, "a provider's success found after the attempt was failed is not flagged")
	require.True(t, got.Review)
	require.Equal(t, []string{"failed"}, h.ownerEffects(a.ID), "the final status never changes (R9)")
}
