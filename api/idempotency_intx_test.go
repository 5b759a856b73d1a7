package api_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/pgproxy"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// setupProxiedAPI is setup with the API's connections, and those of the
// services below it (attempts, charges, payouts: e.att, e.charges, e.pay,
// which the test uses too), going through a pgproxy (its own Server and
// listener); e.pool (the test's reads and writes) goes direct.
func setupProxiedAPI(t *testing.T) (*env, *pgproxy.Proxy) {
	t.Helper()
	e := setup(t, sim.Config{})
	url := e.pool.Config().ConnString()
	proxy := pgproxy.Start(t, url)
	proxied, err := pgxpool.New(e.ctx, proxy.URL(url))
	require.NoError(t, err)
	t.Cleanup(proxied.Close)
	e.att, err = attempts.New(attempts.Config{Pool: proxied, Clock: e.clock, Providers: map[string]providers.Provider{"sim": e.prov}})
	require.NoError(t, err)
	e.charges, err = charges.New(charges.Config{Pool: proxied, Attempts: e.att, Provider: "sim", Clock: e.clock})
	require.NoError(t, err)
	e.pay, err = payouts.New(payouts.Config{Pool: proxied, Attempts: e.att, Provider: "sim", Clock: e.clock,
		Charges: e.charges, OnFinal: e.notif.PayoutFinal, OnDiverged: e.notif.PayoutDiverged})
	require.NoError(t, err)
	e.logs = &syncBuffer{}
	e.api, err = api.New(api.Config{Pool: proxied, Payouts: e.pay, Attempts: e.att, Charges: e.charges,
		Logger:    slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Providers: map[string]providers.Provider{"sim": e.prov}, Clock: e.clock, AllowPrivateNotificationURLs: true})
	require.NoError(t, err)
	e.http = httptest.NewServer(e.api)
	t.Cleanup(e.http.Close)
	return e, proxy
}

// inTxRoute is a route whose effect has no key of its own below the API:
// the idempotency row is completed in the handler's transaction
// (completeIdempotentInTx).
type inTxRoute struct {
	name, path string
	key        func(e *env) string // the API key that calls it
	body       map[string]any
	insert     string                     // the handler's INSERT (what the proxy watches)
	table      string                     // the table it inserts into
	count      string                     // how many objects the request made
	secret     string                     // the answer's secret field, never replayed ("" if none)
	idOf       func(m map[string]any) any // the created object's id in the answer
}

var inTxRoutes = []inTxRoute{
	{name: "notification endpoint", path: "/v1/merchants/m1/notification-endpoints", key: func(e *env) string { return e.m1 },
		body: map[string]any{"url": "https://example.com/hook"}, insert: "INSERT INTO notification_endpoints", table: "notification_endpoints",
		count: `SELECT count(*) FROM notification_endpoints WHERE merchant_id = 'm1'`, secret: "secret",
		idOf: func(m map[string]any) any { return m["id"] }},
	{name: "API key", path: "/v1/keys", key: func(e *env) string { return e.admin },
		body: map[string]any{"role": "auditor", "name": "books"}, insert: "INSERT INTO api_keys", table: "api_keys",
		count: `SELECT count(*) FROM api_keys WHERE name = 'books'`, secret: "secret",
		idOf: func(m map[string]any) any { return m["id"] }},
	{name: "merchant", path: "/v1/merchants", key: func(e *env) string { return e.admin },
		body: map[string]any{"id": "m3", "name": "Loja m3"}, insert: "INSERT INTO merchants", table: "merchants",
		count: `SELECT count(*) FROM merchants WHERE id = 'm3'`,
		idOf:  func(m map[string]any) any { return m["id"].(string) + "/" + m["created_at"].(string) }},
}

