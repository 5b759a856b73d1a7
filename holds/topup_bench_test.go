package holds_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/holds"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
)

// BenchmarkTopUpWithoutOpenDivergence is what a charge record batch's
// credits (8 merchants) add when no divergence is open: holds.TopUp's one
// statement, in a transaction rolled back. Compare ns/op with
// BenchmarkEmptyStatement (the same transaction with SELECT 1 in its
// place): the difference is the statement's own cost.
func BenchmarkTopUpWithoutOpenDivergence(b *testing.B) { benchTopUp(b, false) }

// BenchmarkEmptyStatement: benchTopUp's transaction with SELECT 1.
func BenchmarkEmptyStatement(b *testing.B) { benchTopUp(b, true) }

func benchTopUp(b *testing.B, empty bool) {
	ctx := context.Background()
	pool := testdb.New(b)
	var credits []holds.Credit
	for i := range 8 {
		m := fmt.Sprintf("m%d", i)
		_, err := merchants.Create(ctx, pool, m, m)
		require.NoError(b, err)
		_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: m, Amount: money.MustParse("10.00", "BRL"),
			Key: "k", Reason: "bench", Actor: "bench"})
		require.NoError(b, err)
		credits = append(credits, holds.Credit{Cause: holds.CreditCharge, By: fmt.Sprintf("00000000-0000-0000-0000-00000000000%d", i),
			MerchantID: m, Currency: money.BRL})
	}
	b.ResetTimer()
	for range b.N {
		tx, err := pool.Begin(ctx)
		require.NoError(b, err)
		if empty {
			_, err = tx.Exec(ctx, `SELECT 1`)
		} else {
			var postings ledger.Deferred
			err = holds.TopUp(ctx, tx, nil, credits, &postings)
			if err == nil && postings.Len() != 0 {
				err = fmt.Errorf("nothing to top up, %d postings", postings.Len())
			}
		}
		require.NoError(b, err)
		require.NoError(b, tx.Rollback(ctx))
	}
}
