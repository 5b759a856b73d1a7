package ledger_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/pgproxy"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
)

// Issue 13 finding 1: a Poster batch whose commit answer is lost (it
// committed) is posted again transaction by transaction under the same
// idempotency keys, so each Post answers its one committed transaction (a
// replay) and nothing is posted twice. Both write paths: the set-based
// ledger_post_batch call and the pipelined ledger_post batch.
func TestPosterAmbiguousCommitPostsOnce(t *testing.T) {
	t.Parallel()
	for _, path := range []struct{ name, sql string }{
		{"set-based", "ledger_post_batch("},
		{"pipelined", "ledger_lock_accounts("}, // the pipeline's account lock; a refusal sends the batch there
	} {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			ctx, f := setup(t)
			url := testdb.AdminURL(t, f.pool)
			proxy := pgproxy.Start(t, url)
			proxied, err := pgxpool.New(ctx, proxy.URL(url))
			require.NoError(t, err)
			t.Cleanup(proxied.Close)
			a := f.merchant(t, ctx, "a", "100.00")
			b := f.merchant(t, ctx, "b", "")
			p := ledger.NewPoster(proxied, ledger.PosterOptions{Flushers: 1})
			t.Cleanup(p.Close)

			proxy.LoseCommitAnswer(path.sql, 1)
			const n = 6
			txs, errs := make([]ledger.Transaction, n), make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					amount := "10.00"
					if path.name == "pipelined" && i == n-1 {
						amount = "1000.00" // refused: the batch takes the pipelined path
					}
					txs[i], errs[i] = p.Post(ctx, transfer(fmt.Sprintf("amb-%d", i), a.Code, b.Code, amount))
				}()
			}
			wg.Wait()
			require.Equal(t, 1, proxy.Cuts())
			require.Equal(t, int64(1), p.Stats().Fallbacks, "the fallback is counted")
			posted := 0
			for i := range n {
				if errs[i] != nil {
					require.ErrorIs(t, errs[i], ledger.ErrInsufficientFunds, "post %d", i)
					continue
				}
				posted++
				var keys int
				require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM ledger_transactions WHERE idempotency_key = $1`,
					txs[i].IdempotencyKey).Scan(&keys))
				require.Equal(t, 1, keys)
			}
			var total int
			require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM ledger_transactions WHERE idempotency_key LIKE 'amb-%'`).Scan(&total))
			require.Equal(t, posted, total, "every answered transaction posted once, no other")
			var bal string
			require.NoError(t, f.pool.QueryRow(ctx, `SELECT balance::text FROM ledger_accounts WHERE id = $1`, b.ID).Scan(&bal))
			require.True(t, dec(bal).Equal(dec(fmt.Sprint(10*posted))), "b holds %s, want %d", bal, 10*posted)
			rep, err := ledger.Verify(ctx, f.pool)
			require.NoError(t, err)
			require.True(t, rep.OK(), "%v", rep.Violations)
		})
	}
}
