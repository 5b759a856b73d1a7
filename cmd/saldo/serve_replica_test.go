package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/internal/pgcluster"
	"github.com/saldo/saldo/internal/replica"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/migrations"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers/sim"
)

// saldo serve --read-database-url reads balances from a real streaming
// replica (Saldo-Replica-Lag on the answer) and reports the replica in
// /metrics; a replica that does not answer at start-up does not stop serve,
// whose reads then go to the primary.
func TestServeReadDatabaseURL(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	ctx := context.Background()
	primary, err := pgcluster.Start(ctx, pgcluster.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, primary.Remove()) })
	_, err = migrations.Up(ctx, primary.URL("postgres"), nil)
	require.NoError(t, err)
	rep, err := primary.StartReplica(ctx, pgcluster.ReplicaOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rep.Remove()) })
	pool, err := pgxpool.New(ctx, primary.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("25.00", "BRL"),
		Key: "seed", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	_, key, err := api.CreateKey(ctx, pool, api.RoleMerchant, "m1", "test", time.Now())
	require.NoError(t, err)
	// /metrics on --listen asks for an operations key.
	opKey := metricsKey(t, primary.URL("postgres"))
	psp := sim.NewServer(sim.Config{Seed: 5}).Start()
	t.Cleanup(psp.Close)

	get := func(base, path string) (*http.Response, string) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res, string(b)
	}

	p := startServe(t, bin, primary.URL("postgres"), psp.URL(), "", "api,workers",
		"--read-database-url", rep.URL("postgres"), "--read-max-lag", "10s")
	require.Eventually(t, func() bool {
		res, body := get(p.base, "/v1/merchants/m1/balances")
		return res.StatusCode == http.StatusOK && res.Header.Get(replica.LagHeader) != "" && strings.Contains(body, `"available":"25.00"`)
	}, 30*time.Second, 50*time.Millisecond, "balances are read on the replica")
	status, body := scrapeAs(t, p.base+"/metrics", opKey)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "saldo_replica_up 1")
	require.Contains(t, body, "saldo_replica_lag_seconds")
	require.Contains(t, body, `saldo_replica_fallbacks_total{reason="unavailable"}`)
	require.NotContains(t, body, "saldo_replica_reads_total 0")

	// A replica that is not there: serve starts, reads the primary.
	down := startServe(t, bin, primary.URL("postgres"), psp.URL(), "", "api",
		"--read-database-url", "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable")
	res, body := get(down.base, "/v1/merchants/m1/balances")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Empty(t, res.Header.Get(replica.LagHeader))
	require.Contains(t, body, `"available":"25.00"`)
}

// serve refuses a bad --read-max-lag and a --read-database-url that is not
// a PostgreSQL URL, naming each.
func TestServeRefusesBadReadReplicaConfiguration(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	cmd := exec.Command(bin, "serve", "--read-max-lag", "0s", "--sim-url", "http://127.0.0.1:1")
	cmd.Env = append(os.Environ(), "SALDO_DATABASE_URL=postgres://127.0.0.1:1/x",
		"SALDO_READ_DATABASE_URL=postgres://127.0.0.1:notaport/x")
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	for _, want := range []string{"refusing to start", "--read-max-lag must be positive", "--read-database-url: not a PostgreSQL URL"} {
		require.Contains(t, string(out), want)
	}
	cmd = exec.Command(bin, "serve", "--sim-url", "http://127.0.0.1:1")
	cmd.Env = append(os.Environ(), "SALDO_DATABASE_URL=postgres://127.0.0.1:1/x", "SALDO_READ_MAX_LAG=soon")
	out, err = cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), `SALDO_READ_MAX_LAG="soon" is not a duration`)
}
