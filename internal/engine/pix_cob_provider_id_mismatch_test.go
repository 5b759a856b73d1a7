package engine_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/money"
)

// A cob attempt still open with a provider id recorded (the PSP answered
// the PUT with the cob as it stands, CONCLUIDA with its Pix: the attempts
// core keeps a cob's 2xx "processing" and records the endToEndId it named),
// then a webhook names another endToEndId for the same txid. That is a
// contradiction (R17): the attempt is flagged for review, nothing moves, and
// charges.HandleProviderEvent answers it as ErrEventMismatch, so the webhook
// route answers 200 "review", as for the same contradiction on a payout's
// attempt. Before, the route answered 500 and the PSP redelivered the
// notice forever (found by review).
func TestPixCobProviderIDMismatchWebhookAnswersReview_R17(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, srv, pool := newPixEngine(t)
	hs := pixAPI(t, e, pool)

	ch, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindPix, Amount: money.MustParse("30.00", "BRL")})
	require.NoError(t, err)
	a, err := e.Attempts.Get(ctx, pool, *ch.AttemptID)
	require.NoError(t, err)
	now := time.Now().UTC().Format(time.RFC3339Nano)
	const e2e1, e2e2 = "E09089356202612051000aaaaaaaaaaa", "E09089356202612051000bbbbbbbbbbb"
	srv.FailNext(http.StatusOK, `{"calendario":{"criacao":"`+now+`","expiracao":3600},"txid":"`+a.Reference+`","revisao":0,`+
		`"status":"CONCLUIDA","valor":{"original":"30.00"},"chave":"`+pixKey+`","location":"pixtest.example/qr/v2/x",`+
		`"pixCopiaECola":"000201","pix":[{"endToEndId":"`+e2e1+`","txid":"`+a.Reference+`","valor":"30.00","horario":"`+now+`"}]}`)
	res, err := e.Attempts.Execute(ctx, a.ID)
	require.NoError(t, err)
	t.Logf("after the PUT: status %s provider_state %s provider_id %q", res.Attempt.Status, res.Attempt.ProviderState, res.Attempt.ProviderID)
	require.True(t, res.Attempt.Status.Open())
	require.Equal(t, e2e1, res.Attempt.ProviderID)

	body := `{"pix":[{"endToEndId":"` + e2e2 + `","txid":"` + a.Reference + `","valor":"30.00","horario":"` + now + `"}]}`
	r, err := http.Post(hs.URL+"/v1/webhooks/pix?hmac=w3bh00k", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	t.Logf("webhook: %d %s", r.StatusCode, b)
	got, err := e.Attempts.Get(ctx, pool, a.ID)
	require.NoError(t, err)
	require.True(t, got.Review, "the contradiction is in front of a human")
	require.Equal(t, attempts.StatusPending, got.Status)
	require.Less(t, r.StatusCode, 500, "a notice contradicting the recorded endToEndId answers below 5xx (review), not redelivered forever")
}
