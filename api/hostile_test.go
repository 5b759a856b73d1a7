package api_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/hostile"
	"github.com/saldo/saldo/providers/sim"
)

// Every 5xx a client can trigger is a defect: every GET route, with every
// query parameter saldo reads anywhere set to hostile values (out of range,
// out of PostgreSQL's range, not numbers, not dates, cursors of another
// listing, long, SQL-ish), answers a 4xx or a 2xx, never a 5xx, and what
// it answers is what docs/openapi.yaml says (env.exchange checks it).
func TestHostileQueryValuesNeverAnswer5xx(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	// A real cursor of another listing, to hand to every listing.
	pg := e.get("/v1/ledger/postings?account=merchant/m1/available/BRL&limit=1", e.auditor)
	require.Equal(t, http.StatusOK, pg.Status, string(pg.Body))
	var otherCursor string
	if c, ok := pg.json(t)["next_cursor"].(string); ok {
		otherCursor = c
	}
	routes := []struct{ path, key string }{
		{"/v1/merchants/m1/statement", e.m1},
		{"/v1/merchants/m1/balances", e.m1},
		{"/v1/merchants/m1/payouts", e.m1},
		{"/v1/merchants/m1/charges", e.m1},
		{"/v1/merchants/m1/notification-endpoints", e.m1},
		{"/v1/merchants", e.auditor},
		{"/v1/keys", e.admin},
		{"/v1/ledger/transactions", e.auditor},
		{"/v1/ledger/postings", e.auditor},
		{"/v1/ledger/balance", e.auditor},
		{"/v1/ledger/export.csv", e.auditor},
		{"/v1/review-queue", e.operator},
		{"/v1/reconcile/divergences", e.operator},
		{"/v1/reconcile/divergences.csv", e.operator},
		{"/v1/reconcile/runs", e.operator},
	}
	params := []string{"cursor", "limit", "order", "currency", "from", "to", "at", "account", "status", "kind",
		"provider", "cause_kind", "cause_id", "day", "operation", "merchant_id", "reference"}
	values := []string{"", " ", "-1", "0", "9223372036854775807", "99999999999999999999", "1e309", "NaN", "-Infinity",
		"0001-01-01T00:00:00Z", "0001-01-01T00:00:01Z", "9999-12-31T23:59:59Z", "2026-13-01T00:00:00Z",
		"2026-12-04T10:00:00+14:00", "2026-12-04", "ü€😀", strings.Repeat("a", 5000), "'; DROP TABLE attempts; --",
		"merchant/m2/available/BRL", "merchant/m1/available/BRL", base64.RawURLEncoding.EncodeToString([]byte("statement:x:1:1.5")),
		base64.RawURLEncoding.EncodeToString([]byte("statement:x:1:9223372036854775807.9223372036854775807")), otherCursor}
	var failures []string
	for _, r := range routes {
		for _, p := range params {
			for _, v := range values {
				path := r.path + "?" + url.Values{p: {v}}.Encode()
				got, err := e.exchange(req{method: http.MethodGet, path: path, key: r.key})
				failures = noteFailure(failures, fmt.Sprintf("%s", path[:min(len(path), 160)]), got, err)
			}
		}
	}
	// The same for the ids in paths.
	ids := []string{"-1", "0", "9223372036854775808", "99999999999999999999", "abc", "ü€😀", strings.Repeat("a", 2000),
		"00000000-0000-0000-0000-000000000000", "not-a-uuid", "%27%3B--", "po_" + strings.Repeat("0", 32), ".."}
	paths := []struct{ pattern, key string }{
		{"/v1/merchants/%s", e.admin},
		{"/v1/merchants/%s/balances", e.admin},
		{"/v1/merchants/%s/statement", e.admin},
		{"/v1/merchants/m1/payouts/%s", e.m1},
		{"/v1/merchants/m1/charges/%s", e.m1},
		{"/v1/merchants/m1/splits/%s", e.m1},
		{"/v1/ledger/transactions/%s", e.auditor},
		{"/v1/attempts/%s", e.operator},
		{"/v1/reconcile/divergences/%s", e.operator},
		{"/v1/reconcile/runs/%s", e.operator},
	}
	for _, p := range paths {
		for _, id := range ids {
			path := fmt.Sprintf(p.pattern, id)
			got, err := e.exchange(req{method: http.MethodGet, path: path, key: p.key})
			failures = noteFailure(failures, fmt.Sprintf("%s", path[:min(len(path), 160)]), got, err)
		}
	}
	require.Empty(t, failures, "%d failures", len(failures))
}

