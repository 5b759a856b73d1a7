package providers_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// capsOnly is a Provider that only declares capabilities (routes check
// nothing else).
type capsOnly struct {
	name string
	ops  []providers.Operation
}

func (p capsOnly) Name() string { return p.name }
func (p capsOnly) Capabilities() providers.Capabilities {
	return providers.Capabilities{Operations: p.ops}
}
func (capsOnly) EncodePayload(providers.OperationInput, string) ([]byte, error) {
	return nil, providers.ErrUnsupported
}
func (capsOnly) Submit(context.Context, providers.SubmitRequest) providers.SubmitResult {
	return providers.SubmitResult{}
}
func (capsOnly) Lookup(context.Context, providers.Operation, string) (providers.LookupResult, error) {
	return providers.LookupResult{}, providers.ErrUnsupported
}
func (capsOnly) ParseWebhook(http.Header, []byte, time.Time) (providers.WebhookEvent, error) {
	return providers.WebhookEvent{}, providers.ErrMalformedWebhook
}
func (capsOnly) Statement(context.Context, time.Time) ([]providers.StatementEntry, error) {
	return nil, providers.ErrUnsupported
}

func TestParseRoutes(t *testing.T) {
	t.Parallel()
	r, err := providers.ParseRoutes(" card_charge=stripe, pix_charge = pix,pix_transfer=pix,, ")
	require.NoError(t, err)
	require.Equal(t, providers.Routes{providers.OpCardCharge: {"stripe"}, providers.OpPixCharge: {"pix"},
		providers.OpPixTransfer: {"pix"}}, r)
	require.Equal(t, "card_charge=stripe,pix_charge=pix,pix_transfer=pix", r.String())
	p, ok := r.Provider(providers.OpCardCharge)
	require.True(t, ok)
	require.Equal(t, "stripe", p)
	_, ok = r.Provider(providers.OpBankPayout)
	require.False(t, ok)

	empty, err := providers.ParseRoutes("")
	require.NoError(t, err)
	require.Empty(t, empty)

	for in, want := range map[string]string{
		"card_charge":                      "want operation=provider",
		"card_charge=":                     "want operation=provider",
		"=stripe":                          "want operation=provider",
		"pix_transfer=a||b":                "want operation=provider",
		"pix_transfer=a|b|a":               "names a provider twice",
		"teleport=stripe":                  "unknown operation",
		"refund=stripe":                    "refunds are not routed",
		"card_charge=stripe,card_charge=x": "routed twice",
	} {
		_, err := providers.ParseRoutes(in)
		require.ErrorContains(t, err, want, in)
	}
	// A failover order: new operations go to the first; Next goes round.
	fo, err := providers.ParseRoutes("pix_transfer=pixA|pixB|pixC")
	require.NoError(t, err)
	p, _ = fo.Provider(providers.OpPixTransfer)
	require.Equal(t, "pixA", p)
	require.Equal(t, "pixB", fo.Next(providers.OpPixTransfer, "pixA"))
	require.Equal(t, "pixA", fo.Next(providers.OpPixTransfer, "pixC"))
	require.Equal(t, "other", fo.Next(providers.OpPixTransfer, "other"), "a provider not in the route stays")
	require.Equal(t, "x", fo.Next(providers.OpBankPayout, "x"), "no route: stays")
	require.Equal(t, "pix_transfer=pixA|pixB|pixC", fo.String())

	// The same route twice is harmless.
	_, err = providers.ParseRoutes("card_charge=stripe,card_charge=stripe")
	require.NoError(t, err)
}

// saldo serve refuses to start on an operation routed to a provider that
// is not configured or does not support it.
func TestRoutesCheck(t *testing.T) {
	t.Parallel()
	provs := map[string]providers.Provider{
		"stripe": capsOnly{"stripe", []providers.Operation{providers.OpCardCharge, providers.OpRefund}},
		"pix":    capsOnly{"pix", []providers.Operation{providers.OpPixCharge, providers.OpPixTransfer, providers.OpRefund}},
	}
	ok := providers.Routes{providers.OpCardCharge: {"stripe"}, providers.OpPixTransfer: {"pix"}}
	require.NoError(t, ok.Check(provs))
	require.ErrorContains(t, providers.Routes{providers.OpPixTransfer: {"pix", "stripe"}}.Check(provs),
		`pix_transfer is routed to "stripe", which does not support it`)
	require.ErrorContains(t, providers.Routes{providers.OpBankPayout: {"bank"}}.Check(provs),
		`bank_payout is routed to "bank", which is not configured`)
}
