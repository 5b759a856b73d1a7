package ledger_test

// ledger.Verify against account rows rewritten as the table owner with the
// identity trigger disabled (ALTER TABLE ledger_accounts DISABLE TRIGGER
// ledger_accounts_identity_fixed), the kind of change the ledger's tamper
// evidence exists to reveal.

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
)

// execAsOwnerIdentityUnlocked runs stmts as the table owner with
// ledger_accounts_identity_fixed disabled.
func execAsOwnerIdentityUnlocked(t *testing.T, ctx context.Context, f fixture, stmts ...string) {
	t.Helper()
	admin, err := pgx.Connect(ctx, testdb.AdminURL(t, f.pool))
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `ALTER TABLE ledger_accounts DISABLE TRIGGER ledger_accounts_identity_fixed`)
	require.NoError(t, err)
	for _, s := range stmts {
		_, err = admin.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	_, err = admin.Exec(ctx, `ALTER TABLE ledger_accounts ENABLE TRIGGER ledger_accounts_identity_fixed`)
	require.NoError(t, err)
}

// A merchant's balance never goes negative (ledger.MerchantAvailable):
// ledger.Verify refuses the allow_negative flag on any merchant account and
// counts a negative merchant balance whatever the flag says. Turning the
// flag on for m1's available account and overdrawing it to -50.00 is
// reported. Before, the forbidden-negative check read the flag from the
// same row, so the overdraft passed as allowed (found by review).
func TestVerifyReportsAMerchantAccountMarkedAllowNegative(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	acc := f.merchant(t, ctx, "m1", "10.00")
	requireClean(t, ctx, f.pool)

	execAsOwnerIdentityUnlocked(t, ctx, f, `UPDATE ledger_accounts SET allow_negative = true WHERE code = '`+acc.Code+`'`)
	_, err := ledger.Post(ctx, f.pool, transfer("overdraw", acc.Code, f.funding.Code, "60.00"))
	require.NoError(t, err)
	require.Equal(t, "-50.00", balance(t, ctx, f.pool, acc.Code))

	rep, err := ledger.Verify(ctx, f.pool)
	require.NoError(t, err)
	require.False(t, rep.OK(), "ledger.Verify reports merchant m1's available balance at -50.00 (allow_negative set on a merchant account)")
}
