package api_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
				switch {
				case err != nil:
					failures = append(failures, fmt.Sprintf("%s: %v", path[:min(len(path), 160)], err))
				case got.Status >= 500:
					failures = append(failures, fmt.Sprintf("%s: %d %s", path[:min(len(path), 160)], got.Status, got.Body))
				}
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
			switch {
			case err != nil:
				failures = append(failures, fmt.Sprintf("%s: %v", path[:min(len(path), 160)], err))
			case got.Status >= 500:
				failures = append(failures, fmt.Sprintf("%s: %d %s", path[:min(len(path), 160)], got.Status, got.Body))
			}
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
