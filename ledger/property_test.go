package ledger_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// TestPropertyTransfers runs random sequences of transfers, replays,
// conflicting replays and reversals against the database and against a
// model in Go (balances in cents), and checks after every step that they
// agree: balances, refusals for insufficient funds (R23), idempotent
// replays. At the end of each sequence Verify must be clean.
func TestPropertyTransfers(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	var iteration atomic.Int64

	rapid.Check(t, func(rt *rapid.T) {
		it := iteration.Add(1)
		// Fresh accounts per iteration: three merchants that forbid
		// negatives and one provider clearing account that allows them.
		codes := make([]string, 4)
		for i := range 3 {
			acc, err := ledger.EnsureAccount(ctx, f.pool, ledger.MerchantAvailable(fmt.Sprintf("p%d_%d", it, i), money.BRL))
			require.NoError(rt, err)
			codes[i] = acc.Code
		}
		ext, err := ledger.EnsureAccount(ctx, f.pool, ledger.ProviderClearing(fmt.Sprintf("p%d", it), money.BRL))
		require.NoError(rt, err)
		codes[3] = ext.Code
		allowNegative := []bool{false, false, false, true}

		model := make([]int64, 4) // cents
		type posted struct {
			key      string
			from, to int
			cents    int64
			id       int64
			reversed bool
		}
		var history []posted
		n := 0

		apply := func(from, to int, cents int64) bool {
			if !allowNegative[from] && model[from] < cents {
				return false
			}
			model[from] -= cents
			model[to] += cents
			return true
		}
		amount := func(cents int64) string { return decimal.New(cents, -2).StringFixed(2) }

		rt.Repeat(map[string]func(*rapid.T){
			"transfer": func(rt *rapid.T) {
				from := rapid.IntRange(0, 3).Draw(rt, "from")
				to := rapid.IntRange(0, 3).Draw(rt, "to")
				if from == to {
					rt.Skip("same account")
				}
				cents := rapid.Int64Range(1, 5000).Draw(rt, "cents")
				n++
				key := fmt.Sprintf("p%d-%d", it, n)
				tx, err := ledger.Post(ctx, f.pool, transfer(key, codes[from], codes[to], amount(cents)))
				if apply(from, to, cents) {
					require.NoError(rt, err)
					history = append(history, posted{key, from, to, cents, tx.ID, false})
				} else {
					require.ErrorIs(rt, err, ledger.ErrInsufficientFunds)
					var ie *ledger.InsufficientFundsError
					require.ErrorAs(rt, err, &ie)
					require.Equal(rt, codes[from], ie.AccountCode)
				}
			},
			"replay": func(rt *rapid.T) {
				if len(history) == 0 {
					rt.Skip("nothing posted yet")
				}
				h := rapid.SampledFrom(history).Draw(rt, "posted")
				tx, err := ledger.Post(ctx, f.pool, transfer(h.key, codes[h.from], codes[h.to], amount(h.cents)))
				require.NoError(rt, err)
				require.True(rt, tx.Replayed)
				require.Equal(rt, h.id, tx.ID)
			},
			"conflicting replay": func(rt *rapid.T) {
				if len(history) == 0 {
					rt.Skip("nothing posted yet")
				}
				h := rapid.SampledFrom(history).Draw(rt, "posted")
				_, err := ledger.Post(ctx, f.pool, transfer(h.key, codes[h.from], codes[h.to], amount(h.cents+1)))
				require.ErrorIs(rt, err, ledger.ErrIdempotencyConflict)
			},
			"reverse": func(rt *rapid.T) {
				if len(history) == 0 {
					rt.Skip("nothing posted yet")
				}
				i := rapid.IntRange(0, len(history)-1).Draw(rt, "index")
				h := history[i]
				_, err := ledger.Reverse(ctx, f.pool, h.id, h.key+"-rev", "property test")
				switch {
				case h.reversed:
					require.NoError(rt, err) // same key: the existing reversal
				case apply(h.to, h.from, h.cents):
					require.NoError(rt, err)
					history[i].reversed = true
				default:
					require.ErrorIs(rt, err, ledger.ErrInsufficientFunds)
				}
			},
			"": func(rt *rapid.T) {
				for i, c := range codes {
					b, err := ledger.Balance(ctx, f.pool, c)
					require.NoError(rt, err)
					require.Equal(rt, amount(model[i]), b.Format(), c)
				}
			},
		})
		var sum int64
		for _, c := range model {
			sum += c
		}
		require.Zero(rt, sum)
		rep, err := ledger.Verify(ctx, f.pool)
		require.NoError(rt, err)
		require.True(rt, rep.OK(), "%v", rep.Violations)
	})
	requireClean(t, ctx, f.pool)
}
