package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/providers/sim"
)

func scrape(t *testing.T, url string) (int, string) {
	t.Helper()
	return scrapeAs(t, url, "")
}

// scrapeAs GETs url with key as a bearer token (none when empty).
func scrapeAs(t *testing.T, url, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// metricsKey makes an operator key in the database at dbURL, for scraping
// /metrics on --listen.
func metricsKey(t *testing.T, dbURL string) string {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	_, key, err := api.CreateKey(ctx, pool, api.RoleOperator, "", "metrics scraper", time.Now())
	require.NoError(t, err)
	return key
}

// Without --metrics-listen, /metrics is on the API's listener, where the
// API's clients reach it: it shows merchant-level activity and the
// providers' health, so it asks for an API key that may read operations
// data (operator, auditor, admin; bearer, or the password of HTTP Basic).
// No key is 401, a merchant's key 403. A workers-only process guards its
// /metrics the same way.
func TestServeMetricsOnTheAPIListenerNeedAnOperationsKey(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	srv := sim.NewServer(sim.Config{}).Start()
	defer srv.Close()
	ctx := context.Background()
	dbURL := testdb.NewURL(t)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	keys := map[api.Role]string{}
	for _, role := range []api.Role{api.RoleMerchant, api.RoleAuditor, api.RoleOperator, api.RoleAdmin} {
		m := ""
		if role == api.RoleMerchant {
			m = "m1"
		}
		_, keys[role], err = api.CreateKey(ctx, pool, role, m, "test", time.Now())
		require.NoError(t, err)
	}

	check := func(base string) {
		t.Helper()
		status, body := scrapeAs(t, base+"/metrics", "")
		require.Equal(t, http.StatusUnauthorized, status, "no key: %s", body)
		require.NotContains(t, body, "saldo_")
		status, body = scrapeAs(t, base+"/metrics", keys[api.RoleMerchant])
		require.Equal(t, http.StatusForbidden, status, "a merchant's key: %s", body)
		require.NotContains(t, body, "saldo_attempts")
		for _, role := range []api.Role{api.RoleOperator, api.RoleAuditor, api.RoleAdmin} {
			status, body = scrapeAs(t, base+"/metrics", keys[role])
			require.Equal(t, http.StatusOK, status, role)
			require.Contains(t, body, "saldo_attempts_review_queue_size", role)
		}
		// A scraper configured with basic_auth: any user, the key as password.
		req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
		require.NoError(t, err)
		req.SetBasicAuth("prometheus", keys[api.RoleAuditor])
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		status, _ = scrapeAs(t, base+"/metrics", "sk_notakey")
		require.Equal(t, http.StatusUnauthorized, status)
	}
	check(startServe(t, bin, dbURL, srv.URL(), "", "api,workers").base)
	check(startServe(t, bin, dbURL, srv.URL(), "", "workers").base)
}

// Any client could create time series without limit: the raw HTTP method
// was a label (30 random methods took the series from 580 to 1030). Every
// label is bounded now: unknown methods count as "other".
func TestServeMetricsLabelsAreBounded(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	srv := sim.NewServer(sim.Config{}).Start()
	defer srv.Close()
	dbURL := testdb.NewURL(t)
	p := startServe(t, bin, dbURL, srv.URL(), "", "api,workers")
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 30 {
		req, err := http.NewRequest(fmt.Sprintf("PROBE%02d", i), p.base+"/v1/merchants/m1/payouts", nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	status, body := scrapeAs(t, p.base+"/metrics", metricsKey(t, dbURL))
	require.Equal(t, http.StatusOK, status)
	require.False(t, strings.Contains(body, "PROBE"), "a client-chosen method is never a label value")
	require.Contains(t, body, `method="other"`)
	series := 0
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "saldo_http_requests_total{") {
			series++
		}
	}
	require.LessOrEqual(t, series, 3, "the probes share one series per route and status")
}

// --metrics-listen serves /metrics on its own listener, and the API's
// listener no longer does.
func TestServeMetricsListen(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	srv := sim.NewServer(sim.Config{}).Start()
	defer srv.Close()
	dbURL := testdb.NewURL(t)
	p := startServe(t, bin, dbURL, srv.URL(), "", "api,workers", "--metrics-listen", "127.0.0.1:0")
	require.NotEmpty(t, p.metrics, "saldo serve logs where metrics listen")
	status, _ := scrape(t, p.base+"/healthz")
	require.Equal(t, http.StatusOK, status)
	status, _ = scrape(t, p.base+"/metrics")
	require.Equal(t, http.StatusNotFound, status, "the API's clients do not reach /metrics")
	status, _ = scrapeAs(t, p.base+"/metrics", metricsKey(t, dbURL))
	require.Equal(t, http.StatusNotFound, status, "not even with an operations key: it is not served there")
	status, body := scrape(t, p.metrics+"/metrics")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "saldo_http_requests_total")
	status, _ = scrape(t, p.metrics+"/v1/merchants")
	require.Equal(t, http.StatusNotFound, status, "the metrics listener serves no API")

	// A workers-only process moves its /metrics the same way.
	w := startServe(t, bin, testdb.NewURL(t), srv.URL(), "", "workers", "--metrics-listen", "127.0.0.1:0")
	status, _ = scrape(t, w.base+"/metrics")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = scrape(t, w.metrics+"/metrics")
	require.Equal(t, http.StatusOK, status)
}
