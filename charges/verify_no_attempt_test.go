package charges_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
)

// TestVerifyStatusWithoutAttempt (audit: a charge's status follows its
// attempt): as payouts' status check, a charge without an attempt made
// NOT (...) NULL and was never reported.
func TestVerifyStatusWithoutAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	_, err := merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO charges (id, merchant_id, kind, provider, amount, currency, fee_percent,
		fee_fixed, fee, merchant_net, status, created_at, updated_at)
		VALUES ('ch_00000000000000000000000000000001', 'm1', 'card', 'sim', 10, 'BRL', 0, 0, 0, 10, 'failed', $1, $1)`,
		time.Now())
	require.NoError(t, err)
	vs, err := charges.Verify(ctx, pool)
	require.NoError(t, err)
	require.NotEmpty(t, vs, "a failed charge that never had an attempt")
	status := 0
	for _, v := range vs {
		if v.Check == "status" {
			status++
		}
	}
	require.Equal(t, 1, status, "a failed charge that never had an attempt: %v", vs)
}
