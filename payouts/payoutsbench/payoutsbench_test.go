package payoutsbench_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger/ledgerbench"
	"github.com/saldo/saldo/payouts/payoutsbench"
)

// The benchmark's own mechanics, briefly, with faults: every created payout
// becomes final, nobody is paid twice, the audit is clean. (Throughput
// targets are for `saldo bench payouts`, not for tests.)
func TestRunWithFaults(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(testdb.NewURL(t))
	require.NoError(t, err)
	stmts := &ledgerbench.StatementCounter{}
	cfg.ConnConfig.Tracer = stmts
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	res, err := payoutsbench.Run(context.Background(), pool, payoutsbench.Options{
		Merchants: 5, Workers: 2, Duration: 1500 * time.Millisecond, RiverWorkers: 8,
		Faults: "hang_after=0.05,error_after=0.05,rate_limit=0.05,unavailable=0.05", Statements: stmts.Load,
	})
	require.NoError(t, err)
	t.Log(res)
	require.Positive(t, res.Created)
	// A payout is opened, called, recorded and settled in a handful of
	// batched statements; each of its River jobs is fetched and completed.
	require.Greater(t, res.Statements, 0.1)
	require.Less(t, res.Statements, 20.0)
	require.Empty(t, res.Duplicates)
	require.True(t, res.Audit.OK(), res.Audit.Summary())
}