// A query parameter given twice or empty is refused, naming it: read as its
// first value or as no parameter at all, a filter would fail open (a
// merchant asking for ?status= + a variable that happens to be empty would
// get every payout). Webhooks are left alone: providers choose their URLs'
// query strings.
func TestEmptyOrRepeatedQueryParameterRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	for _, c := range []struct{ path, field string }{
		{"/v1/merchants/m1/payouts?status=", "status"},
		{"/v1/merchants/m1/payouts?status=failed&status=succeeded", "status"},
		{"/v1/merchants/m1/statement?limit=10&cursor=", "cursor"},
		{"/v1/merchants/m1/statement?currency=BRL&currency=USD", "currency"},
	} {
		r := e.get(c.path, e.m1)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", c.path, r.Body)
		require.Equal(t, "validation_failed", r.code(t), c.path)
		require.Equal(t, c.field, r.field(t), c.path)
	}
	r := e.get("/v1/merchants/m1/payouts?status=failed", e.m1)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
}

// The same for bodies: every POST route, from a valid body, with each field
// in turn replaced by hostile values (wrong types, out of range, more
// decimals than the currency has, long, empty, nested), answers a 4xx or a
// 2xx, never a 5xx, as docs/openapi.yaml says; and then the audit (run when
// the test ends) finds the books whole.
func TestHostileBodiesNeverAnswer5xx(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	pix := map[string]any{"pix_key": map[string]any{"type": "email", "value": "a@example.com"}}
	ch := e.post("/v1/merchants/m1/charges", e.m1, "hb-charge", map[string]any{"kind": "card", "amount": "50.00",
		"currency": "BRL", "card_token": "tok_visa"})
	require.Equal(t, http.StatusCreated, ch.Status, string(ch.Body))
	chj := ch.json(t)
	chargeID := chj["id"].(string)
	e.execute(chj["attempt_id"].(string)) // paid: refundable
	// Each route's body is valid as it stands (base: the status it gets),
	// so the sweep reaches past the first check.
	routes := []struct {
		path, key string
		body      map[string]any
		base      int
	}{
		{"/v1/merchants/m1/payouts", e.m1, map[string]any{"operation": "pix_transfer", "amount": "1.00", "currency": "BRL",
			"destination": pix, "description": "x"}, http.StatusCreated},
		{"/v1/merchants/m1/pix-transfers", e.m1, map[string]any{"amount": "1.00", "currency": "BRL", "destination": pix}, http.StatusCreated},
		{"/v1/merchants/m1/splits", e.m1, map[string]any{"currency": "BRL",
			"legs": []any{map[string]any{"operation": "pix_transfer", "amount": "1.00", "destination": pix}}}, http.StatusCreated},
		{"/v1/merchants/m1/charges", e.m1, map[string]any{"kind": "card", "amount": "10.00", "currency": "BRL", "card_token": "tok_visa",
			"splits": []any{map[string]any{"recipient_id": "m2", "percent": "10"}}}, http.StatusCreated},
		{"/v1/merchants/m1/charges/" + chargeID + "/refunds", e.m1, map[string]any{"amount": "1.00", "currency": "BRL"}, http.StatusCreated},
		{"/v1/merchants/m1/fundings", e.admin, map[string]any{"amount": "1.00", "currency": "BRL", "reason": "x"}, http.StatusCreated},
		{"/v1/merchants/m1/notification-endpoints", e.m1, map[string]any{"url": "https://example.com/hook"}, http.StatusCreated},
		{"/v1/merchants", e.admin, map[string]any{"id": "m9", "name": "x"}, http.StatusCreated},
		{"/v1/keys", e.admin, map[string]any{"role": "merchant", "merchant_id": "m1", "name": "x"}, http.StatusCreated},
		{"/v1/attempts/00000000-0000-4000-8000-000000000000/resolution", e.operator, map[string]any{"status": "failed",
			"reason": "x"}, http.StatusNotFound},
	}
	for _, r := range routes {
		got := e.post(r.path, r.key, "hb-base-"+r.path, r.body)
		require.Equal(t, r.base, got.Status, "%s: %s", r.path, got.Body)
	}
	values := []any{nil, true, 0, -1, 1e308, "1e309", "NaN", "-0.00", "0.001", "-1.00", "99999999999999999999999.99",
		"", " ", "ü€😀", strings.Repeat("a", 5000), []any{}, map[string]any{}, []any{map[string]any{}},
		map[string]any{"a": map[string]any{"b": []any{nil}}}, "m2", "USD", "XTS", "tok_chargeDeclined", "http://127.0.0.1/x"}
	var failures []string
	n := 0
	for _, r := range routes {
		// Every top-level field saldo reads somewhere, and every field of the
		// valid body at any depth (legs[0].amount, destination.pix_key.value).
		fields := []string{"amount", "currency", "destination", "description", "metadata", "legs", "kind", "card_token",
			"splits", "url", "reason", "status", "evidence", "role", "merchant_id", "name", "id", "operation", "events"}
		fields = append(fields, hostile.LeafPaths(r.body)...)
		hostile.Each(r.body, fields, values, func(f string, v, body any) {
			n++
			got, err := e.exchange(req{method: http.MethodPost, path: r.path, key: r.key, body: body,
				header: map[string]string{"Idempotency-Key": fmt.Sprintf("hb-%d", n)}})
			failures = noteFailure(failures, fmt.Sprintf("%s %s=%.60v", r.path, f, v), got, err)
		})
	}
	require.Empty(t, failures, "%d failures", len(failures))
}

