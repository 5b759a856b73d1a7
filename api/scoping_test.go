package api_test

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/providers/sim"
)

func TestHealthAndDocument(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	require.Equal(t, http.StatusOK, e.get("/healthz", "").Status)
	require.Equal(t, http.StatusOK, e.get("/readyz", "").Status)
	r := e.get("/openapi.yaml", "")
	require.Equal(t, http.StatusOK, r.Status)
	onDisk, err := os.ReadFile("../docs/openapi.yaml")
	require.NoError(t, err)
	require.Equal(t, onDisk, r.Body, "the served document is docs/openapi.yaml")
	require.Equal(t, api.OpenAPI, r.Body)

	// Unknown routes and methods are problems too.
	for _, c := range []struct {
		method, path string
		status       int
	}{{http.MethodGet, "/nothing", 404}, {http.MethodGet, "/v1/nothing", 401}, {http.MethodDelete, "/healthz", 405}} {
		hr, err := http.NewRequest(c.method, e.http.URL+c.path, nil)
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(hr)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, c.status, res.StatusCode)
		require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
	}
}

// A merchant key sees only its merchant: another merchant's payout or
// balance is 404 (never 403: no probing of ids); auditors may not POST;
// operators may not create payouts; no key or a bad or revoked key is 401.
func TestScoping(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	p := e.createPix("10.00", "scope-1")
	id := p["id"].(string)

	// Owner and whole-ledger roles read it.
	for _, k := range []string{e.m1, e.admin, e.auditor} {
		r := e.get("/v1/merchants/m1/payouts/"+id, k)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.Equal(t, id, r.json(t)["id"])
	}
	// Another merchant: 404 for the payout, the balances, the list, the merchant.
	for _, path := range []string{"/v1/merchants/m1/payouts/" + id, "/v1/merchants/m1/balances",
		"/v1/merchants/m1/payouts", "/v1/merchants/m1"} {
		r := e.get(path, e.m2)
		require.Equal(t, http.StatusNotFound, r.Status, path)
		require.Equal(t, "not_found", r.code(t))
	}
	// m2 asking for m1's payout under its own merchant: still 404.
	r := e.get("/v1/merchants/m2/payouts/"+id, e.m2)
	require.Equal(t, http.StatusNotFound, r.Status)
	// m2 cannot move m1's money either.
	r = e.post("/v1/merchants/m1/pix-transfers", e.m2, "scope-2", pixBody("1.00"))
	require.Equal(t, http.StatusNotFound, r.Status)

	// Auditor: read-only.
	for _, c := range []struct{ path, idem string }{
		{"/v1/merchants/m1/pix-transfers", "a1"}, {"/v1/merchants/m1/payouts", "a2"},
		{"/v1/merchants/m1/fundings", "a3"}, {"/v1/merchants", "a4"}, {"/v1/merchants/m1/payouts/" + id + "/retry", "a5"},
	} {
		r := e.post(c.path, e.auditor, c.idem, pixBody("1.00"))
		require.Equal(t, http.StatusForbidden, r.Status, c.path)
		require.Equal(t, "forbidden", r.code(t))
	}
	// Operator: no payouts, no balances; review queue yes.
	r = e.post("/v1/merchants/m1/pix-transfers", e.operator, "o1", pixBody("1.00"))
	require.Equal(t, http.StatusForbidden, r.Status)
	r = e.post("/v1/merchants/m1/payouts", e.operator, "o2", map[string]any{"operation": "pix_transfer", "amount": "1.00",
		"currency": "BRL", "destination": pixBody("1")["destination"]})
	require.Equal(t, http.StatusForbidden, r.Status)
	require.Equal(t, http.StatusForbidden, e.get("/v1/merchants/m1/balances", e.operator).Status)
	require.Equal(t, http.StatusOK, e.get("/v1/review-queue", e.operator).Status)
	// Merchants do not read the ledger, attempts or the review queue.
	require.Equal(t, http.StatusForbidden, e.get("/v1/ledger/transactions", e.m1).Status)
	require.Equal(t, http.StatusForbidden, e.get("/v1/review-queue", e.m1).Status)
	require.Equal(t, http.StatusForbidden, e.get("/v1/attempts/"+e.attemptOf(p).ID.String(), e.m1).Status)

	// No key, a bad key, a malformed header, a revoked key: 401.
	for _, h := range []map[string]string{nil, {"Authorization": "Bearer sk_nope"}, {"Authorization": "Basic abc"},
		{"Authorization": "Bearer " + strings.TrimPrefix(e.m1, "sk_")}} {
		r := e.do(req{method: http.MethodGet, path: "/v1/merchants/m1/balances", header: h})
		require.Equal(t, http.StatusUnauthorized, r.Status)
		require.Equal(t, "unauthorized", r.code(t))
		require.NotEmpty(t, r.Header.Get("WWW-Authenticate"))
	}
	k, secret, err := api.CreateKey(e.ctx, e.pool, api.RoleMerchant, "m1", "soon revoked", time.Now())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, e.get("/v1/merchants/m1/balances", secret).Status)
	require.NoError(t, api.RevokeKey(e.ctx, e.pool, k.ID, time.Now()))
	require.Equal(t, http.StatusUnauthorized, e.get("/v1/merchants/m1/balances", secret).Status)

	// Logs name key ids, never secrets.
	logs := e.logs.String()
	require.Contains(t, logs, `"key_id":"key_`)
	for _, secret := range []string{e.m1, e.m2, e.admin, e.auditor, e.operator, secret} {
		require.NotContains(t, logs, secret)
	}

	// The balance reads right for the owner: 10.00 reserved (R22).
	av, re := e.balances("m1", e.m1)
	require.Equal(t, "990.00", av)
	require.Equal(t, "10.00", re)
}

