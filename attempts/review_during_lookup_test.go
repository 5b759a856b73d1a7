package attempts

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// duringLookupProvider runs during each lookup, after the resolver read the
// attempt and took `asked`, before its answer is recorded: what another
// actor (reconciliation, a webhook) does while the lookup is on the wire.
type duringLookupProvider struct {
	*testProvider
	during func()
}

func (p *duringLookupProvider) Lookup(ctx context.Context, op providers.Operation, ref string) (providers.LookupResult, error) {
	lr, err := p.testProvider.Lookup(ctx, op, ref)
	if p.during != nil {
		p.during()
	}
	return lr, err
}

// R18, R22: a statement line (reconciliation) says the operation moved
// money under the attempt's reference, with another amount:
// ResolveByReference moves nothing and sends the attempt to review ("a human
// checks it"). A lookup already on the wire (its attempt read before the
// review flag) that comes back "not found" (the provider's search lags)
// fails nothing: the locked row is in review, so a human decides, as when
// the statement came first (the control below).
func TestNotFoundFailsNothingPutInReviewDuringTheLookup_R18_R22(t *testing.T) {
	t.Parallel()
	var hp *duringLookupProvider
	h := setup(t, harnessOpts{tune: func(c *Config) {
		hp = &duringLookupProvider{testProvider: c.Providers["fake"].(*testProvider)}
		c.Providers["fake"] = hp
	}})
	for _, k := range Kinds {
		h.svc.RegisterOwner(k, amountOwner{h.owner})
	}
	h.psp.hideUntil = 1000 // the provider holds the operation; its search lags
	a := unknownAttempt(t, h)
	h.clock.Advance(10 * time.Minute) // past the 2 m consistency window

	hp.during = func() {
		hp.during = nil
		_, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, Provider: "fake",
			Operation: providers.OpPixTransfer, Amount: "99.00", Currency: "BRL", State: providers.StateSucceeded,
			ProviderID: "op_" + a.Reference[:12], Source: SourceReconciliation, Actor: "run_1"})
		require.ErrorIs(t, err, ErrReportMismatch)
		require.True(t, h.get(a.ID).Review, "the statement sent the attempt to review")
	}
	_, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)

	got := h.get(a.ID)
	require.True(t, got.Review)
	require.Equal(t, StatusUnknown, got.Status,
		"an attempt in review, whose provider's statement says money moved, was failed by a lookup's \"not found\"")
	require.Empty(t, h.ownerEffects(a.ID), "the owner released the reserve")
}

// Control: the same statement before the lookup starts. Resolve sees the
// review flag and makes no lookup; the attempt stays open for a human.
func TestReviewBeforeTheLookupMeansNoLookup_R18(t *testing.T) {
	t.Parallel()
	h := setupAmountOwner(t)
	h.psp.hideUntil = 1000
	a := unknownAttempt(t, h)
	h.clock.Advance(10 * time.Minute)
	_, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, Provider: "fake",
		Operation: providers.OpPixTransfer, Amount: "99.00", Currency: "BRL", State: providers.StateSucceeded,
		ProviderID: "op_" + a.Reference[:12], Source: SourceReconciliation, Actor: "run_1"})
	require.ErrorIs(t, err, ErrReportMismatch)
	_, err = h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusUnknown, h.get(a.ID).Status)
	require.Empty(t, h.ownerEffects(a.ID))
}