// A refund's amount left out refunds everything still refundable; an empty
// or null amount is a client's missing value, refused, never read as
// "everything", and nothing is reserved for it.
func TestRefundEmptyOrNullAmountRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	ch := e.post("/v1/merchants/m1/charges", e.m1, "re-charge", map[string]any{"kind": "card", "amount": "50.00",
		"currency": "BRL", "card_token": "tok_visa"})
	require.Equal(t, http.StatusCreated, ch.Status, string(ch.Body))
	chj := ch.json(t)
	e.execute(chj["attempt_id"].(string))
	path := "/v1/merchants/m1/charges/" + chj["id"].(string) + "/refunds"
	for i, amount := range []any{"", nil} {
		r := e.post(path, e.m1, fmt.Sprintf("re-bad-%d", i), map[string]any{"amount": amount, "currency": "BRL"})
		require.Equal(t, http.StatusBadRequest, r.Status, "%v: %s", amount, r.Body)
		require.Equal(t, "amount", r.field(t))
	}
	require.Zero(t, e.countRows("payouts"))
	r := e.post(path, e.m1, "re-all", map[string]any{})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.Equal(t, "50.00", r.json(t)["amount"])
}

// A webhook signed with the right secret but carrying hostile content (a
// provider that misbehaves, or whose secret leaked) answers a 4xx or a 2xx,
// never a 5xx, and moves nothing it should not (the audit when the test
// ends finds the books whole).
func TestHostileSignedWebhooksNeverAnswer5xx(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	p := e.createPix("10.00", "hw-1")
	now := e.clock.Now()
	ref := p["current_attempt_id"].(string)
	values := []any{nil, true, 0, -1, 1e308, "", " ", "NaN", "1e309", "-10.00", "10.001", "99999999999999999999.99",
		"ü€😀", strings.Repeat("a", 5000), []any{}, map[string]any{}, "succeeded", "failed", "processing", "refunded",
		"USD", "2026-13-01T00:00:00Z", "0001-01-01T00:00:00Z", "a\u0000b"}
	base := map[string]any{"id": "evt_1", "type": "operation.updated", "created_at": now,
		"data": map[string]any{"id": "op_1", "reference": ref, "operation": "pix_transfer", "amount": "10.00",
			"currency": "BRL", "state": "succeeded", "created_at": now}}
	var failures []string
	n := 0
	hostile.Each(base, append([]string{"extra"}, hostile.LeafPaths(base)...), values, func(f string, v, body any) {
		n++
		b, err := json.Marshal(hostile.With(body, []string{"id"}, fmt.Sprintf("evt_h%d", n)))
		require.NoError(t, err)
		got, err := e.exchange(req{method: http.MethodPost, path: "/v1/webhooks/sim", body: b,
			header: map[string]string{sim.SignatureHeader: sim.Sign(webhookSecret, now, b)}})
		failures = noteFailure(failures, fmt.Sprintf("%s=%.60v", f, v), got, err)
	})
	for _, raw := range hostile.Malformed {
		got, err := e.exchange(req{method: http.MethodPost, path: "/v1/webhooks/sim", body: []byte(raw),
			header: map[string]string{sim.SignatureHeader: sim.Sign(webhookSecret, now, []byte(raw))}})
		failures = noteFailure(failures, fmt.Sprintf("raw %.40q", raw), got, err)
	}
	require.Empty(t, failures, "%d failures", len(failures))
}

