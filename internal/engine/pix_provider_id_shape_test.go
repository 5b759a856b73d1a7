package engine_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

// A Pix notice's endToEndId (and a devolucao's rtrId) is the BCB's shape:
// E (D) and 31 letters or digits. One of another shape is not the PSP's
// word on the Pix: the Pix adapter refuses the item (a notice with no
// other usable item is refused as malformed: 400,
// never a 5xx the PSP would redeliver forever) and nothing is written. An
// endToEndId of 4000 random characters, in a notice naming an open cob's
// txid and amount, would otherwise become the attempt's provider id, which
// the attempts_provider_id index cannot hold (500). The attempt stays open
// for the lookup or the genuine notice (R16, R17).
func TestPixNoticeWithAnEndToEndIDNotOfTheBCBShapeIsRefused_R17(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, srv, pool := newPixEngine(t)
	hs := pixAPI(t, e, pool)

	ch, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindPix, Amount: money.MustParse("30.00", "BRL")})
	require.NoError(t, err)
	res, err := e.Attempts.Execute(ctx, *ch.AttemptID)
	require.NoError(t, err)
	a := res.Attempt
	require.True(t, a.Status.Open())

	b := make([]byte, 2000)
	_, _ = rand.Read(b)
	now := time.Now().UTC().Format(time.RFC3339Nano)
	post := func(e2e string) int {
		t.Helper()
		body := `{"pix":[{"endToEndId":"` + e2e + `","txid":"` + a.Reference + `","valor":"30.00","horario":"` + now + `"}]}`
		r, err := http.Post(hs.URL+"/v1/webhooks/pix?hmac=w3bh00k", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		got, _ := io.ReadAll(r.Body)
		r.Body.Close()
		t.Logf("webhook (endToEndId of %d characters): %d %.300s", len(e2e), r.StatusCode, got)
		return r.StatusCode
	}
	for _, bad := range []string{
		hex.EncodeToString(b),               // 4000 characters that do not compress
		"E12345678202009091221kkkkkkkkkkkk", // 33
		"X12345678202009091221kkkkkkkkkkk",  // not E
		"E12345678202009091221kkkkkkkkkk-",  // not a letter or digit
	} {
		require.Equal(t, http.StatusBadRequest, post(bad), "a notice with an endToEndId not of the BCB's shape")
	}
	got, err := e.Attempts.Get(ctx, pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusPending, got.Status)
	require.Empty(t, got.ProviderID)

	// The genuine notice pays the charge.
	e2e, err := srv.PayCob(a.Reference)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, post(e2e))
	c, err := e.Charges.Get(ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, c.Status)
	require.Equal(t, e2e, c.ProviderID)
}
