package ledger_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// R22, R23: a part of a Deferred built from balances (AddLocked, what a
// divergence's hold uses) reads each account's balance under its row
// lock, as the transactions deferred before it leave it, and is posted
// with them in one PostMany: a hold capped at what is available takes the
// credit a batch just added, and never more.
func TestDeferredLockedPartSeesEarlierParts_R22_R23(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	av := f.merchant(t, ctx, "m1", "50.00")
	held, err := ledger.EnsureAccount(ctx, f.pool, ledger.MerchantHeld("m1", money.BRL))
	require.NoError(t, err)
	var seen decimal.Decimal
	require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		var d ledger.Deferred
		d.Add([]ledger.TransactionInput{transfer("credit", f.funding.Code, av.Code, "20.00")}, nil, nil)
		d.AddLocked([]int64{av.ID, held.ID}, func(b map[int64]decimal.Decimal, _ []ledger.TransactionInput) ([]ledger.TransactionInput, error) {
			seen = b[av.ID]
			take := decimal.Min(seen, dec("100.00"))
			return []ledger.TransactionInput{transfer("hold", av.Code, held.Code, take.StringFixed(2))}, nil
		}, nil, nil)
		d.AddLocked([]int64{av.ID}, func(b map[int64]decimal.Decimal, _ []ledger.TransactionInput) ([]ledger.TransactionInput, error) {
			require.True(t, b[av.ID].IsZero(), "a later part sees the hold: %s", b[av.ID])
			return nil, nil // nothing to post
		}, nil, nil)
		return d.Post(ctx, tx)
	}))
	require.Equal(t, "70", seen.String(), "the balance after the credit deferred before it")
	require.Equal(t, "0.00", balance(t, ctx, f.pool, av.Code))
	require.Equal(t, "70.00", balance(t, ctx, f.pool, held.Code))
	requireClean(t, ctx, f.pool)
}
