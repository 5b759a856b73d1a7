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
	name  string
	ops   []providers.Operation
	dests map[providers.Operation][]providers.DestinationKind
}

func (p capsOnly) Name() string { return p.name }
func (p capsOnly) Capabilities() providers.Capabilities {
	return providers.Capabilities{Operations: p.ops, Destinations: p.dests}
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
	pixes := lookupOf(pixPSP("pixA"), pixPSP("pixB"), pixPSP("pixC"))
	require.Equal(t, "pixB", fo.Next(providers.OpPixTransfer, "pixA", providers.DestPixKey, pixes))
	require.Equal(t, "pixA", fo.Next(providers.OpPixTransfer, "pixC", providers.DestPixKey, pixes))
	require.Equal(t, "other", fo.Next(providers.OpPixTransfer, "other", providers.DestPixKey, pixes), "a provider not in the route stays")
	require.Equal(t, "x", fo.Next(providers.OpBankPayout, "x", providers.DestBankAccount, pixes), "no route: stays")
	require.Equal(t, "pix_transfer=pixA|pixB|pixC", fo.String())

	// The same route twice is harmless.
	_, err = providers.ParseRoutes("card_charge=stripe,card_charge=stripe")
	require.NoError(t, err)
}

// saldo serve refuses to start on an operation routed to a provider that
// is not configured or does not support it, or that pays no kind of
// destination for it.
func TestRoutesCheck(t *testing.T) {
	t.Parallel()
	provs := map[string]providers.Provider{
		"stripe": capsOnly{name: "stripe", ops: []providers.Operation{providers.OpCardCharge, providers.OpRefund}},
		"pix":    pixPSP("pix"),
		"mute":   capsOnly{name: "mute", ops: []providers.Operation{providers.OpBankPayout}},
	}
	require.ErrorContains(t, providers.Routes{providers.OpBankPayout: {"pix", "mute"}}.Check(provs),
		`bank_payout is routed to "mute", which pays no kind of destination for it`)
	ok := providers.Routes{providers.OpCardCharge: {"stripe"}, providers.OpPixTransfer: {"pix"}}
	require.NoError(t, ok.Check(provs))
	require.ErrorContains(t, providers.Routes{providers.OpPixTransfer: {"pix", "stripe"}}.Check(provs),
		`pix_transfer is routed to "stripe", which does not support it`)
	require.ErrorContains(t, providers.Routes{providers.OpBankPayout: {"bank"}}.Check(provs),
		`bank_payout is routed to "bank", which is not configured`)
}

// pixPSP pays Pix keys and Brazilian bank accounts, as a Pix PSP does.
func pixPSP(name string) capsOnly {
	return capsOnly{name: name, ops: []providers.Operation{providers.OpPixCharge, providers.OpPixTransfer,
		providers.OpBankPayout, providers.OpRefund}, dests: map[providers.Operation][]providers.DestinationKind{
		providers.OpPixTransfer: {providers.DestPixKey, providers.DestBankAccount},
		providers.OpBankPayout:  {providers.DestBankAccount}}}
}

// stripePSP pays connected accounts and its own external bank accounts.
func stripePSP(name string) capsOnly {
	return capsOnly{name: name, ops: []providers.Operation{providers.OpCardCharge, providers.OpRefund,
		providers.OpAccountTransfer, providers.OpBankPayout}, dests: map[providers.Operation][]providers.DestinationKind{
		providers.OpAccountTransfer: {providers.DestStripeAccount},
		providers.OpBankPayout:      {providers.DestStripeBankAccount}}}
}

func lookupOf(ps ...providers.Provider) providers.Lookup {
	m := map[string]providers.Provider{}
	for _, p := range ps {
		m[p.Name()] = p
	}
	return func(name string) (providers.Provider, bool) { p, ok := m[name]; return p, ok }
}

// Issue 14: one bank_payout route names a Pix PSP and Stripe; each
// destination goes to the providers that pay its kind, in route order, and
// a failover skips the providers that cannot pay it.
func TestRoutesAreDestinationAware(t *testing.T) {
	t.Parallel()
	look := lookupOf(pixPSP("pixA"), stripePSP("stripe"), pixPSP("pixB"))
	r, err := providers.ParseRoutes("bank_payout=pixA|stripe|pixB,account_transfer=stripe,card_charge=stripe")
	require.NoError(t, err)
	require.NoError(t, r.Check(map[string]providers.Provider{"pixA": pixPSP("pixA"), "stripe": stripePSP("stripe"),
		"pixB": pixPSP("pixB")}))
	require.Equal(t, []string{"pixA", "pixB"}, r.Takers(providers.OpBankPayout, providers.DestBankAccount, look))
	require.Equal(t, []string{"stripe"}, r.Takers(providers.OpBankPayout, providers.DestStripeBankAccount, look))
	require.Empty(t, r.Takers(providers.OpBankPayout, providers.DestPixKey, look), "no one pays a bank payout to a Pix key")
	require.Empty(t, r.Takers(providers.OpBankPayout, "", look), "a bank payout needs a destination")
	require.Empty(t, r.Takers(providers.OpPixTransfer, providers.DestPixKey, look), "no route")
	require.Equal(t, []string{"stripe"}, r.Takers(providers.OpCardCharge, "", look), "no destination, no filter")
	require.Equal(t, []providers.DestinationKind{providers.DestBankAccount, providers.DestStripeBankAccount},
		r.Kinds(providers.OpBankPayout, look))

	// The failover skips Stripe for a Brazilian bank account, and has
	// nowhere to go for a Stripe bank account.
	require.Equal(t, "pixB", r.Next(providers.OpBankPayout, "pixA", providers.DestBankAccount, look))
	require.Equal(t, "pixA", r.Next(providers.OpBankPayout, "pixB", providers.DestBankAccount, look))
	require.Equal(t, "stripe", r.Next(providers.OpBankPayout, "stripe", providers.DestStripeBankAccount, look))
	// A provider the lookup does not find takes nothing.
	require.Equal(t, "pixA", r.Next(providers.OpBankPayout, "pixA", providers.DestBankAccount, lookupOf(pixPSP("pixA"))))

	c := stripePSP("stripe").Capabilities()
	require.True(t, c.Takes(providers.OpBankPayout, providers.DestStripeBankAccount))
	require.False(t, c.Takes(providers.OpBankPayout, providers.DestBankAccount))
	require.False(t, c.Takes(providers.OpPixTransfer, providers.DestPixKey), "unsupported operation")
	require.True(t, c.Takes(providers.OpCardCharge, ""))
	require.False(t, c.Takes(providers.OpCardCharge, providers.DestStripeAccount), "a charge has no destination")
}

func TestDestinationKind(t *testing.T) {
	t.Parallel()
	var none *providers.Destination
	require.Equal(t, providers.DestinationKind(""), none.Kind())
	require.Equal(t, providers.DestinationKind(""), (&providers.Destination{HolderName: "x"}).Kind())
	require.Equal(t, providers.DestPixKey, (&providers.Destination{PixKey: &providers.PixKey{}}).Kind())
	require.Equal(t, providers.DestBankAccount, (&providers.Destination{BankAccount: &providers.BankAccount{}}).Kind())
	require.Equal(t, providers.DestStripeAccount, (&providers.Destination{StripeAccount: "acct_1"}).Kind())
	require.Equal(t, providers.DestStripeBankAccount, (&providers.Destination{StripeBankAccount: "ba_1"}).Kind())
}
