package ledger_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// The database's double-entry checks (migrations 00015, 00016): a transaction is
// checked whole at the end of the statement that writes it with its
// postings, and a posting added later, to any transaction, at the end of
// its own statement. Nothing waits for COMMIT.
func TestDatabaseChecksNewAndOldTransactions(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "10.00")
	b := f.merchant(t, ctx, "b", "")
	posted, err := ledger.Post(ctx, f.pool, transfer("c1", a.Code, b.Code, "1.00"))
	require.NoError(t, err)

	insertTx := `INSERT INTO ledger_transactions (idempotency_key, cause_kind, cause_id, effective_at, posted_at)
		VALUES ($1, 'test', 'raw', now(), now()) RETURNING id`
	insertLeg := `INSERT INTO ledger_postings (account_id, seq, transaction_id, leg, amount, currency, balance_after, posted_at, hash)
		VALUES ($1, 90 + $3, $2, $3, $4::numeric, 'BRL', 0, now(), '\x')`

	// A transaction row written alone is refused by its own statement:
	// its postings come in the same statement.
	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, insertTx, "alone")
	require.ErrorIs(t, ledger.MapCommitError(err), ledger.ErrUnbalanced)
	require.ErrorContains(t, err, "same statement as its postings")
	require.NoError(t, tx.Rollback(ctx))

	// Written with its legs in one statement: a balanced transaction
	// passes, an unbalanced one is refused by that statement.
	withLegs := `WITH t AS (` + insertTx + `)
		INSERT INTO ledger_postings (account_id, seq, transaction_id, leg, amount, currency, balance_after, posted_at, hash)
		SELECT l.account, 90 + l.leg, t.id, l.leg, l.amount, 'BRL', 0, now(), '\x'
		FROM t, unnest($2::bigint[], $3::int[], $4::numeric[]) AS l(account, leg, amount)
		RETURNING transaction_id`
	tx, err = f.pool.Begin(ctx)
	require.NoError(t, err)
	var id int64
	require.NoError(t, tx.QueryRow(ctx, withLegs, "split", []int64{a.ID, b.ID}, []int{1, 2}, []string{"-2", "2"}).Scan(&id))
	// A later statement of the same database transaction that adds a leg
	// breaking the balance is refused at once.
	_, err = tx.Exec(ctx, insertLeg, b.ID, id, 3, "1")
	require.ErrorIs(t, ledger.MapCommitError(err), ledger.ErrUnbalanced)
	require.NoError(t, tx.Rollback(ctx))
	_, err = f.pool.Exec(ctx, withLegs, "split-bad", []int64{a.ID, b.ID}, []int{1, 2}, []string{"-2", "3"})
	require.ErrorIs(t, ledger.MapCommitError(err), ledger.ErrUnbalanced)

	// A posting for a transaction committed earlier is refused by its own
	// statement, inside a database transaction, before any COMMIT.
	tx, err = f.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, insertLeg, b.ID, posted.ID, 3, "5")
	require.ErrorIs(t, ledger.MapCommitError(err), ledger.ErrUnbalanced)
	require.NoError(t, tx.Rollback(ctx))

	// A balanced pair for a transaction that does not exist, legs 1 and 2
	// (the old per-posting trigger skipped leg 2 only): refused.
	_, err = f.pool.Exec(ctx, `INSERT INTO ledger_postings (account_id, seq, transaction_id, leg, amount, currency, balance_after, posted_at, hash)
		VALUES ($1, 80, 424242, 1, -1, 'BRL', 0, now(), '\x'), ($2, 81, 424242, 2, 1, 'BRL', 0, now(), '\x')`, a.ID, b.ID)
	require.ErrorIs(t, ledger.MapCommitError(err), ledger.ErrTransactionNotFound)

	// A transaction balanced in two currencies (the statement check's
	// single-currency test flags it, the precise check passes it), posted
	// alone and in a batch.
	usdA, err := ledger.EnsureAccount(ctx, f.pool, ledger.MerchantAvailable("a", money.USD))
	require.NoError(t, err)
	usdFunding, err := ledger.EnsureAccount(ctx, f.pool, ledger.PlatformFunding(money.USD))
	require.NoError(t, err)
	fx := func(key string) ledger.TransactionInput {
		in := transfer(key, a.Code, b.Code, "1.00")
		in.Postings = append(in.Postings,
			ledger.PostingInput{AccountCode: usdFunding.Code, Amount: dec("-0.20"), Currency: money.USD},
			ledger.PostingInput{AccountCode: usdA.Code, Amount: dec("0.20"), Currency: money.USD})
		return in
	}
	_, err = ledger.Post(ctx, f.pool, fx("fx1"))
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		_, err := ledger.PostMany(ctx, tx, []ledger.TransactionInput{fx("fx2"), transfer("c3", a.Code, b.Code, "1.00"), fx("fx3")})
		return err
	}))
	require.Equal(t, "5.00", balance(t, ctx, f.pool, a.Code))
	require.Equal(t, "0.60", balance(t, ctx, f.pool, usdA.Code))

	// Posting inside a savepoint: posted as usual.
	tx, err = f.pool.Begin(ctx)
	require.NoError(t, err)
	sp, err := tx.Begin(ctx)
	require.NoError(t, err)
	_, err = ledger.Post(ctx, sp, transfer("c2", a.Code, b.Code, "2.00"))
	require.NoError(t, err)
	require.NoError(t, sp.Commit(ctx))
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, "3.00", balance(t, ctx, f.pool, a.Code))

	requireClean(t, ctx, f.pool)
}
