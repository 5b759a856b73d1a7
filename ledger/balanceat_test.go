package ledger_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// BalanceAt's binary search answers what a
// scan of the history answers, at every kind of instant: before the first
// posting, on a posting's instant (many postings share one: a batch), just
// before and after it, inside quiet gaps and bursts, after the last.
func TestBalanceAtMatchesAScanOfTheHistory(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "interp", "")
	rng := rand.New(rand.NewPCG(3, 4))
	for batch := range 40 {
		var ins []ledger.TransactionInput
		for i := range 1 + rng.IntN(60) {
			ins = append(ins, ledger.TransactionInput{IdempotencyKey: fmt.Sprintf("ba-%d-%d", batch, i), CauseKind: "test", CauseID: "x",
				Postings: []ledger.PostingInput{
					{AccountID: f.funding.ID, Amount: decimal.New(-int64(1+rng.IntN(500)), -2), Currency: money.BRL},
					{AccountID: a.ID, Amount: decimal.Zero, Currency: money.BRL},
				}})
			ins[len(ins)-1].Postings[1].Amount = ins[len(ins)-1].Postings[0].Amount.Neg()
		}
		require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error { _, err := ledger.PostMany(ctx, tx, ins); return err }))
		if rng.IntN(4) == 0 {
			time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond) // an uneven pace
		}
	}
	type posting struct {
		at    time.Time
		after string
	}
	var hist []posting
	rows, err := f.pool.Query(ctx, `SELECT posted_at, balance_after::text FROM ledger_postings WHERE account_id = $1 ORDER BY seq`, a.ID)
	require.NoError(t, err)
	for rows.Next() {
		var p posting
		require.NoError(t, rows.Scan(&p.at, &p.after))
		hist = append(hist, p)
	}
	require.NoError(t, rows.Err())
	want := func(at time.Time) string {
		b := "0.00"
		for _, p := range hist {
			if p.at.After(at) {
				break
			}
			b = money.MustParse(p.after, "BRL").Format()
		}
		return b
	}
	instants := []time.Time{hist[0].at.Add(-time.Hour), hist[len(hist)-1].at.Add(time.Hour)}
	for _, p := range hist {
		instants = append(instants, p.at, p.at.Add(-time.Microsecond), p.at.Add(time.Microsecond))
	}
	span := hist[len(hist)-1].at.Sub(hist[0].at)
	for range 200 {
		instants = append(instants, hist[0].at.Add(time.Duration(rng.Int64N(int64(span)+1))))
	}
	for _, at := range instants {
		got, err := ledger.BalanceAt(ctx, f.pool, a.Code, at)
		require.NoError(t, err)
		require.Equal(t, want(at), got.Format(), "at %s", at.Format(time.RFC3339Nano))
	}
}