// Keys are created by admins (the secret shown once, stored only hashed)
// and a merchant key works only for its merchant.
func TestKeysAndMerchants(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	r := e.post("/v1/merchants", e.admin, "", map[string]any{"id": "m3", "name": "Padaria"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	r = e.post("/v1/merchants", e.admin, "", map[string]any{"id": "m3", "name": "Padaria"})
	require.Equal(t, http.StatusConflict, r.Status)
	require.Equal(t, "already_exists", r.code(t))
	r = e.post("/v1/merchants", e.admin, "", map[string]any{"id": "Bad Id", "name": "x"})
	require.Equal(t, http.StatusBadRequest, r.Status)

	r = e.post("/v1/keys", e.admin, "", map[string]any{"role": "merchant", "merchant_id": "m3", "name": "m3 backend"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	secret := r.json(t)["secret"].(string)
	require.True(t, strings.HasPrefix(secret, api.SecretPrefix))
	var n int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM api_keys WHERE prefix = $1 AND position($2 in encode(secret_sha256, 'escape')) = 0`,
		r.json(t)["prefix"], secret).Scan(&n))
	require.Equal(t, 1, n)
	require.Equal(t, http.StatusOK, e.get("/v1/merchants/m3/balances", secret).Status)
	require.Equal(t, http.StatusNotFound, e.get("/v1/merchants/m1/balances", secret).Status)

	for _, bad := range []map[string]any{{"role": "merchant"}, {"role": "auditor", "merchant_id": "m3"}, {"role": "root"}} {
		r = e.post("/v1/keys", e.admin, "", bad)
		require.Equal(t, http.StatusBadRequest, r.Status, bad)
	}
	r = e.post("/v1/keys", e.admin, "", map[string]any{"role": "merchant", "merchant_id": "ghost"})
	require.Equal(t, http.StatusNotFound, r.Status)
	require.Equal(t, http.StatusForbidden, e.post("/v1/keys", e.m1, "", map[string]any{"role": "admin"}).Status)

	r = e.get("/v1/merchants?limit=2", e.auditor)
	require.Equal(t, http.StatusOK, r.Status)
	page := r.json(t)
	require.Len(t, page["data"], 2)
	r = e.get("/v1/merchants?limit=2&cursor="+page["next_cursor"].(string), e.auditor)
	require.Len(t, r.json(t)["data"], 1)
}

// Strict JSON: unknown fields, numbers for amounts, too many decimals, two
// values, wrong media type, oversized bodies are all refused with a problem
// naming the field, and nothing is written.
func TestStrictJSON(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	dest := pixBody("1")["destination"]
	cases := []struct {
		name   string
		body   any
		status int
		code   string
		field  string
	}{
		{"unknown field", map[string]any{"amount": "1.00", "currency": "BRL", "destination": dest, "amout": "2"}, 400, "validation_failed", "amout"},
		{"amount as number", map[string]any{"amount": 1.5, "currency": "BRL", "destination": dest}, 400, "validation_failed", "amount"},
		{"too many decimals", map[string]any{"amount": "1.001", "currency": "BRL", "destination": dest}, 400, "validation_failed", "amount"},
		{"zero", map[string]any{"amount": "0.00", "currency": "BRL", "destination": dest}, 400, "validation_failed", "amount"},
		{"unknown currency", map[string]any{"amount": "1.00", "currency": "XXZ", "destination": dest}, 400, "validation_failed", "currency"},
		{"bad pix key", map[string]any{"amount": "1.00", "currency": "BRL",
			"destination": map[string]any{"pix_key": map[string]any{"type": "cpf", "value": "123"}}}, 400, "validation_failed", "destination.pix_key.value"},
		{"nested unknown field", map[string]any{"amount": "1.00", "currency": "BRL",
			"destination": map[string]any{"pix_key": map[string]any{"type": "email", "value": "a@b.co", "x": 1}}}, 400, "validation_failed", "destination.pix_key.x"},
		{"two values", `{"amount":"1.00","currency":"BRL","destination":{"pix_key":{"type":"email","value":"a@b.co"}}} {}`, 400, "invalid_request", ""},
		{"malformed", `{"amount":`, 400, "invalid_request", ""},
		{"too large", `{"description":"` + strings.Repeat("x", api.DefaultMaxBodyBytes) + `"}`, 413, "body_too_large", ""},
	}
	for i, c := range cases {
		r := e.post("/v1/merchants/m1/pix-transfers", e.m1, "strict-"+c.name, c.body)
		require.Equal(t, c.status, r.Status, "%s: %s", c.name, r.Body)
		require.Equal(t, c.code, r.code(t), c.name)
		if c.field != "" {
			require.Equal(t, c.field, r.json(t)["field"], c.name)
		}
		require.Equal(t, "strict-"+c.name, r.Header.Get("Idempotency-Key"), i)
	}
	r := e.do(req{method: http.MethodPost, path: "/v1/merchants/m1/pix-transfers", key: e.m1, body: "amount=1",
		header: map[string]string{"Content-Type": "text/plain", "Idempotency-Key": "strict-ct"}})
	require.Equal(t, http.StatusUnsupportedMediaType, r.Status)
	av, re := e.balances("m1", e.m1)
	require.Equal(t, []string{"1000.00", "0.00"}, []string{av, re}, "nothing was reserved")
}

// Admins list and revoke keys through the API; a key cannot revoke itself;
// merchants disable their notification endpoints (at most 10 active).
func TestKeyRevocationAndEndpoints(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	r := e.get("/v1/keys?merchant_id=m1", e.admin)
	require.Equal(t, http.StatusOK, r.Status)
	data := r.json(t)["data"].([]any)
	require.Len(t, data, 1)
	m1Key := data[0].(map[string]any)
	require.NotContains(t, string(r.Body), e.m1)
	require.Equal(t, http.StatusForbidden, e.get("/v1/keys", e.auditor).Status)

	path := "/v1/keys/" + m1Key["id"].(string) + "/revoke"
	r = e.post(path, e.admin, "", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.NotNil(t, r.json(t)["revoked_at"])
	again := e.post(path, e.admin, "", nil)
	require.Equal(t, http.StatusOK, again.Status)
	require.Equal(t, r.json(t)["revoked_at"], again.json(t)["revoked_at"])
	require.Equal(t, http.StatusUnauthorized, e.get("/v1/merchants/m1/balances", e.m1).Status)
	require.Equal(t, http.StatusNotFound, e.post("/v1/keys/key_0000000000000000/revoke", e.admin, "", nil).Status)

	adminKeys := e.get("/v1/keys", e.admin).json(t)["data"].([]any)
	for _, k := range adminKeys {
		k := k.(map[string]any)
		if k["role"] == "admin" {
			r = e.post("/v1/keys/"+k["id"].(string)+"/revoke", e.admin, "", nil)
			require.Equal(t, http.StatusConflict, r.Status)
			require.Equal(t, "own_key", r.code(t))
		}
	}

	var ids []string
	for i := range api.MaxNotificationEndpoints {
		r := e.do(req{method: http.MethodPost, path: "/v1/merchants/m2/notification-endpoints", key: e.m2,
			body: map[string]any{"url": fmt.Sprintf("https://example.com/hook/%d", i)}})
		require.Equal(t, http.StatusCreated, r.Status)
		ids = append(ids, r.json(t)["id"].(string))
	}
	r = e.do(req{method: http.MethodPost, path: "/v1/merchants/m2/notification-endpoints", key: e.m2,
		body: map[string]any{"url": "https://example.com/one-too-many"}})
	require.Equal(t, http.StatusConflict, r.Status)
	require.Equal(t, "too_many_endpoints", r.code(t))
	r = e.post("/v1/merchants/m2/notification-endpoints/"+ids[0]+"/disable", e.m2, "", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.NotNil(t, r.json(t)["disabled_at"])
	require.Equal(t, http.StatusNotFound, e.post("/v1/merchants/m1/notification-endpoints/"+ids[1]+"/disable", e.admin, "", nil).Status)
	r = e.do(req{method: http.MethodPost, path: "/v1/merchants/m2/notification-endpoints", key: e.m2,
		body: map[string]any{"url": "https://example.com/replacement"}})
	require.Equal(t, http.StatusCreated, r.Status)

	// A final payout notifies the active endpoints only; disabling one
	// drops its pending delivery without sending.
	require.Equal(t, http.StatusCreated, e.post("/v1/merchants/m2/fundings", e.admin, "f", map[string]any{
		"amount": "5.00", "currency": "BRL", "reason": "test"}).Status)
	r = e.post("/v1/merchants/m2/pix-transfers", e.m2, "p", pixBody("5.00"))
	require.Equal(t, http.StatusCreated, r.Status)
	a := e.attemptOf(r.json(t))
	_, err := e.att.Execute(e.ctx, a.ID)
	require.NoError(t, err)
	var n int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM notification_events WHERE merchant_id = 'm2'`).Scan(&n))
	require.Equal(t, api.MaxNotificationEndpoints, n)
	var ev string
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT id FROM notification_events WHERE endpoint_id = $1`, ids[1]).Scan(&ev))
	require.Equal(t, http.StatusOK, e.post("/v1/merchants/m2/notification-endpoints/"+ids[1]+"/disable", e.m2, "", nil).Status)
	require.NoError(t, e.notif.Deliver(e.ctx, ev))
	var lastErr string
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT last_error FROM notification_events WHERE id = $1`, ev).Scan(&lastErr))
	require.Contains(t, lastErr, "disabled")
}
