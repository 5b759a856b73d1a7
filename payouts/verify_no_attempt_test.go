package payouts_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/payouts"
)

// TestVerifyStatusWithoutAttempt (R22, audit: a payout's status follows its
// current attempt): the status check's NOT (...) was NULL, not true, for a
// payout without a current attempt (a.status NULL after the LEFT JOIN), so
// such a payout was never reported, whatever its status, although the
// query selects coalesce(a.status, '<none>') to say so.
func TestVerifyStatusWithoutAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	_, err := merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	now := time.Now()
	for i, st := range []string{"succeeded", "failed"} {
		_, err = pool.Exec(ctx, `INSERT INTO payouts (id, merchant_id, kind, operation, provider, amount, currency,
			destination, status, created_at, updated_at)
			VALUES ($1, 'm1', 'payout', 'bank_payout', 'sim', 10, 'BRL', '{}', $2, $3, $3)`,
			fmt.Sprintf("po_%032x", i+1), st, now)
		require.NoError(t, err)
	}
	vs, err := payouts.Verify(ctx, pool)
	require.NoError(t, err)
	status := 0
	for _, v := range vs {
		if v.Check == "status" {
			status++
		}
	}
	require.Equal(t, 2, status, "payouts without any attempt, one 'succeeded': %v", vs)
}