// noteFailure adds what went wrong with one hostile request to failures:
// the exchange's own error (an answer docs/openapi.yaml forbids) or a 5xx.
func noteFailure(failures []string, what string, got resp, err error) []string {
	switch {
	case err != nil:
		return append(failures, fmt.Sprintf("%s: %v", what, err))
	case got.Status >= 500:
		return append(failures, fmt.Sprintf("%s: %d %s", what, got.Status, got.Body))
	}
	return failures
}

// Hostile ids in the paths of POST routes, and hostile headers, with
// bodies that would otherwise be valid: never a 5xx.
func TestHostilePostPathsAndHeadersNeverAnswer5xx(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	pix := map[string]any{"pix_key": map[string]any{"type": "email", "value": "a@example.com"}}
	ids := []string{"-1", "0", "9223372036854775808", "abc", "ü€😀", strings.Repeat("a", 2000), "%00", "a%00b", "%FF%FE",
		"00000000-0000-0000-0000-000000000000", "not-a-uuid", "%27%3B--", "m2"}
	posts := []struct {
		pattern, key string
		body         any
	}{
		{"/v1/merchants/%s/payouts", e.admin, map[string]any{"operation": "pix_transfer", "amount": "1.00", "currency": "BRL", "destination": pix}},
		{"/v1/merchants/%s/pix-transfers", e.admin, map[string]any{"amount": "1.00", "currency": "BRL", "destination": pix}},
		{"/v1/merchants/%s/fundings", e.admin, map[string]any{"amount": "1.00", "currency": "BRL", "reason": "x"}},
		{"/v1/merchants/m1/payouts/%s/retry", e.m1, nil},
		{"/v1/merchants/m1/charges/%s/refunds", e.m1, map[string]any{"amount": "1.00", "currency": "BRL"}},
		{"/v1/merchants/m1/notification-endpoints/%s/disable", e.m1, nil},
		{"/v1/keys/%s/revoke", e.admin, nil},
		{"/v1/attempts/%s/resolution", e.operator, map[string]any{"status": "failed", "reason": "x"}},
		{"/v1/attempts/%s/divergence-settlement", e.operator, map[string]any{"reason": "x"}},
		{"/v1/reconcile/divergences/%s/resolution", e.operator, map[string]any{"reason": "x"}},
	}
	var failures []string
	n := 0
	for _, p := range posts {
		for _, id := range ids {
			n++
			path := fmt.Sprintf(p.pattern, id)
			got, err := e.exchange(req{method: http.MethodPost, path: path, key: p.key, body: p.body,
				header: map[string]string{"Idempotency-Key": fmt.Sprintf("hp-%d", n)}})
			failures = noteFailure(failures, path[:min(len(path), 160)], got, err)
		}
	}
	body := map[string]any{"amount": "1.00", "currency": "BRL", "destination": pix}
	for _, h := range []map[string]string{
		{"Idempotency-Key": ""}, {"Idempotency-Key": strings.Repeat("k", 300)}, {"Idempotency-Key": "ü€😀"},
		{"Idempotency-Key": "a\tb"}, {"Content-Type": "application/json; charset=latin1"}, {"Content-Type": "text/plain"},
		{"Content-Type": "application/json;;;"}, {"Authorization": "Bearer "}, {"Authorization": "Bearer sk_" + strings.Repeat("x", 5000)},
		{"Authorization": "Basic dXNlcjpwYXNz"}, {"Authorization": "Bearer ü€"},
	} {
		n++
		hdr := map[string]string{"Idempotency-Key": fmt.Sprintf("hh-%d", n)}
		for k, v := range h {
			hdr[k] = v
		}
		got, err := e.exchange(req{method: http.MethodPost, path: "/v1/merchants/m1/pix-transfers", key: e.m1, body: body, header: hdr})
		failures = noteFailure(failures, fmt.Sprintf("headers %v", h), got, err)
	}
	require.Empty(t, failures, "%d failures", len(failures))
}
