package engine_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
)

// A paid Pix charge's provider id is the endToEndId of the Pix that paid
// it, and every refund of it needs that id. The BCB description makes a
// cob's pix array optional: a GET /cob that answers CONCLUIDA without it
// names no Pix, so the adapter reads it as processing, not succeeded (a
// final attempt never changes, R9, and would never learn the id). The
// attempt stays open until the PSP's notice names the Pix (R17): then the
// charge is paid with that endToEndId as its provider id and can be
// refunded.
func TestPixCobConcludedWithoutItsPixStaysOpenUntilTheEndToEndIDIsNamed_R9_R17(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, srv, pool := newPixEngine(t)
	hs := pixAPI(t, e, pool)

	ch, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindPix, Amount: money.MustParse("30.00", "BRL")})
	require.NoError(t, err)
	res, err := e.Attempts.Execute(ctx, *ch.AttemptID)
	require.NoError(t, err)
	a := res.Attempt
	e2e, err := srv.PayCob(a.Reference)
	require.NoError(t, err)

	// The resolver's lookup: CONCLUIDA, no pix array. Not conclusive.
	now := time.Now().UTC().Format(time.RFC3339Nano)
	srv.FailNext(http.StatusOK, `{"calendario":{"criacao":"`+now+`","expiracao":3600},"txid":"`+a.Reference+`","revisao":0,`+
		`"status":"CONCLUIDA","valor":{"original":"30.00"},"chave":"`+pixKey+`","location":"x","pixCopiaECola":"000201"}`)
	time.Sleep(2 * time.Millisecond)
	rr, err := e.Attempts.Resolve(ctx, a.ID)
	require.NoError(t, err)
	require.True(t, rr.Attempt.Status.Open(), "a CONCLUIDA cob without its Pix settled the attempt with no endToEndId: %s", rr.Attempt.Status)
	require.Empty(t, rr.Attempt.ProviderID)
	c, err := e.Charges.Get(ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.NotEqual(t, charges.StatusPaid, c.Status)

	// The PSP's notice names the Pix: paid, with its endToEndId.
	body := `{"pix":[{"endToEndId":"` + e2e + `","txid":"` + a.Reference + `","valor":"30.00","horario":"` + now + `"}]}`
	r, err := http.Post(hs.URL+"/v1/webhooks/pix?hmac=w3bh00k", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, http.StatusOK, r.StatusCode)

	c, err = e.Charges.Get(ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, c.Status)
	require.Equal(t, e2e, c.ProviderID)
	_, err = e.Payouts.CreateRefund(ctx, payouts.RefundRequest{MerchantID: "m1", ChargeID: ch.ID, Amount: money.MustParse("10.00", "BRL")})
	require.NoError(t, err, "a paid Pix charge, whose paying Pix the PSP named, can be refunded")
}
