package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/providers"
)

// R4, R8, R16: `saldo bench payouts` takes SALDO_DATABASE_URL (serve's own
// variable) or --database-url, and then runs an engine with River workers
// under the provider name "sim" at a sim of its own, in process, without
// the identity check. On a database where "sim" is recorded for the
// fleet's sim, its workers share the fleet's River queue: they execute and
// look up the fleet's "sim" attempts at the bench's sim ("not found":
// failed, reserve freed, the retry pays again), and the fleet's resolvers
// look up the bench's at the recorded sim. It refuses a database that holds
// attempts or a recorded identity. Before, it ran (found by review).
func TestBenchPayoutsRefusesADatabaseInUse_R16(t *testing.T) {
	u := testdb.NewURL(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, u)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	fleetSim := startSim(t)
	require.NoError(t, checkAs(t, pool, time.Second, []providers.Provider{fleetSim.NewProvider()}))
	recorded := identityOf(t, pool, "sim").Account

	var benchErr error
	captureStdout(t, func() {
		benchErr = runBenchPayouts(ctx, []string{"--database-url", u, "--duration", "500ms", "--rounds", "1",
			"--merchants", "1", "--workers", "1", "--warmup", "0s", "--ledger=false", "--baseline=false"})
	})
	var others int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM attempts WHERE provider = 'sim'`).Scan(&others))
	require.Error(t, benchErr, "saldo bench payouts ran %d attempt(s) under \"sim\" at its own sim, while \"sim\" is "+
		"recorded as %q", others, recorded)
}