// One Idempotency-Key, one object, after a COMMIT whose answer was lost
// (R4, R5: after an error, ask whether it may have committed; never redo
// blindly). On routes with no key of their own below the API, the
// idempotency row is completed in the handler's transaction: the client
// gets 503, and its retry with the same key replays the 201 of the object
// that committed (without its secret) instead of making a second one (or,
// for a merchant, being told 409 already_exists).
func TestLostCommitAnswerOnRoutesWithoutDomainKeysReplays_R4_R5(t *testing.T) {
	t.Parallel()
	for _, rt := range inTxRoutes {
		t.Run(rt.name, func(t *testing.T) {
			t.Parallel()
			e, proxy := setupProxiedAPI(t)
			hdr := map[string]string{"Idempotency-Key": "lost-1"}
			proxy.LoseCommitAnswer(rt.insert, 1)
			r1, err := e.exchange(req{method: http.MethodPost, path: rt.path, key: rt.key(e), body: rt.body, header: hdr})
			require.NoError(t, err)
			require.Equal(t, 1, proxy.Cuts(), "the handler's COMMIT answer was lost")
			require.Equal(t, http.StatusServiceUnavailable, r1.Status, string(r1.Body))
			require.Equal(t, "database_unavailable", r1.code(t))

			var n int
			require.NoError(t, e.pool.QueryRow(e.ctx, rt.count).Scan(&n))
			require.Equal(t, 1, n, "the first request committed")

			r2, err := e.exchange(req{method: http.MethodPost, path: rt.path, key: rt.key(e), body: rt.body, header: hdr})
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, r2.Status, "the retry ran again instead of replaying: %s", r2.Body)
			require.Equal(t, "true", r2.Header.Get(api.ReplayedHeader))
			got := r2.json(t)
			if rt.secret != "" {
				require.NotContains(t, got, rt.secret, "a replay never carries the secret")
				require.Equal(t, "no-store", r2.Header.Get("Cache-Control"))
			}
			require.NoError(t, e.pool.QueryRow(e.ctx, rt.count).Scan(&n))
			require.Equal(t, 1, n, "one Idempotency-Key made %d objects", n)

			// The object replayed is the one that committed.
			switch rt.table {
			case "notification_endpoints":
				var id string
				require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT id FROM notification_endpoints WHERE merchant_id = 'm1'`).Scan(&id))
				require.Equal(t, id, got["id"])
			case "api_keys":
				var id string
				require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT id FROM api_keys WHERE name = 'books'`).Scan(&id))
				require.Equal(t, id, got["id"])
				var stored string
				require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT convert_from(response_body, 'UTF8') FROM idempotent_requests
					WHERE idem_key = 'lost-1'`).Scan(&stored))
				require.NotContains(t, stored, `"secret"`, "a secret was stored for replay")
			case "merchants":
				require.Equal(t, "m3", got["id"])
			}
		})
	}
}

// One Idempotency-Key, one object, when a request outlives its lease and a
// retry takes its key over (R4, R5): the slow request finds, in its own
// transaction, that the claim is no longer its own, rolls back and answers
// 409 request_in_progress; the retry's object is the only one, and a later
// retry replays the retry's 201.
func TestTakenOverRequestOnRoutesWithoutDomainKeysCreatesOnce_R4_R5(t *testing.T) {
	t.Parallel()
	for _, rt := range inTxRoutes {
		t.Run(rt.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, sim.Config{})
			hdr := map[string]string{"Idempotency-Key": "slow-1"}

			// Hold inserts into the route's table (reads go on).
			blocker, err := e.pool.Begin(e.ctx)
			require.NoError(t, err)
			defer blocker.Rollback(e.ctx) //nolint:errcheck
			_, err = blocker.Exec(e.ctx, `LOCK TABLE `+rt.table+` IN SHARE MODE`)
			require.NoError(t, err)
			waiting := func(n int) func() bool {
				return func() bool {
					var k int
					// Waiting on the table lock at its INSERT, or on the
					// merchant's row the first request holds (the endpoint
					// limit's lock).
					_ = e.pool.QueryRow(e.ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
						AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()
						AND (query LIKE $1 || '%' OR query LIKE 'SELECT 1 FROM merchants WHERE id = $1 FOR UPDATE')`, rt.insert).Scan(&k)
					return k == n
				}
			}
			send := func() chan resp {
				ch := make(chan resp, 1)
				go func() {
					r, err := e.exchange(req{method: http.MethodPost, path: rt.path, key: rt.key(e), body: rt.body, header: hdr})
					if err != nil {
						r = resp{Status: -1, Body: []byte(err.Error())}
					}
					ch <- r
				}()
				return ch
			}
			a := send() // claims slow-1, blocks on its INSERT
			require.Eventually(t, waiting(1), 30*time.Second, 5*time.Millisecond)
			e.clock.Advance(2 * time.Minute) // A's lease passes while A is still running
			b := send()                      // takes slow-1 over, blocks too
			require.Eventually(t, waiting(2), 30*time.Second, 5*time.Millisecond)
			require.NoError(t, blocker.Rollback(e.ctx))

			ra, rb := <-a, <-b
			t.Logf("A %d, B %d", ra.Status, rb.Status) // the bodies carry secrets
			require.Equal(t, http.StatusCreated, rb.Status, "the retry that holds the key: %s", rb.Body)
			require.Equal(t, http.StatusConflict, ra.Status, "the request that lost its key: %s", ra.Body)
			if ra.code(t) == "request_in_progress" {
				require.Equal(t, "1", ra.Header.Get("Retry-After"))
			} else {
				// B's INSERT went first; A's merchant could not be made.
				require.Equal(t, "already_exists", ra.code(t))
			}
			var n int
			require.NoError(t, e.pool.QueryRow(e.ctx, rt.count).Scan(&n))
			require.Equal(t, 1, n, "one Idempotency-Key made %d objects", n)

			// B's answer is the one kept: a later retry replays it.
			rc := <-send()
			require.Equal(t, http.StatusCreated, rc.Status, string(rc.Body))
			require.Equal(t, "true", rc.Header.Get(api.ReplayedHeader))
			require.Equal(t, rt.idOf(rb.json(t)), rt.idOf(rc.json(t)))
			if rt.secret != "" {
				require.NotContains(t, rc.json(t), rt.secret)
				require.True(t, strings.Contains(string(rb.Body), `"`+rt.secret+`"`), "the first answer shows the secret")
			}
		})
	}
}
