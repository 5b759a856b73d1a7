package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers/sim"
)

// A JSON body nesting arrays or objects deeper than 64 levels is a 400 at
// once. Before, checkKeys walked any depth and copied the field path at
// every level: 50 KB of '[' from any merchant key kept a CPU busy for
// minutes (a 1 MiB body, hours) while its Idempotency-Key stayed claimed
// (found by review). The generous deadline only keeps a regression from
// hanging the suite.
func TestDeeplyNestedBodyIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	// Its own listener: a regression's handler would outlive the client,
	// and httptest.Server.Close waits for it; closed only once answered.
	srv := httptest.NewServer(e.api)
	body := append([]byte(`{"amount":"1.00","currency":"BRL","metadata":`), bytes.Repeat([]byte("["), 50_000)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/merchants/m1/pix-transfers", bytes.NewReader(body))
	require.NoError(t, err)
	hr.Header.Set("Authorization", "Bearer "+e.m1)
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Idempotency-Key", "deep-1")
	start := time.Now()
	res, err := http.DefaultClient.Do(hr)
	require.NoError(t, err, "a %d-byte body got no answer within %s", len(body), time.Since(start))
	defer res.Body.Close()
	t.Cleanup(srv.Close)
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	var p map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&p))
	require.Contains(t, p["detail"], "deeper than 64")
}
