package engine_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
)

// R17, R9: an item of a Pix notice is a send of ours (an outgoing Pix, Efí's
// gnExtras.idEnvio) or a Pix received for a cob (its txid), and its events
// say which (providers.WebhookEvent.Direction): a send's events match only
// outgoing attempts, a received Pix's only incoming ones. Before, a send's
// events carried no operation, so a send item whose idEnvio was one of our
// cobs' txids (our references share one format) reached the charge path
// and the cob was credited as paid by a send REALIZADO. Now that moves
// nothing: the cob's attempt goes to review (the report contradicts it)
// and the webhook answers "review". An item of both shapes (a send naming
// a txid: saldo pays no QR code, so no send of ours names one) is refused
// alone, named in "refused", moving nothing, neither the send it names nor
// the cob.
func TestPixSendShapedItemNeverPaysACob_R9_R17(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, srv, pool := newPixEngine(t)
	hs := pixAPI(t, e, pool)
	brl := func(s string) money.Amount { return money.MustParse(s, "BRL") }
	now := time.Now().UTC().Format(time.RFC3339Nano)

	ch, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindPix, Amount: brl("30.00")})
	require.NoError(t, err)
	rc, err := e.Attempts.Execute(ctx, *ch.AttemptID)
	require.NoError(t, err)
	cob := rc.Attempt
	require.Equal(t, attempts.StatusPending, cob.Status)
	tr, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: brl("8.00"), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}}})
	require.NoError(t, err)
	rs, err := e.Attempts.Execute(ctx, *tr.CurrentAttemptID)
	require.NoError(t, err)
	send := rs.Attempt
	before := merchantBalances(t, pool)

	requireUnpaid := func(what string) {
		t.Helper()
		c, err := e.Charges.Get(ctx, "m1", ch.ID)
		require.NoError(t, err)
		require.NotEqual(t, charges.StatusPaid, c.Status, "%s paid the cob", what)
		got, err := e.Attempts.Get(ctx, pool, cob.ID)
		require.NoError(t, err)
		require.Equal(t, attempts.StatusPending, got.Status, what)
		require.Empty(t, got.ProviderID, "%s gave the cob a provider id", what)
		require.Equal(t, before, merchantBalances(t, pool), "%s moved money", what)
	}

	// A send REALIZADO whose idEnvio is the cob's txid, with its amount.
	sendNamingCob := `{"endToEndId":"E09089356202611251226APIff82f2e5","valor":"30.00","horario":"` + now + `",` +
		`"status":"REALIZADO","tipo":"SOLICITACAO","gnExtras":{"idEnvio":"` + cob.Reference + `"}}`
	code, ack := pixPost(t, hs.URL, `{"pix":[`+sendNamingCob+`]}`)
	require.Equal(t, http.StatusOK, code, "%v", ack)
	require.Equal(t, api.WebhookReview, ack["outcome"], "a send's report contradicts an incoming attempt")
	requireUnpaid("a send item naming the cob's txid as its idEnvio")
	got, err := e.Attempts.Get(ctx, pool, cob.ID)
	require.NoError(t, err)
	require.True(t, got.Review)

	// An item of both shapes: our send's idEnvio and the cob's txid. Sent
	// beside a good item, which is applied.
	both := `{"endToEndId":"` + send.ProviderID + `","txid":"` + cob.Reference + `","valor":"30.00","horario":"` + now + `",` +
		`"status":"REALIZADO","tipo":"SOLICITACAO","gnExtras":{"idEnvio":"` + send.Reference + `"}}`
	unrelated := `{"endToEndId":"E0000000020200909122100000000001","valor":"1.00","horario":"` + now + `"}`
	code, ack = pixPost(t, hs.URL, `{"pix":[`+unrelated+`,`+both+`]}`)
	require.Equal(t, http.StatusBadRequest, code, "nothing usable: %v", ack)
	code, ack = pixPost(t, hs.URL, `{"pix":[`+both+`,{"endToEndId":"`+send.ProviderID+`","valor":"8.00","horario":"`+now+`",`+
		`"status":"EM_PROCESSAMENTO","tipo":"SOLICITACAO","gnExtras":{"idEnvio":"`+send.Reference+`"}}]}`)
	require.Equal(t, http.StatusOK, code, "%v", ack)
	refused, _ := ack["refused"].([]any)
	require.Len(t, refused, 1, "%v", ack)
	require.True(t, strings.HasPrefix(refused[0].(string), "pix[0] "), "%v", refused)
	requireUnpaid("an item of both shapes")
	gs, err := e.Attempts.Get(ctx, pool, send.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusPending, gs.Status, "an item of both shapes settled the send")

	// A send's status and tipo naming the cob's txid, without an idEnvio:
	// no received Pix of the BCB's shape has either. Refused, nothing paid.
	sendNoID := `{"endToEndId":"E09089356202011251226APIff82f2e7","txid":"` + cob.Reference + `","valor":"30.00",` +
		`"horario":"` + now + `","status":"REALIZADO","tipo":"SOLICITACAO"}`
	code, ack = pixPost(t, hs.URL, `{"pix":[`+sendNoID+`]}`)
	require.Equal(t, http.StatusBadRequest, code, "%v", ack)
	requireUnpaid("a send's status and tipo naming the cob's txid")

	// The cob's own notice still pays it (its review flag from the first
	// notice stays for a human).
	e2e, err := srv.PayCob(cob.Reference)
	require.NoError(t, err)
	code, ack = pixPost(t, hs.URL, `{"pix":[{"endToEndId":"`+e2e+`","txid":"`+cob.Reference+`","valor":"30.00","horario":"`+now+`"}]}`)
	require.Equal(t, http.StatusOK, code, "%v", ack)
	c, err := e.Charges.Get(ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, c.Status)

	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}
