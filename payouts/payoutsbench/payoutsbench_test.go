package payoutsbench_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/payouts/payoutsbench"
)

// The benchmark's own mechanics, briefly, with faults: every created payout
// becomes final, nobody is paid twice, the audit is clean. (Throughput
// targets are for `saldo bench payouts`, not for tests.)
func TestRunWithFaults(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	res, err := payoutsbench.Run(context.Background(), pool, payoutsbench.Options{
		Merchants: 5, Workers: 2, Duration: 1500 * time.Millisecond, RiverWorkers: 8,
		Faults: "hang_after=0.05,error_after=0.05,rate_limit=0.05,unavailable=0.05",
	})
	require.NoError(t, err)
	t.Log(res)
	require.Positive(t, res.Created)
	require.Empty(t, res.Duplicates)
	require.True(t, res.Audit.OK(), res.Audit.Summary())
}
