package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
)

// Payouts of several merchants made final together (PayoutsFinal, the
// group-committed record) give each merchant's endpoints only that
// merchant's events, and a disabled endpoint none.
func TestBatchedFinalsNotifyOnlyTheirMerchant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	for _, m := range []string{"m1", "m2", "m3"} {
		_, err := merchants.Create(ctx, pool, m, "Loja "+m)
		require.NoError(t, err)
	}
	eps := map[string]string{}
	for i, m := range []string{"m1", "m1", "m2", "m3"} {
		id := fmt.Sprintf("we_%032x", i+1)
		eps[id] = m
		_, err := pool.Exec(ctx, `INSERT INTO notification_endpoints (id, merchant_id, url, secret, created_at)
			VALUES ($1, $2, 'https://example.com/hook', 'whsec', now())`, id, m)
		require.NoError(t, err)
	}
	_, err := pool.Exec(ctx, `UPDATE notification_endpoints SET disabled_at = now() WHERE merchant_id = 'm3'`)
	require.NoError(t, err)
	n, err := api.NewNotifier(api.NotifierConfig{Pool: pool, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)

	var ps []payouts.Payout
	for i, m := range []string{"m2", "m1", "m3", "m2", "m1"} {
		a := uuid.New()
		ps = append(ps, payouts.Payout{ID: fmt.Sprintf("po_%d", i), MerchantID: m, Kind: "payout", Operation: "pix_transfer",
			Amount: money.MustParse("1.00", "BRL"), Status: payouts.StatusSucceeded, CurrentAttemptID: &a,
			CreatedAt: time.Now(), UpdatedAt: time.Now()})
	}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, n.PayoutsFinal(ctx, tx, ps))
	require.NoError(t, tx.Commit(ctx))

	rows, err := pool.Query(ctx, `SELECT endpoint_id, merchant_id, payload FROM notification_events`)
	require.NoError(t, err)
	defer rows.Close()
	count := 0
	for rows.Next() {
		var ep, m string
		var payload []byte
		require.NoError(t, rows.Scan(&ep, &m, &payload))
		var env struct {
			Data struct {
				MerchantID string `json:"merchant_id"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(payload, &env))
		require.Equal(t, eps[ep], m, "event of %s recorded for endpoint %s of %s", m, ep, eps[ep])
		require.Equal(t, m, env.Data.MerchantID)
		require.NotEqual(t, "m3", m, "an event for a disabled endpoint")
		count++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 2*2+2*1, count) // m1: 2 payouts x 2 endpoints; m2: 2 x 1
}
