package engine_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
)

// withEndpoint gives m1 a notification endpoint, so that its
// notifications are recorded.
func withEndpoint(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `INSERT INTO notification_endpoints (id, merchant_id, url, secret, created_at)
		VALUES ('we_00000000000000000000000000000001', 'm1', 'http://127.0.0.1:9/hook', 'whsec', now())`)
	require.NoError(t, err)
}

// divergedEvents are the data of the <typ> notifications (payout.diverged,
// charge.diverged) recorded for object id.
func divergedEvents(t *testing.T, pool *pgxpool.Pool, typ, id string) []map[string]any {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT payload FROM notification_events
		WHERE object_id = $1 AND type = $2 ORDER BY created_at`, id, typ)
	require.NoError(t, err)
	defer rows.Close()
	var out []map[string]any
	for rows.Next() {
		var b []byte
		require.NoError(t, rows.Scan(&b))
		var n map[string]any
		require.NoError(t, json.Unmarshal(b, &n))
		out = append(out, n["data"].(map[string]any))
	}
	require.NoError(t, rows.Err())
	return out
}

// requireDivergedUntilSettled runs the audit: it reports the attempt's
// divergence until an operator settles it, then it is clean.
func requireDivergedUntilSettled(t *testing.T, e interface {
	SettleDivergence(context.Context, uuid.UUID, string, string, attempts.HoldDecision) (attempts.Attempt, error)
}, pool *pgxpool.Pool, id uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.False(t, res.OK(), "audit verify reports the unsettled second operation")
	require.Contains(t, res.Summary(), "diverged")
	require.Contains(t, res.Summary(), id.String())
	_, err = e.SettleDivergence(ctx, id, "op-1", "second operation returned to the payer; booked", attempts.HoldBook)
	require.NoError(t, err)
	res, err = audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

// A cob paid twice, notified in one webhook POST through the real route
// ({"pix": [...]}, two Pix under the same txid, two endToEndIds): the payer
// was charged twice. The charge is credited once (R9: the status, the
// provider id and the ledger stay), and the second Pix is a divergence of
// kind second_operation: the attempt in the review queue, the charge
// needs_attention, charge.diverged tells the merchant with the kind, the
// audit fails until an operator books the return and settles it. The
// PSP's redelivery is a duplicate; a later notice of the second Pix alone
// changes nothing more. Before, it was a note nobody was asked to act on.
func TestCobPaidTwiceByWebhookIsADivergence_R9_R19(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, _, pool := newPixEngine(t)
	hs := pixAPI(t, e, pool)
	withEndpoint(t, pool)

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
	body := `{"pix":[` + pixItem(e2e1) + `,` + pixItem(e2e2) + `]}`
	code, _ := pixPost(t, hs.URL, body)
	require.Equal(t, http.StatusOK, code)
	credited := merchantBalances(t, pool)

	c, err := e.Charges.Get(ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, c.Status, "credited once")
	require.Equal(t, e2e1, c.ProviderID)
	require.True(t, c.NeedsAttention, "the merchant sees the charge needs attention")
	got, err := e.Attempts.Get(ctx, pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, got.Status)
	require.Equal(t, e2e1, got.ProviderID)
	require.NotNil(t, got.DivergedAt, "second Pix %s for txid %s (paid by %s) is a divergence", e2e2, a.Reference, e2e1)
	require.Contains(t, got.Divergence, e2e2)
	require.True(t, got.Review)
	q, _, err := e.Attempts.ReviewQueue(ctx, pool, attempts.ReviewQueueParams{})
	require.NoError(t, err)
	require.Len(t, q, 1)
	require.Equal(t, a.ID, q[0].ID)
	ns := divergedEvents(t, pool, "charge.diverged", ch.ID)
	require.Len(t, ns, 1)
	require.Equal(t, api.DivergenceSecondOperation, ns[0]["divergence_kind"])
	require.Equal(t, a.ID.String(), ns[0]["attempt_id"])
	require.Equal(t, true, ns[0]["object"].(map[string]any)["needs_attention"])

	// The PSP redelivers the POST, then notifies the second Pix alone.
	code, _ = pixPost(t, hs.URL, body)
	require.Equal(t, http.StatusOK, code)
	code, _ = pixPost(t, hs.URL, `{"pix":[`+pixItem(e2e2)+`]}`)
	require.Equal(t, http.StatusOK, code)
	again, err := e.Attempts.Get(ctx, pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, got.DivergedAt, again.DivergedAt)
	require.Len(t, divergedEvents(t, pool, "charge.diverged", ch.ID), 1, "told once")
	var notes int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM attempt_events WHERE attempt_id = $1 AND type = 'note'
		AND strpos(reason, $2) > 0`, a.ID, e2e2).Scan(&notes))
	require.Equal(t, 1, notes)
	require.Equal(t, credited, merchantBalances(t, pool), "the ledger is not moved automatically")

	// The payment saldo credited arrived: the merchant may still refund
	// it (a charge paid twice is no reversal); the second is the
	// operator's to return.
	_, err = e.Payouts.CreateRefund(ctx, payouts.RefundRequest{MerchantID: "m1", ChargeID: ch.ID, ClientKey: "refund-1",
		Amount: money.MustParse("10.00", "BRL")})
	require.NoError(t, err, "a charge paid twice is refundable")

	requireDivergedUntilSettled(t, e.Attempts, pool, a.ID)
	c, err = e.Charges.Get(ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.False(t, c.NeedsAttention, "settled")
}

