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
// 5xx, for every role signed in.
func TestConsoleHostileRequestsNeverAnswer5xx(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	pages := []string{"/console/", "/console/review", "/console/merchants", "/console/merchants/m1", "/console/ledger",
		"/console/ledger/account", "/console/ledger/account.csv", "/console/audit", "/console/charts",
		"/console/providers", "/console/reconcile", "/console/login", "/console/login/link"}
	params := []string{"after", "prefix", "cursor", "format", "code", "order", "at", "rq", "uq", "done", "provider",
		"kind", "status", "severity", "day", "next", "t", "ran", "currency", "from", "to"}
	values := []string{"", " ", "-1", "0", "9223372036854775807", "99999999999999999999", "NaN", "0001-01-01T00:00:00Z",
		"9999-12-31T23:59:59Z", "2026-13-01", "2026-12-04", "ü€😀", strings.Repeat("a", 3000), "'; DROP TABLE attempts; --",
		"merchant/m1/available/BRL", "merchant/nobody/available/BRL", "csv", "desc", "asc", "//evil.example/x",
		"https://evil.example/", "YWJj", "%00", "a\x00b", "\xff\xfe"}
	var failures []string
	for _, role := range []string{"admin", "operator", "auditor", "m1"} {
		c := e.client()
		c.signIn(e.secret[role])
		check := func(path string) {
			res, body := c.get(path)
			if res.StatusCode >= 500 {
				failures = append(failures, fmt.Sprintf("%s as %s: %d %.200s", path[:min(len(path), 160)], role, res.StatusCode, body))
			}
		}
		sweepConsole(check, pages, params, values)
	}
	if len(failures) > 0 {
		t.Fatalf("%d requests answered a 5xx:\n%s", len(failures), strings.Join(failures, "\n"))
	}
}

// sweepConsole checks every page with every parameter set to every value,
// and hostile ids in the console's paths.
func sweepConsole(check func(string), pages, params, values []string) {
	for _, p := range pages {
		for _, k := range params {
			for _, v := range values {
				check(p + "?" + url.Values{k: {v}}.Encode())
			}
		}
	}
	ids := []string{"-1", "0", "9223372036854775808", "99999999999999999999", "abc", "ü€😀", strings.Repeat("a", 2000),
		"00000000-0000-0000-0000-000000000000", "not-a-uuid", "%27%3B--", "..", "%00", "a%00b", "%FF%FE"}
	for _, pattern := range []string{"/console/attempts/%s", "/console/merchants/%s", "/console/merchants/m1/payouts/%s",
		"/console/merchants/m1/splits/%s", "/console/merchants/m1/charges/%s", "/console/ledger/transactions/%s",
		"/console/ledger/transactions/%s/csv", "/console/reconcile/divergences/%s", "/console/merchants/%s/payouts/x"} {
		for _, id := range ids {
			check(fmt.Sprintf(pattern, id))
		}
	}
}

// The same for the forms an operator posts: resolving a stuck attempt, a
// divergence, and signing in, with hostile values in every field. Nothing
// answers a 5xx, and no hostile status resolves the attempt.
func TestConsoleHostileFormsNeverAnswer5xx(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	_, a := e.stuckPayout("10.00")
	c := e.client()
	token := c.signIn(e.secret["operator"])
	values := []string{"", " ", "-1", "SUCCEEDED", "succeeded ", "pending", "unknown", "ü€😀", strings.Repeat("a", 20000),
		"'; DROP TABLE attempts; --", "{", `{"a":`, "null", "[]", `{"a":"\u0000"}`, "%00", "a\x00b", "\xff\xfe"}
	var failures []string
	post := func(path string, form url.Values) {
		res, body := c.post(path, form)
		if res.StatusCode >= 500 {
			failures = append(failures, fmt.Sprintf("%s %v: %d %.200s", path, form, res.StatusCode, body))
		}
	}
	for _, field := range []string{"status", "reason", "evidence"} {
		for _, v := range values {
			form := url.Values{"csrf": {token}, "status": {"failed"}, "reason": {"checked"}, "evidence": {`{"ok":true}`}}
			form.Set(field, v)
			if field != "status" {
				form.Set("status", "bogus") // never resolve: the other fields are the point
			}
			post("/console/attempts/"+a.ID.String()+"/resolve", form)
			post("/console/attempts/not-a-uuid/resolve", form)
			post("/console/reconcile/divergences/"+url.PathEscape(v)+"x/resolve", url.Values{"csrf": {token}, "reason": {v}})
		}
	}
	for _, v := range values {
		post("/console/login", url.Values{"csrf": {token}, "key": {v}, "next": {v}})
		post("/console/login/link", url.Values{"csrf": {token}, "t": {v}})
	}
	if len(failures) > 0 {
		t.Fatalf("%d requests answered a 5xx:\n%s", len(failures), strings.Join(failures, "\n"))
	}
	got, err := e.e.Attempts.Get(e.ctx, e.pool, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != "unknown" && got.Status != "failed" {
		t.Fatalf("a hostile form moved the attempt to %s", got.Status)
	}
}
