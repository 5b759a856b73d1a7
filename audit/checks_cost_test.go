package audit

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// Review (R21, R22; docs/architecture.md): the reversal checks' cost "follows
// the number of reversals, not the ledger's size", refunds/charge_match's
// "is bounded by the refunds". On an analyzed ledger of 60 000 transactions
// with 50 reversals and no refunds, none of the plans may read
// ledger_postings or ledger_transactions whole.
func TestReversalAndRefundChecksDoNotScanTheLedger_R22(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	var accs []ledger.Account
	for i := range 20 {
		a, err := ledger.EnsureAccount(ctx, pool, ledger.AccountSpec{OwnerKind: "platform", OwnerID: fmt.Sprintf("p%d", i),
			Purpose: "suspense", Currency: money.BRL, AllowNegative: true})
		require.NoError(t, err)
		accs = append(accs, a)
	}
	var firsts []int64
	for b := range 60 {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		var ins []ledger.TransactionInput
		for i := range 1000 {
			from, to := accs[(b+i)%20], accs[(b+i+1+i%7)%20]
			if from.ID == to.ID {
				to = accs[(b+i+3)%20]
			}
			k := fmt.Sprintf("b%d-%d", b, i)
			ins = append(ins, ledger.TransactionInput{IdempotencyKey: k, CauseKind: "test", CauseID: k,
				Postings: []ledger.PostingInput{
					{AccountID: from.ID, Amount: decimal.RequireFromString("-1.00"), Currency: money.BRL},
					{AccountID: to.ID, Amount: decimal.RequireFromString("1.00"), Currency: money.BRL},
				}})
		}
		out, err := ledger.PostMany(ctx, tx, ins)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		firsts = append(firsts, out[0].ID)
	}
	for i, id := range firsts[:50] {
		_, err := ledger.Reverse(ctx, pool, id, fmt.Sprintf("rev-%d", i), "test")
		require.NoError(t, err)
	}
	admin, err := pgx.Connect(ctx, testdb.AdminURL(t, pool))
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `ANALYZE`)
	require.NoError(t, err)

	for _, c := range []sqlCheck{{"reversal_mirror", reversalMirrorSQL}, {"reversal_link", reversalLinkSQL},
		{"reversed_twice", reversedTwiceSQL}, {"charge_match", refundChargeMatchSQL}} {
		rows, err := pool.Query(ctx, "EXPLAIN "+c.sql, maxListed)
		require.NoError(t, err)
		var plan []string
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan = append(plan, line)
		}
		require.NoError(t, rows.Err())
		p := strings.Join(plan, "\n")
		for _, table := range []string{"ledger_postings", "ledger_transactions"} {
			require.NotContains(t, p, "Seq Scan on "+table, "%s reads %s whole:\n%s", c.name, table, p)
		}
	}
}
