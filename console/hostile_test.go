package console_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// Every 5xx a client can trigger is a defect: every console GET page, with
// every query parameter the console reads set to hostile values, and with
// hostile ids in its paths, answers a page, a redirect or a 4xx, never a
// 5xx, for a signed-in admin (who may open every page).
func TestConsoleHostileRequestsNeverAnswer5xx(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	c := e.client()
	c.signIn(e.secret["admin"])
	pages := []string{"/console/", "/console/review", "/console/merchants", "/console/merchants/m1", "/console/ledger",
		"/console/ledger/account", "/console/ledger/account.csv", "/console/audit", "/console/charts",
		"/console/providers", "/console/reconcile", "/console/login", "/console/login/link"}
	params := []string{"after", "prefix", "cursor", "format", "code", "order", "at", "rq", "uq", "done", "provider",
		"kind", "status", "severity", "day", "next", "t", "ran", "currency", "from", "to"}
	values := []string{"", " ", "-1", "0", "9223372036854775807", "99999999999999999999", "NaN", "0001-01-01T00:00:00Z",
		"9999-12-31T23:59:59Z", "2026-13-01", "2026-12-04", "ü€😀", strings.Repeat("a", 3000), "'; DROP TABLE attempts; --",
		"merchant/m1/available/BRL", "merchant/nobody/available/BRL", "csv", "desc", "asc", "//evil.example/x",
		"https://evil.example/", "YWJj", "%00"}
	var failures []string
	check := func(path string) {
		res, body := c.get(path)
		if res.StatusCode >= 500 {
			failures = append(failures, fmt.Sprintf("%s: %d %.200s", path[:min(len(path), 160)], res.StatusCode, body))
		}
	}
	for _, p := range pages {
		for _, k := range params {
			for _, v := range values {
				check(p + "?" + url.Values{k: {v}}.Encode())
			}
		}
	}
	ids := []string{"-1", "0", "9223372036854775808", "99999999999999999999", "abc", "ü€😀", strings.Repeat("a", 2000),
		"00000000-0000-0000-0000-000000000000", "not-a-uuid", "%27%3B--", ".."}
	for _, pattern := range []string{"/console/attempts/%s", "/console/merchants/%s", "/console/merchants/m1/payouts/%s",
		"/console/merchants/m1/splits/%s", "/console/merchants/m1/charges/%s", "/console/ledger/transactions/%s",
		"/console/ledger/transactions/%s/csv", "/console/reconcile/divergences/%s", "/console/merchants/%s/payouts/x"} {
		for _, id := range ids {
			check(fmt.Sprintf(pattern, id))
		}
	}
	if len(failures) > 0 {
		t.Fatalf("%d requests answered a 5xx:\n%s", len(failures), strings.Join(failures, "\n"))
	}
}
