package ledger_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/ledger"
)

// TestPosterConcurrentTransfers: the TestConcurrentTransfers workload
// through two Posters (two processes' worth of group commit) racing plain
// Posts on the same accounts: no deadlock, no negative balance, every
// transfer answered once (posted or refused), totals conserved, Verify
// clean (R22, R23).
func TestPosterConcurrentTransfers(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	const accounts, workers, perWorker = 5, 32, 30
	codes := make([]string, accounts)
	for i := range codes {
		codes[i] = f.merchant(t, ctx, fmt.Sprintf("p%d", i), "20.00").Code
	}
	posters := []*ledger.Poster{
		ledger.NewPoster(f.pool, ledger.PosterOptions{MaxBatch: 16, Flushers: 1}),
		ledger.NewPoster(f.pool, ledger.PosterOptions{MaxBatch: 8, Flushers: 3}),
	}
	var (
		wg              sync.WaitGroup
		mu              sync.Mutex
		posted, refused int
		ids             = map[int64]bool{}
		unexpected      []error
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				from := (w + i) % accounts
				to := (from + 1 + (w*7+i*3)%(accounts-1)) % accounts
				amount := fmt.Sprintf("%d.%02d", (w+i)%9, (w*13+i)%100+1)
				in := transfer(fmt.Sprintf("w%d-%d", w, i), codes[from], codes[to], amount)
				var tx ledger.Transaction
				var err error
				if w%4 == 3 {
					tx, err = ledger.Post(ctx, f.pool, in)
				} else {
					tx, err = posters[w%2].Post(ctx, in)
				}
				mu.Lock()
				switch {
				case err == nil:
					posted++
					require.False(t, ids[tx.ID], "transaction %d answered twice", tx.ID)
					ids[tx.ID] = true
					require.Len(t, tx.Postings, 2)
				case errors.Is(err, ledger.ErrInsufficientFunds):
					refused++
				default:
					unexpected = append(unexpected, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, p := range posters {
		p.Close()
	}
	require.Empty(t, unexpected)
	require.Equal(t, workers*perWorker, posted+refused)
	require.Positive(t, refused, "the workload should exhaust some balances")

	var n int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM ledger_transactions WHERE cause_kind = 'test' AND idempotency_key LIKE 'w%'`).Scan(&n))
	require.Equal(t, posted, n)
	total := dec("0")
	for _, c := range codes {
		b, err := ledger.Balance(ctx, f.pool, c)
		require.NoError(t, err)
		require.False(t, b.IsNegative())
		total = total.Add(b.Decimal())
	}
	require.Equal(t, "100", total.String())
	requireClean(t, ctx, f.pool)

	_, err := posters[0].Post(ctx, transfer("late", codes[0], codes[1], "0.01"))
	require.ErrorIs(t, err, ledger.ErrPosterClosed)
}

// TestPosterIdempotencyRace: 8 goroutines post the same key through a
// Poster at once (some land in the same batch): exactly one transaction
// exists and every caller gets it.
func TestPosterIdempotencyRace(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "10.00")
	b := f.merchant(t, ctx, "b", "")
	p := ledger.NewPoster(f.pool, ledger.PosterOptions{})
	defer p.Close()
	ids := make([]int64, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tx, err := p.Post(ctx, transfer("same", a.Code, b.Code, "3.00"))
			require.NoError(t, err)
			ids[i] = tx.ID
		}()
	}
	wg.Wait()
	for i := range ids {
		require.Equal(t, ids[0], ids[i])
	}
	require.Equal(t, "7.00", balance(t, ctx, f.pool, a.Code))
	_, err := p.Post(ctx, transfer("same", a.Code, b.Code, "4.00"))
	require.ErrorIs(t, err, ledger.ErrIdempotencyConflict)
	requireClean(t, ctx, f.pool)
}

// TestPosterCloseWhilePosting: Posts racing Close each get an answer (a
// transaction or ErrPosterClosed); none is left waiting, and every
// answered transaction is committed.
func TestPosterCloseWhilePosting(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "1000.00")
	b := f.merchant(t, ctx, "b", "")
	for round := range 5 {
		p := ledger.NewPoster(f.pool, ledger.PosterOptions{MaxBatch: 4, Flushers: 2})
		var wg sync.WaitGroup
		var mu sync.Mutex
		posted := 0
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := p.Post(ctx, transfer(fmt.Sprintf("c%d-%d", round, i), a.Code, b.Code, "0.01"))
				if err == nil {
					mu.Lock()
					posted++
					mu.Unlock()
					return
				}
				require.ErrorIs(t, err, ledger.ErrPosterClosed)
			}()
		}
		p.Close()
		wg.Wait()
		var n int
		require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM ledger_transactions WHERE idempotency_key LIKE $1`,
			fmt.Sprintf("c%d-%%", round)).Scan(&n))
		require.Equal(t, posted, n)
	}
	requireClean(t, ctx, f.pool)
}

// TestPosterKeyRaceAcrossAccounts: the same idempotency key sent at once
// for transfers between different accounts, through two Posters (two
// processes) and a plain Post. The batches hold no account in common, so
// nothing serialises them before they insert the key: the database's own
// constraint decides (migration 00018: an exclusion constraint over a hash
// index, which can refuse a racing batch with a deadlock where a UNIQUE
// B-tree made it wait). Exactly one transfer per key is posted; every other
// caller is told the key is taken by other postings, none gets another
// error, and the ledger is clean.
func TestPosterKeyRaceAcrossAccounts(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	const racers = 6
	codes := make([]string, 2*racers)
	for i := range codes {
		codes[i] = f.merchant(t, ctx, fmt.Sprintf("k%d", i), "100.00").Code
	}
	posters := []*ledger.Poster{
		ledger.NewPoster(f.pool, ledger.PosterOptions{Flushers: 2}),
		ledger.NewPoster(f.pool, ledger.PosterOptions{Flushers: 2}),
	}
	defer func() {
		for _, p := range posters {
			p.Close()
		}
	}()
	for round := range 10 {
		key := fmt.Sprintf("shared-%d", round)
		txs := make([]ledger.Transaction, racers)
		errs := make([]error, racers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for r := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				in := transfer(key, codes[2*r], codes[2*r+1], "1.00")
				if r == racers-1 {
					txs[r], errs[r] = ledger.Post(ctx, f.pool, in)
					return
				}
				txs[r], errs[r] = posters[r%2].Post(ctx, in)
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for r := range racers {
			if errs[r] == nil {
				won++
				require.Equal(t, key, txs[r].IdempotencyKey)
				continue
			}
			require.ErrorIs(t, errs[r], ledger.ErrIdempotencyConflict, "round %d racer %d", round, r)
		}
		require.Equal(t, 1, won, "round %d: exactly one transfer posted under the key", round)
	}
	for i, p := range posters {
		t.Logf("poster %d: %+v", i, p.Stats())
	}
	requireClean(t, ctx, f.pool)
}
