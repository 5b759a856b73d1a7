package engine_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
)

// R17: every provider report carries its amount, checked against the
// attempt before anything moves. The attempts core skips the amount check
// for a report whose amount is empty, so the Pix adapter never makes one
// for a final state: a notice item of a final state (a send REALIZADO, a
// Pix received for a cob) without a valor is not the PSP's word on the
// amount and the item is refused (a notice with no other usable item as
// malformed: 400, nothing moves); the
// same notice with its valor then settles as usual.
func TestPixNoticeWithoutValorIsRefused_R17(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, srv, pool := newPixEngine(t)
	brl := func(s string) money.Amount { return money.MustParse(s, "BRL") }
	hs := pixAPI(t, e, pool)
	post := func(body string) (int, map[string]any) {
		t.Helper()
		res, err := http.Post(hs.URL+"/v1/webhooks/pix?hmac=w3bh00k", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer res.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(res.Body).Decode(&m)
		return res.StatusCode, m
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)

	t.Run("send", func(t *testing.T) {
		tr, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
			Amount: brl("8.00"), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}}})
		require.NoError(t, err)
		res, err := e.Attempts.Execute(ctx, *tr.CurrentAttemptID)
		require.NoError(t, err)
		a := res.Attempt
		require.Equal(t, attempts.StatusPending, a.Status)
		// Efí's notice of the send, valor left out: refused, nothing moves.
		notice := func(valor string) string {
			return `{"pix":[{"endToEndId":"` + a.ProviderID + `",` + valor + `"horario":"` + now + `","status":"REALIZADO",` +
				`"tipo":"SOLICITACAO","gnExtras":{"idEnvio":"` + a.Reference + `"}}]}`
		}
		code, ack := post(notice(""))
		require.Equal(t, http.StatusBadRequest, code, "%v", ack)
		got, err := e.Attempts.Get(ctx, pool, a.ID)
		require.NoError(t, err)
		require.Equal(t, attempts.StatusPending, got.Status)
		v, err := e.Payouts.Get(ctx, "m1", tr.ID)
		require.NoError(t, err)
		require.Equal(t, payouts.StatusProcessing, v.Status, "a send notice without valor settled the payout with no amount check")
		// With its valor, the same notice settles the payout.
		code, ack = post(notice(`"valor":"8.00",`))
		require.Equal(t, http.StatusOK, code, "%v", ack)
		v, err = e.Payouts.Get(ctx, "m1", tr.ID)
		require.NoError(t, err)
		require.Equal(t, payouts.StatusSucceeded, v.Status)
	})

	t.Run("cob", func(t *testing.T) {
		ch, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindPix, Amount: brl("30.00")})
		require.NoError(t, err)
		res, err := e.Attempts.Execute(ctx, *ch.AttemptID)
		require.NoError(t, err)
		a := res.Attempt
		e2e, err := srv.PayCob(a.Reference)
		require.NoError(t, err)
		notice := func(valor string) string {
			return `{"pix":[{"endToEndId":"` + e2e + `","txid":"` + a.Reference + `",` + valor + `"horario":"` + now + `"}]}`
		}
		code, ack := post(notice(""))
		require.Equal(t, http.StatusBadRequest, code, "%v", ack)
		c, err := e.Charges.Get(ctx, "m1", ch.ID)
		require.NoError(t, err)
		require.NotEqual(t, charges.StatusPaid, c.Status, "a received-Pix notice without valor credited the charge with no amount check")
		code, ack = post(notice(`"valor":"30.00",`))
		require.Equal(t, http.StatusOK, code, "%v", ack)
		c, err = e.Charges.Get(ctx, "m1", ch.ID)
		require.NoError(t, err)
		require.Equal(t, charges.StatusPaid, c.Status)
	})
}

// R17 on the lookup side: a concluded cob whose paying Pix has no valor is
// checked against the cob's valor.original (the Pix's empty valor never
// replaces it), so a cob that says another amount goes to review instead
// of crediting the charge; a concluded cob with no valor at all is
// inconclusive (R16) and the attempt stays open.
func TestPixLookupOfPaidCobWithoutPixValorChecksValorOriginal_R17(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, srv, _ := newPixEngine(t)
	now := time.Now().UTC().Format(time.RFC3339Nano)
	paid := func(original string) (charges.Charge, attempts.Attempt) {
		t.Helper()
		ch, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindPix, Amount: money.MustParse("30.00", "BRL")})
		require.NoError(t, err)
		res, err := e.Attempts.Execute(ctx, *ch.AttemptID)
		require.NoError(t, err)
		a := res.Attempt
		e2e, err := srv.PayCob(a.Reference)
		require.NoError(t, err)
		srv.FailNext(http.StatusOK, `{"calendario":{"criacao":"`+now+`","expiracao":3600},"txid":"`+a.Reference+`","revisao":0,`+
			`"status":"CONCLUIDA","valor":{"original":"`+original+`"},"chave":"`+pixKey+`","location":"x","pixCopiaECola":"000201",`+
			`"pix":[{"endToEndId":"`+e2e+`","txid":"`+a.Reference+`","valor":"","horario":"`+now+`"}]}`)
		time.Sleep(2 * time.Millisecond)
		rr, err := e.Attempts.Resolve(ctx, a.ID)
		require.NoError(t, err)
		return ch, rr.Attempt
	}

	ch, a := paid("80.00")
	require.True(t, a.Review, "a cob concluded for 80.00 on a 30.00 charge, its Pix without valor: status %s", a.Status)
	require.NotEqual(t, attempts.StatusSucceeded, a.Status)
	c, err := e.Charges.Get(ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.NotEqual(t, charges.StatusPaid, c.Status)

	ch, a = paid("")
	require.True(t, a.Status.Open(), "a concluded cob without any valor settled the attempt: %s", a.Status)
	c, err = e.Charges.Get(ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.NotEqual(t, charges.StatusPaid, c.Status)
}
