package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/providers/sim"
)

func scrape(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
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
	p := startServe(t, bin, testdb.NewURL(t), srv.URL(), "", "api,workers")
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 30 {
		req, err := http.NewRequest(fmt.Sprintf("PROBE%02d", i), p.base+"/v1/merchants/m1/payouts", nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	status, body := scrape(t, p.base+"/metrics")
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
	p := startServe(t, bin, testdb.NewURL(t), srv.URL(), "", "api,workers", "--metrics-listen", "127.0.0.1:0")
	require.NotEmpty(t, p.metrics, "saldo serve logs where metrics listen")
	status, _ := scrape(t, p.base+"/healthz")
	require.Equal(t, http.StatusOK, status)
	status, _ = scrape(t, p.base+"/metrics")
	require.Equal(t, http.StatusNotFound, status, "the API's clients do not reach /metrics")
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
