package ledger

import (
	"context"
	"errors"
	"github.com/jackc/pgx/v5"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/money"
)

func posterTransfer(key, from, to, amount string) TransactionInput {
	a := decimal.RequireFromString(amount)
	return TransactionInput{
		IdempotencyKey: key, CauseKind: "test", CauseID: key,
		Postings: []PostingInput{
			{AccountCode: from, Amount: a.Neg(), Currency: money.BRL},
			{AccountCode: to, Amount: a, Currency: money.BRL},
		},
	}
}

// posterFixture makes merchant accounts named names, funds the first with
// fund from the platform's funding account, and starts a one-flusher
// Poster, closed when the test ends.
func posterFixture(t *testing.T, fund string, names ...string) (context.Context, *pgxpool.Pool, []Account, *Poster) {
	t.Helper()
	ctx := context.Background()
	pool := testdb.New(t)
	funding, err := EnsureAccount(ctx, pool, PlatformFunding(money.BRL))
	require.NoError(t, err)
	accs := make([]Account, len(names))
	for i, n := range names {
		accs[i], err = EnsureAccount(ctx, pool, MerchantAvailable(n, money.BRL))
		require.NoError(t, err)
	}
	_, err = Post(ctx, pool, posterTransfer("fund", funding.Code, accs[0].Code, fund))
	require.NoError(t, err)
	p := NewPoster(pool, PosterOptions{Flushers: 1})
	t.Cleanup(p.Close)
	return ctx, pool, accs, p
}

// flushOne runs the given inputs as ONE batch and returns each answer.
func flushOne(ctx context.Context, p *Poster, ins ...TransactionInput) []posterResult {
	batch := make([]*posterRequest, len(ins))
	for i, in := range ins {
		batch[i] = &posterRequest{ctx: ctx, in: in, start: time.Now(), done: make(chan posterResult, 1)}
	}
	p.flush(batch)
	out := make([]posterResult, len(ins))
	for i, r := range batch {
		out[i] = <-r.done
	}
	return out
}

