package api_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/providers"
)

// A merchant's receiver that answers a redirect to an address inside the
// platform (here another loopback server standing for 169.254.169.254 or
// an internal admin port) is not followed by Deliver: the internal target
// is never called, the event is not marked delivered, and the failure says
// only "receiver answered 307".
func TestDeliveryDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	_, err := merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	var internalHits atomic.Int64
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		internalHits.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(internal.Close)
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, internal.URL+"/latest/meta-data", code)
		}))
		t.Cleanup(redirector.Close)
		ep, ev := "we_"+randomHex32(t), "evt_"+randomHex32(t)
		_, err = pool.Exec(ctx, `INSERT INTO notification_endpoints (id, merchant_id, url, secret, created_at)
			VALUES ($1, 'm1', $2, 'whsec_x', now())`, ep, redirector.URL+"/hook")
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO notification_events (id, endpoint_id, merchant_id, type, object_id, dedupe_key, payload, created_at)
			VALUES ($1, $2, 'm1', 'payout.succeeded', 'po_1', 'd', '{}', now())`, ev, ep)
		require.NoError(t, err)
		n, err := api.NewNotifier(api.NotifierConfig{Pool: pool, Logger: slog.New(slog.DiscardHandler),
			HTTP: providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: time.Second}})
		require.NoError(t, err)
		require.Error(t, n.Deliver(ctx, ev))
		var delivered *time.Time
		var status *int
		require.NoError(t, pool.QueryRow(ctx, `SELECT delivered_at, last_status FROM notification_events WHERE id = $1`, ev).Scan(&delivered, &status))
		require.Nil(t, delivered)
		require.NotNil(t, status)
		require.Equal(t, code, *status)
	}
	require.Zero(t, internalHits.Load(), "a delivery followed the receiver's redirect to an internal address")
}

func randomHex32(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}
