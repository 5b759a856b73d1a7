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
)

// A cob paid twice, notified in one webhook POST ({"pix": [...]} with two
// Pix under the same txid, two endToEndIds): the customer was charged
// twice. The charge is credited once, and the second Pix, another provider
// operation under the reference of an attempt that succeeded with the
// first, is kept as a note on the attempt (R9), not passed silently.
func TestCobPaidTwiceByWebhookIsNoted_R9(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, _, pool := newPixEngine(t)
	hs := pixAPI(t, e, pool)

	ch, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindPix,
		Amount: money.MustParse("30.00", "BRL")})
	require.NoError(t, err)
	res, err := e.Attempts.Execute(ctx, *ch.AttemptID)
	require.NoError(t, err)
	a := res.Attempt
	require.Equal(t, attempts.StatusPending, a.Status)

	now := time.Now().UTC().Format(time.RFC3339Nano)
	pixItem := func(e2e string) string {
		return `{"endToEndId":"` + e2e + `","txid":"` + a.Reference + `","valor":"30.00","horario":"` + now + `"}`
	}
	const e2e1, e2e2 = "E12345678202612051000aaaaaaaaaaa", "E87654321202612051000bbbbbbbbbbb"
	r, err := http.Post(hs.URL+"/v1/webhooks/pix?hmac=w3bh00k&ignorar=/pix", "application/json",
		strings.NewReader(`{"pix":[`+pixItem(e2e1)+`,`+pixItem(e2e2)+`]}`))
	require.NoError(t, err)
	var ack map[string]any
	_ = json.NewDecoder(r.Body).Decode(&ack)
	r.Body.Close()
	require.Equal(t, http.StatusOK, r.StatusCode)

	c, err := e.Charges.Get(ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, c.Status, "credited once")
	got, err := e.Attempts.Get(ctx, pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, e2e1, got.ProviderID)

	var notes int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM attempt_events WHERE attempt_id = $1 AND reason LIKE '%'||$2||'%'`,
		a.ID, e2e2).Scan(&notes))
	require.Equal(t, 1, notes, "second Pix %s for txid %s (paid by %s) is noted on the attempt", e2e2, a.Reference, e2e1)
}
