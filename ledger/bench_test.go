package ledger_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// benchSetup returns a pool with room for parallel workers and the ids of n
// funded merchant accounts.
func benchSetup(b *testing.B, n int) (context.Context, *pgxpool.Pool, []int64) {
	b.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testdb.NewURL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	funding, err := ledger.EnsureAccount(ctx, pool, ledger.PlatformFunding(money.BRL))
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]int64, n)
	for i := range ids {
		acc, err := ledger.EnsureAccount(ctx, pool, ledger.MerchantAvailable(fmt.Sprintf("bench_%d", i), money.BRL))
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = acc.ID
		if _, err := ledger.Post(ctx, pool, ledger.TransactionInput{
			IdempotencyKey: fmt.Sprintf("fund-%d", i), CauseKind: "bench", CauseID: "fund",
			Postings: []ledger.PostingInput{
				{AccountID: funding.ID, Amount: decimal.NewFromInt(-1_000_000), Currency: money.BRL},
				{AccountID: acc.ID, Amount: decimal.NewFromInt(1_000_000), Currency: money.BRL},
			},
		}); err != nil {
			b.Fatal(err)
		}
	}
	return ctx, pool, ids
}

var benchKey atomic.Int64

func benchTransfer(from, to int64) ledger.TransactionInput {
	return ledger.TransactionInput{
		IdempotencyKey: fmt.Sprintf("b-%d", benchKey.Add(1)), CauseKind: "bench", CauseID: "bench",
		Postings: []ledger.PostingInput{
			{AccountID: from, Amount: decimal.New(-125, -2), Currency: money.BRL},
			{AccountID: to, Amount: decimal.New(125, -2), Currency: money.BRL},
		},
	}
}

// BenchmarkPost: one transfer per iteration, each its own commit.
func BenchmarkPost(b *testing.B) {
	ctx, pool, ids := benchSetup(b, 50)
	i := 0
	for b.Loop() {
		if _, err := ledger.Post(ctx, pool, benchTransfer(ids[i%50], ids[(i+7)%50])); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkPostParallel: transfers between random pairs of 50 accounts from
// GOMAXPROCS*4 goroutines (set -cpu to change), the shape of `saldo bench
// ledger`.
func BenchmarkPostParallel(b *testing.B) {
	ctx, pool, ids := benchSetup(b, 50)
	b.ResetTimer()
	benchParallel(b, viaPost(ctx, pool), randomPair(ids))
}

// BenchmarkPosterParallel: BenchmarkPostParallel through a ledger.Poster
// (group commit); compare the two ns/op in one run.
func BenchmarkPosterParallel(b *testing.B) {
	ctx, pool, ids := benchSetup(b, 50)
	p := ledger.NewPoster(pool, ledger.PosterOptions{})
	b.Cleanup(p.Close)
	b.ResetTimer()
	benchParallel(b, viaPoster(ctx, p), randomPair(ids))
	st := p.Stats()
	if st.Batches > 0 {
		b.ReportMetric(float64(st.Transactions)/float64(st.Batches), "transfers/commit")
		b.ReportMetric(float64(st.SetBased)/float64(st.Batches), "setbased/batch")
	}
}

// benchParallel runs post from GOMAXPROCS*4 goroutines on the pairs pick
// chooses (from the goroutine's random source).
func benchParallel(b *testing.B, post func(from, to int64) error, pick func(*rand.Rand) (from, to int64)) {
	b.SetParallelism(4)
	var worker atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(uint64(worker.Add(1)), 7))
		for pb.Next() {
			if err := post(pick(rng)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func viaPost(ctx context.Context, pool *pgxpool.Pool) func(from, to int64) error {
	return func(from, to int64) error {
		_, err := ledger.Post(ctx, pool, benchTransfer(from, to))
		return err
	}
}

func viaPoster(ctx context.Context, p *ledger.Poster) func(from, to int64) error {
	return func(from, to int64) error {
		_, err := p.Post(ctx, benchTransfer(from, to))
		return err
	}
}

// randomPair picks two different accounts at random.
func randomPair(ids []int64) func(*rand.Rand) (int64, int64) {
	return func(rng *rand.Rand) (int64, int64) {
		f := rng.IntN(len(ids))
		t := (f + 1 + rng.IntN(len(ids)-1)) % len(ids)
		return ids[f], ids[t]
	}
}

// hotPair debits ids[0] every time.
func hotPair(ids []int64) func(*rand.Rand) (int64, int64) {
	return func(rng *rand.Rand) (int64, int64) { return ids[0], ids[1+rng.IntN(len(ids)-1)] }
}

// BenchmarkPostHot: every transfer debits the same account.
func BenchmarkPostHot(b *testing.B) {
	ctx, pool, ids := benchSetup(b, 50)
	b.ResetTimer()
	benchParallel(b, viaPost(ctx, pool), hotPair(ids))
}

// BenchmarkPosterHot: BenchmarkPostHot through a ledger.Poster, which takes
// the hot account's lock once per batch.
func BenchmarkPosterHot(b *testing.B) {
	ctx, pool, ids := benchSetup(b, 50)
	p := ledger.NewPoster(pool, ledger.PosterOptions{})
	b.Cleanup(p.Close)
	b.ResetTimer()
	benchParallel(b, viaPoster(ctx, p), hotPair(ids))
}
