package charges_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// A verified webhook naming a charge's reference with another provider id
// than the one its open attempt recorded is a contradiction (R17): the
// attempts core flags the attempt for review and moves nothing, and
// HandleProviderEvent wraps attempts.ErrProviderIDMismatch as
// ErrEventMismatch, so the webhook route answers 200 "review", as for the
// same contradiction on a payout's attempt. Before, the error was passed on
// as is, the route answered 500 and the provider redelivered the event
// forever (found by review).
func TestProviderIDMismatchOnAChargeIsAnEventMismatch_R17(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{})
	c := e.create(e.pix("50.00"))
	a := e.execute(c)
	require.True(t, a.Status.Open())
	require.NotEmpty(t, a.ProviderID, "the sim records a provider id for a created cob: the contradiction needs one")
	ev := providers.WebhookEvent{ID: "evt_other_op", Type: "pix_charge.succeeded", Operation: providers.OpPixCharge,
		Reference: a.Reference, ProviderID: a.ProviderID + "-other", State: providers.StateSucceeded, Amount: "50.00", Currency: "BRL"}
	handled, err := e.svc.HandleProviderEvent(e.ctx, e.prov.Name(), ev)
	require.True(t, handled)
	got, gerr := e.att.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, gerr)
	require.True(t, got.Review, "flagged for review")
	require.Equal(t, 0, e.credits(c), "nothing credited")
	t.Logf("HandleProviderEvent: %v (ErrProviderIDMismatch: %v)", err, errors.Is(err, attempts.ErrProviderIDMismatch))
	require.True(t, err == nil || errors.Is(err, charges.ErrEventMismatch),
		"a contradiction already put in review comes back as ErrEventMismatch (the webhook route answers 200 review): %v", err)
}
