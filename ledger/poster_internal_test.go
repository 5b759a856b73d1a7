package ledger

import (
	"context"
	"errors"
	"testing"
	"time"

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
	ctx := context.Background()
	pool := testdb.New(t)
	funding, err := EnsureAccount(ctx, pool, PlatformFunding(money.BRL))
	require.NoError(t, err)
	a, err := EnsureAccount(ctx, pool, MerchantAvailable("a", money.BRL))
	require.NoError(t, err)
	b, err := EnsureAccount(ctx, pool, MerchantAvailable("b", money.BRL))
	require.NoError(t, err)
	_, err = Post(ctx, pool, posterTransfer("fund", funding.Code, a.Code, "10"))
	require.NoError(t, err)
	p := NewPoster(pool, PosterOptions{Flushers: 1})
	defer p.Close()

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
	_, err = pool.Exec(ctx, `
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