// A Pix transfer saldo sent once and saw settled (REALIZADO, its
// endToEndId recorded), then notified REALIZADO again under our idEnvio
// with another endToEndId, through the real webhook route: the PSP made
// the transfer twice. The payout stays succeeded and its reserve paid out
// once (R9); the second transfer is a divergence of kind second_operation:
// review, the payout needs_attention, payout.diverged with the kind, the
// audit failing until an operator books it and settles it. The webhook
// answers "review"; its redelivery is a duplicate.
func TestPixTransferMadeTwiceIsADivergence_R9_R19(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, srv, pool := newPixEngine(t)
	hs := pixAPI(t, e, pool)
	withEndpoint(t, pool)

	p, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: money.MustParse("25.00", "BRL"), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email",
			Value: "ana@example.com"}}})
	require.NoError(t, err)
	rs, err := e.Attempts.Execute(ctx, *p.CurrentAttemptID)
	require.NoError(t, err)
	a := rs.Attempt
	require.NoError(t, srv.SettleSend(a.Reference, true))
	time.Sleep(2 * time.Millisecond)
	rr, err := e.Attempts.Resolve(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, rr.Attempt.Status)
	before := merchantBalances(t, pool)

	const e2e2 = "E60701190202612051000ccccccccccc"
	now := time.Now().UTC().Format(time.RFC3339Nano)
	body := `{"pix":[{"endToEndId":"` + e2e2 + `","valor":"25.00","horario":"` + now + `","status":"REALIZADO",` +
		`"tipo":"SOLICITACAO","chave":"` + pixKey + `","gnExtras":{"idEnvio":"` + a.Reference + `"}}]}`
	code, ack := pixPost(t, hs.URL, body)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, api.WebhookReview, ack["outcome"])

	got, err := e.Attempts.Get(ctx, pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, got.Status, "finals never change (R9)")
	require.Equal(t, rr.Attempt.ProviderID, got.ProviderID)
	require.NotNil(t, got.DivergedAt)
	require.Contains(t, got.Divergence, e2e2)
	require.True(t, got.Review)
	v, err := e.Payouts.Get(ctx, "m1", p.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.StatusSucceeded, v.Status)
	require.True(t, v.NeedsAttention)
	ns := divergedEvents(t, pool, "payout.diverged", p.ID)
	require.Len(t, ns, 1)
	require.Equal(t, api.DivergenceSecondOperation, ns[0]["divergence_kind"])
	require.Equal(t, before, merchantBalances(t, pool), "the ledger is not moved automatically")

	code, ack = pixPost(t, hs.URL, body)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, api.WebhookDuplicate, ack["outcome"])
	again, err := e.Attempts.Get(ctx, pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, got.DivergedAt, again.DivergedAt)
	require.Len(t, divergedEvents(t, pool, "payout.diverged", p.ID), 1)

	requireDivergedUntilSettled(t, e.Attempts, pool, a.ID)
	v, err = e.Payouts.Get(ctx, "m1", p.ID)
	require.NoError(t, err)
	require.False(t, v.NeedsAttention)
}
