package api_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/providers/sim"
)

// Security rule "auditors read but never write" and an operator's key acts
// only by the operator's will: RequireRoles (api/ops.go) accepts HTTP Basic
// credentials, which a browser re-sends by itself on any request to the
// origin, cross-site form posts included. The River UI behind it
// (/ops/river) changes state with POST /ops/river/api/jobs/{cancel,delete,retry}
// and reads the JSON body whatever its Content-Type, so a page on another
// site could post enctype="text/plain" bodies shaped as JSON
// ({"ids":["..."]}) with the operator's cached credentials. A
// state-changing request from another origin must be refused.
func TestRequireRolesRefusesCrossSiteWrites(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	reached := false
	tool := httptest.NewServer(e.api.RequireRoles(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached = true
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	}), api.RoleOperator, api.RoleAdmin))
	t.Cleanup(tool.Close)
	// What <form method=post enctype=text/plain action=.../ops/river/api/jobs/delete>
	// with <input name='{"ids":["1"],"x":"' value='"}'> sends from evil.example.
	r, err := http.NewRequest(http.MethodPost, tool.URL+"/ops/river/api/jobs/delete",
		strings.NewReader(`{"ids":["1"],"x":"="}`))
	require.NoError(t, err)
	r.SetBasicAuth("", e.operator) // the browser's cached credentials
	r.Header.Set("Content-Type", "text/plain")
	r.Header.Set("Origin", "https://evil.example")
	r.Header.Set("Sec-Fetch-Site", "cross-site")
	res, err := http.DefaultClient.Do(r)
	require.NoError(t, err)
	res.Body.Close()
	require.False(t, reached, "a cross-site POST reached the River UI with the operator's Basic credentials (status %d)", res.StatusCode)
	require.Equal(t, http.StatusForbidden, res.StatusCode)
}

// The same-origin rule for Basic-authenticated writes, case by case: the
// River UI's own fetches (JSON sent as text/plain;charset=UTF-8 or no body,
// with Origin and Sec-Fetch-Site of its own origin) still work; anything
// cross-site, Origin "null", or a header-less non-JSON write is 403; bearer
// clients and safe methods are unaffected.
func TestRequireRolesBasicWritesMustBeSameOrigin(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	reached := 0
	tool := httptest.NewServer(e.api.RequireRoles(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached++
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	}), api.RoleOperator, api.RoleAdmin))
	t.Cleanup(tool.Close)
	self := tool.URL // http://127.0.0.1:port, what a browser sends as Origin
	type c struct {
		name, method, ctype, origin, site string
		bearer                            bool
		want                              int
	}
	cases := []c{
		{name: "River UI cancel (fetch, string body)", method: http.MethodPost, ctype: "text/plain;charset=UTF-8", origin: self, site: "same-origin", want: http.StatusOK},
		{name: "River UI pause queue (PUT, no body)", method: http.MethodPut, origin: self, site: "same-origin", want: http.StatusOK},
		{name: "River UI concurrency (PATCH, JSON)", method: http.MethodPatch, ctype: "application/json", origin: self, site: "same-origin", want: http.StatusOK},
		{name: "same origin, browser without Sec-Fetch-Site", method: http.MethodPost, ctype: "text/plain;charset=UTF-8", origin: self, want: http.StatusOK},
		{name: "non-browser JSON client", method: http.MethodPost, ctype: "application/json", want: http.StatusOK},
		{name: "non-browser JSON client with charset", method: http.MethodPost, ctype: "application/json; charset=utf-8", want: http.StatusOK},
		{name: "cross-site JSON", method: http.MethodPost, ctype: "application/json", origin: "https://evil.example", site: "cross-site", want: http.StatusForbidden},
		{name: "same-site sibling", method: http.MethodPost, ctype: "application/json", origin: "https://a.example", site: "same-site", want: http.StatusForbidden},
		{name: "Sec-Fetch-Site none", method: http.MethodPost, ctype: "application/json", site: "none", want: http.StatusForbidden},
		{name: "old browser, foreign Origin", method: http.MethodPost, ctype: "text/plain", origin: "https://evil.example", want: http.StatusForbidden},
		{name: "Origin null (sandboxed frame)", method: http.MethodPost, ctype: "application/json", origin: "null", want: http.StatusForbidden},
		{name: "Origin null claiming same-origin", method: http.MethodPost, ctype: "application/json", origin: "null", site: "same-origin", want: http.StatusForbidden},
		{name: "same-origin site but foreign Origin", method: http.MethodPost, ctype: "application/json", origin: "https://evil.example", site: "same-origin", want: http.StatusForbidden},
		{name: "no browser headers, form body", method: http.MethodPost, ctype: "application/x-www-form-urlencoded", want: http.StatusForbidden},
		{name: "no browser headers, no Content-Type", method: http.MethodDelete, want: http.StatusForbidden},
		{name: "cross-site GET (read only)", method: http.MethodGet, origin: "https://evil.example", site: "cross-site", want: http.StatusOK},
		{name: "bearer client, cross-site headers", method: http.MethodPost, ctype: "text/plain", origin: "https://evil.example", site: "cross-site", bearer: true, want: http.StatusOK},
	}
	for _, tc := range cases {
		before := reached
		r, err := http.NewRequest(tc.method, tool.URL+"/ops/river/api/jobs/cancel", strings.NewReader(`{"ids":["1"]}`))
		require.NoError(t, err)
		if tc.bearer {
			r.Header.Set("Authorization", "Bearer "+e.operator)
		} else {
			r.SetBasicAuth("ops", e.operator)
		}
		if tc.ctype != "" {
			r.Header.Set("Content-Type", tc.ctype)
		}
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		if tc.site != "" {
			r.Header.Set("Sec-Fetch-Site", tc.site)
		}
		res, err := http.DefaultClient.Do(r)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, tc.want, res.StatusCode, tc.name)
		require.Equal(t, tc.want == http.StatusOK, reached > before, "%s: reached the tool", tc.name)
	}
}
