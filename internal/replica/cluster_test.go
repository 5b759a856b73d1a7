package replica_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/pgcluster"
	"github.com/saldo/saldo/migrations"
)

// replicated is a throwaway primary, a streaming replica of it and a pool
// on each.
type replicated struct {
	primary, replica *pgcluster.Cluster
	pool, rpool      *pgxpool.Pool
}

// startReplicated starts a primary with settings (migrated when migrate is
// set), a streaming replica of it and a pool on each (the replica's with a
// 2 s connect timeout, for when it is stopped). Everything is closed and
// removed when tb ends, the replica before the primary.
func startReplicated(tb testing.TB, settings []string, migrate bool) replicated {
	tb.Helper()
	ctx := context.Background()
	primary, err := pgcluster.Start(ctx, pgcluster.Options{Settings: settings})
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, primary.Remove()) })
	if migrate {
		_, err = migrations.Up(ctx, primary.URL("postgres"), nil)
		require.NoError(tb, err)
	}
	rep, err := primary.StartReplica(ctx, pgcluster.ReplicaOptions{})
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, rep.Remove()) }) // before the primary's (cleanups run last first)

	pool, err := pgxpool.New(ctx, primary.URL("postgres"))
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	rcfg, err := pgxpool.ParseConfig(rep.URL("postgres"))
	require.NoError(tb, err)
	rcfg.ConnConfig.ConnectTimeout = 2 * time.Second
	rpool, err := pgxpool.NewWithConfig(ctx, rcfg)
	require.NoError(tb, err)
	tb.Cleanup(rpool.Close)
	return replicated{primary: primary, replica: rep, pool: pool, rpool: rpool}
}
