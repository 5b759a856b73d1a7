package engine_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// R24 and "a merchant's key sees only its own data": one merchant's
// notification endpoints that accept connections and never answer hold
// only the notifications queue's workers (engine.NotifyQueue), never the
// default queue's, so every merchant's payouts keep being submitted and
// resolved while those deliveries wait out their read timeout. (Deliveries
// shared the default queue: eight hanging endpoints held all six workers
// and stalled every payout for the whole read timeout.)
func TestHangingNotificationEndpointsDoNotStallPayouts_R24(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newHangingWorld(t, 11, engine.Config{MaxWorkers: 6})
	pool, e, hang, held := w.pool, w.e, w.hang, &w.held
	for i := range 8 {
		_, err := pool.Exec(ctx, `INSERT INTO notification_endpoints (id, merchant_id, url, secret, created_at)
			VALUES ($1, 'm1', $2, 'whsec', now())`, fmt.Sprintf("we_%032x", i+1), hang.URL+"/hook")
		require.NoError(t, err)
	}
	pay := func(m, key string) string {
		p, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: m, ClientKey: key,
			Operation: providers.OpPixTransfer, Amount: money.MustParse("10.00", "BRL"),
			Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "a@example.com"}}})
		require.NoError(t, err)
		return p.ID
	}
	final := func(m, id string) bool {
		v, err := e.Payouts.Get(ctx, m, id)
		require.NoError(t, err)
		return v.Status != payouts.StatusProcessing
	}

	first := pay("m1", "first")
	require.Eventually(t, func() bool { return final("m1", first) }, 10*time.Second, 20*time.Millisecond)
	// Its eight deliveries are under way: one hangs (its merchant's
	// in-flight limit, a quarter of the two delivery workers, at least
	// one), the others snooze.
	require.Eventually(t, func() bool { return held.Load() >= 1 }, 10*time.Second, 20*time.Millisecond)
	var queue string
	require.NoError(t, pool.QueryRow(ctx, `SELECT DISTINCT queue FROM river_job WHERE kind = 'saldo_deliver_notification'`).Scan(&queue))
	require.Equal(t, engine.NotifyQueue, queue)

	// Payouts of both merchants go through while the deliveries wait.
	var ids [][2]string
	for i := range 10 {
		m := []string{"m1", "m2"}[i%2]
		ids = append(ids, [2]string{m, pay(m, fmt.Sprint("later-", i))})
	}
	require.Eventually(t, func() bool {
		for _, p := range ids {
			if !final(p[0], p[1]) {
				return false
			}
		}
		return true
	}, 8*time.Second, 20*time.Millisecond, "payouts stalled behind hanging notification deliveries")
	require.LessOrEqual(t, held.Load(), int64(1), "at most the merchant's in-flight limit waits on the endpoints")

	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

// R24: one merchant whose endpoints accept connections and never answer
// delays only its own notifications. Its deliveries hold at most
// MaxInFlightPerMerchant of the notification workers (a quarter of them);
// the others snooze, spending no attempt, and another merchant's event is
// delivered at once. Before, m1's ten hanging endpoints held every delivery
// worker for the whole read timeout, try after try, and m2's events waited
// behind them (found by review).
func TestHangingEndpointsOfOneMerchantDoNotDelayAnothersNotifications_R24(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newHangingWorld(t, 12, engine.Config{MaxWorkers: 8, NotifyWorkers: 4})
	pool, e, hang, held := w.pool, w.e, w.hang, &w.held
	var m2Delivered atomic.Int64
	quick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m2Delivered.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(quick.Close)
	for i := range 10 {
		_, err := pool.Exec(ctx, `INSERT INTO notification_endpoints (id, merchant_id, url, secret, created_at)
			VALUES ($1, 'm1', $2, 'whsec', now())`, fmt.Sprintf("we_%032x", i+1), hang.URL+"/hook")
		require.NoError(t, err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO notification_endpoints (id, merchant_id, url, secret, created_at)
		VALUES ($1, 'm2', $2, 'whsec', now())`, fmt.Sprintf("we_%032x", 99), quick.URL+"/hook")
	require.NoError(t, err)
	pay := func(m string) {
		_, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: m,
			Operation: providers.OpPixTransfer, Amount: money.MustParse("10.00", "BRL"),
			Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "a@example.com"}}})
		require.NoError(t, err)
	}

	pay("m1")
	pay("m1")
	// m1's twenty deliveries are under way: they hang.
	require.Eventually(t, func() bool { return held.Load() >= 1 }, 10*time.Second, 20*time.Millisecond)
	pay("m2")
	require.Eventually(t, func() bool { return m2Delivered.Load() >= 1 }, 10*time.Second, 20*time.Millisecond,
		"m2's notification waited behind m1's hanging endpoints")
	require.Equal(t, int64(1), held.Load(), "m1 holds one delivery worker (a quarter of four)")
	var spent int
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(max(attempt), 0) FROM river_job
		WHERE kind = 'saldo_deliver_notification' AND state <> 'running'`).Scan(&spent))
	require.LessOrEqual(t, spent, 1, "a snoozed delivery spends no attempt")
}

// hangingWorld is a running engine (sim provider, River workers as cfg
// says) with merchants m1 and m2 funded, and a notification receiver that
// accepts connections and never answers (held counts its requests).
type hangingWorld struct {
	pool *pgxpool.Pool
	e    *engine.Engine
	hang *httptest.Server
	held atomic.Int64
}

func newHangingWorld(t *testing.T, seed int64, cfg engine.Config) *hangingWorld {
	t.Helper()
	ctx := context.Background()
	w := &hangingWorld{pool: testdb.New(t)}
	srv := sim.NewServer(sim.Config{Seed: seed}).Start()
	t.Cleanup(srv.Close)
	prov := srv.NewProvider()
	done := make(chan struct{})
	w.hang = httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		w.held.Add(1)
		select { // accepts, reads, never answers
		case <-done:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(w.hang.Close)
	t.Cleanup(func() { close(done) })
	cfg.Pool, cfg.Providers, cfg.PayoutProvider = w.pool, []providers.Provider{prov}, prov.Name()
	cfg.RunWorkers, cfg.FetchPollInterval = true, 20*time.Millisecond
	cfg.Notifications = api.NotifierConfig{HTTP: providers.HTTPSettings{ReadTimeout: 30 * time.Second}}
	var err error
	w.e, err = engine.New(cfg)
	require.NoError(t, err)
	require.NoError(t, w.e.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = w.e.Stop(stopCtx) // the hanging deliveries are cancelled at the end of the budget
	})
	for _, m := range []string{"m1", "m2"} {
		_, err = merchants.Create(ctx, w.pool, m, "Loja "+m)
		require.NoError(t, err)
		_, err = merchants.Fund(ctx, w.pool, merchants.Funding{MerchantID: m, Amount: money.MustParse("1000.00", "BRL"),
			Key: "seed-" + m, Reason: "test", Actor: "test"})
		require.NoError(t, err)
	}
	return w
}