// TestPosterBatchSemantics: inside one batch, transactions apply in order,
// a refusal writes nothing and does not disturb the others, and a key
// repeated in the batch is a replay of its first occurrence. A batch whose
// COMMIT fails is written again transaction by transaction, so only the
// transaction at fault fails.
func TestPosterBatchSemantics(t *testing.T) {
	t.Parallel()
	ctx, pool, accs, p := posterFixture(t, "10", "a", "b")
	a, b := accs[0], accs[1]

	res := flushOne(ctx, p,
		posterTransfer("t1", a.Code, b.Code, "8"), // a 2
		posterTransfer("t2", a.Code, b.Code, "5"), // refused
		posterTransfer("t3", b.Code, a.Code, "3"), // a 5
		posterTransfer("t4", a.Code, b.Code, "4"), // a 1
		posterTransfer("t1", a.Code, b.Code, "8"), // replay of t1
		posterTransfer("t1", a.Code, b.Code, "9"), // conflict with t1
		posterTransfer("t5", a.Code, "merchant/nobody/available/BRL", "1"),
	)
	require.NoError(t, res[0].err)
	require.Equal(t, "2", res[0].tx.Postings[0].BalanceAfter.String())
	require.ErrorIs(t, res[1].err, ErrInsufficientFunds)
	require.NoError(t, res[2].err)
	require.NoError(t, res[3].err)
	require.Equal(t, "1", res[3].tx.Postings[0].BalanceAfter.String())
	require.NoError(t, res[4].err)
	require.True(t, res[4].tx.Replayed)
	require.Equal(t, res[0].tx.ID, res[4].tx.ID)
	require.ErrorIs(t, res[5].err, ErrIdempotencyConflict)
	require.ErrorIs(t, res[6].err, ErrAccountNotFound)
	bal, err := Balance(ctx, pool, a.Code)
	require.NoError(t, err)
	require.Equal(t, "1", bal.Decimal().String())

	// A deferred check that fails at COMMIT for one key: the batch rolls
	// back as a whole, then each transaction is posted on its own.
	// The trigger is the tables' owner's to add, not the application's.
	owner, err := pgx.Connect(ctx, testdb.OwnerURL(t, pool))
	require.NoError(t, err)
	defer owner.Close(ctx)
	_, err = owner.Exec(ctx, `
		CREATE FUNCTION test_refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.idempotency_key = 'boom' THEN RAISE EXCEPTION 'boom refused at commit'; END IF;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER test_refuse_boom AFTER INSERT ON ledger_transactions
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_refuse_boom();`)
	require.NoError(t, err)
	res = flushOne(ctx, p,
		posterTransfer("u1", b.Code, a.Code, "1"),
		posterTransfer("boom", b.Code, a.Code, "1"),
		posterTransfer("u2", b.Code, a.Code, "1"),
	)
	require.NoError(t, res[0].err)
	require.ErrorContains(t, res[1].err, "boom refused at commit")
	require.NoError(t, res[2].err)
	bal, err = Balance(ctx, pool, a.Code)
	require.NoError(t, err)
	require.Equal(t, "3", bal.Decimal().String())
	var boom int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ledger_transactions WHERE idempotency_key = 'boom'`).Scan(&boom))
	require.Zero(t, boom)

	// A caller whose context is already done is answered without a write.
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = p.Post(done, posterTransfer("late", b.Code, a.Code, "1"))
	require.True(t, errors.Is(err, context.Canceled))

	rep, err := Verify(ctx, pool)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Violations)
}

// TestPosterTakeLeavesHeldAccounts: a flusher's batch never names an
// account a batch in flight writes, so two batches in flight never wait for
// each other's row locks; a request left for later also holds back every
// later request sharing one of its accounts (an account's transfers are
// written in arrival order), and it is taken first once its account is
// released. Requests inside one batch may share accounts. (issue 19)
func TestPosterTakeLeavesHeldAccounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := &Poster{maxBatch: 3, held: make(map[accountRef]int)}
	req := func(key, from, to string) *posterRequest {
		return newPosterRequest(ctx, posterTransfer(key, from, to, "1"))
	}
	keys := func(batch []*posterRequest) []string {
		var out []string
		for _, r := range batch {
			out = append(out, r.in.IdempotencyKey)
		}
		return out
	}
	p.pending = []*posterRequest{req("ab", "a", "b"), req("ba", "b", "a"), req("cd", "c", "d")}
	first := p.take()
	require.Equal(t, []string{"ab", "ba", "cd"}, keys(first), "one batch may name an account twice")
	require.Equal(t, 2, p.held[accountRef{code: "a"}])

	p.pending = []*posterRequest{
		req("ae", "a", "e"), // a is in flight: left
		req("ef", "e", "f"), // e belongs to a request left before it: left
		req("gh", "g", "h"),
		req("ij", "i", "j"),
		req("kl", "k", "l"), // beyond MaxBatch
	}
	second := p.take()
	require.Equal(t, []string{"gh", "ij", "kl"}, keys(second))
	require.Equal(t, []string{"ae", "ef"}, keys(p.pending))
	require.Nil(t, p.take(), "nothing takeable while the first batch is in flight")

	p.release(first)
	require.Zero(t, p.held[accountRef{code: "a"}])
	third := p.take()
	require.Equal(t, []string{"ae", "ef"}, keys(third))
	require.Empty(t, p.pending)

	p.release(second)
	p.release(third)
	require.Empty(t, p.held, "every account released")

	// An account named by id and by code in one request is one reference
	// each way, each once.
	r := newPosterRequest(ctx, TransactionInput{IdempotencyKey: "x", CauseKind: "test", CauseID: "x",
		Postings: []PostingInput{
			{AccountID: 7, Amount: decimal.NewFromInt(-1), Currency: money.BRL},
			{AccountID: 7, Amount: decimal.NewFromInt(-1), Currency: money.BRL},
			{AccountCode: "c", Amount: decimal.NewFromInt(2), Currency: money.BRL},
		}})
	require.Equal(t, []accountRef{{id: 7}, {code: "c"}}, r.accounts)
}

// TestPosterDisjointBatchesDoNotWait: while one batch waits for an
// account's row lock (held here by another transaction), a transfer
// between other accounts is written by the second flusher, and a transfer
// naming the locked account waits for the first batch instead of taking a
// connection to queue on the lock. (issue 19)
func TestPosterDisjointBatchesDoNotWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	funding, err := EnsureAccount(ctx, pool, PlatformFunding(money.BRL))
	require.NoError(t, err)
	acc := map[string]Account{}
	for _, m := range []string{"a", "b", "c", "d"} {
		acc[m], err = EnsureAccount(ctx, pool, MerchantAvailable(m, money.BRL))
		require.NoError(t, err)
		_, err = Post(ctx, pool, posterTransfer("fund-"+m, funding.Code, acc[m].Code, "10"))
		require.NoError(t, err)
	}
	p := NewPoster(pool, PosterOptions{Flushers: 2})
	defer p.Close()

	lock, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer lock.Rollback(ctx) //nolint:errcheck
	_, err = lock.Exec(ctx, `SELECT ledger_lock_accounts(ARRAY[$1::bigint], NULL)`, acc["a"].ID)
	require.NoError(t, err)

	blocked := make(chan error, 2)
	go func() {
		_, err := p.Post(ctx, posterTransfer("ab", acc["a"].Code, acc["b"].Code, "1"))
		blocked <- err
	}()
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.held[accountRef{code: acc["a"].Code}] == 1
	}, 10*time.Second, time.Millisecond, "the first batch is in flight")
	go func() {
		_, err := p.Post(ctx, posterTransfer("ba", acc["b"].Code, acc["a"].Code, "1"))
		blocked <- err
	}()
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.pending) == 1
	}, 10*time.Second, time.Millisecond, "the transfer naming a held account is left pending")

	cdCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = p.Post(cdCtx, posterTransfer("cd", acc["c"].Code, acc["d"].Code, "1"))
	require.NoError(t, err, "a disjoint transfer is written while the first batch waits")
	select {
	case err := <-blocked:
		t.Fatalf("a transfer on the locked account was answered before the lock was released: %v", err)
	default:
	}

	require.NoError(t, lock.Rollback(ctx))
	for range 2 {
		require.NoError(t, <-blocked)
	}
	for m, want := range map[string]string{"a": "10", "b": "10", "c": "9", "d": "11"} {
		bal, err := Balance(ctx, pool, acc[m].Code)
		require.NoError(t, err)
		require.Equal(t, want, bal.Decimal().String(), m)
	}
	rep, err := Verify(ctx, pool)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Violations)
}

// TestSetBasedBatchMatchesPost (issue 19): a batch written
// by ledger_post_batch's set-based path (legs chaining to earlier legs of
// the same account in the batch, a three-leg transaction, amounts with
// trailing zeros) stores what ledger_post compares a replay with (since
// migration 00019 the transaction and its postings themselves), so each
// transaction replays through Post and a changed amount is a conflict, and
// the posting hashes chain as Verify recomputes them.
func TestSetBasedBatchMatchesPost(t *testing.T) {
	t.Parallel()
	ctx, pool, accs, p := posterFixture(t, "100", "a", "b", "c")
	a, b, c := accs[0], accs[1], accs[2]

	threeLegs := TransactionInput{IdempotencyKey: "split", CauseKind: "test", CauseID: "split",
		Postings: []PostingInput{
			{AccountID: a.ID, Amount: decimal.RequireFromString("-3.10"), Currency: money.BRL},
			{AccountID: b.ID, Amount: decimal.RequireFromString("1.000"), Currency: money.BRL},
			{AccountCode: c.Code, Amount: decimal.RequireFromString("2.1"), Currency: money.BRL},
		}}
	ins := []TransactionInput{
		posterTransfer("s1", a.Code, b.Code, "10.50"),
		posterTransfer("s2", b.Code, c.Code, "4.25"),
		threeLegs,
		posterTransfer("s3", c.Code, a.Code, "0.01"),
		posterTransfer("s4", a.Code, c.Code, "7"),
	}
	before := p.Stats().SetBased
	res := flushOne(ctx, p, ins...)
	require.Equal(t, before+1, p.Stats().SetBased, "the batch went through ledger_post_batch's set-based path")
	for i, r := range res {
		require.NoError(t, r.err, "transfer %d", i)
		again, err := Post(ctx, pool, ins[i])
		require.NoError(t, err, "replay of %s through ledger_post", ins[i].IdempotencyKey)
		require.True(t, again.Replayed)
		require.Equal(t, r.tx.ID, again.ID)
		changed := ins[i]
		changed.Postings = append([]PostingInput(nil), ins[i].Postings...)
		changed.Postings[0].Amount = changed.Postings[0].Amount.Sub(decimal.RequireFromString("0.01"))
		changed.Postings[1].Amount = changed.Postings[1].Amount.Add(decimal.RequireFromString("0.01"))
		_, err = Post(ctx, pool, changed)
		require.ErrorIs(t, err, ErrIdempotencyConflict, "%s with other amounts", ins[i].IdempotencyKey)
	}
	rep, err := Verify(ctx, pool)
	require.NoError(t, err)
	require.True(t, rep.OK(), "verify: %v", rep.Violations)
	for code, want := range map[string]string{a.Code: "79.41", b.Code: "7.25", c.Code: "13.34"} {
		bal, err := Balance(ctx, pool, code)
		require.NoError(t, err)
		require.Equal(t, want, bal.Decimal().String(), code)
	}
}
