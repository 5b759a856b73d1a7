package ledger_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/ledger"
)

// The database's double-entry checks (migration 00014): a transaction
// inserted by a database transaction is checked whole at COMMIT, however
// many statements wrote it; a posting for any other transaction is checked
// at the end of its statement.
func TestDatabaseChecksNewAndOldTransactions(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "10.00")
	b := f.merchant(t, ctx, "b", "")
	posted, err := ledger.Post(ctx, f.pool, transfer("c1", a.Code, b.Code, "1.00"))
	require.NoError(t, err)

	insertTx := `INSERT INTO ledger_transactions (idempotency_key, request_hash, cause_kind, cause_id, effective_at, posted_at)
		VALUES ($1, '\x00', 'test', 'raw', now(), now()) RETURNING id`
	insertLeg := `INSERT INTO ledger_postings (account_id, seq, transaction_id, leg, amount, currency, balance_after, posted_at, hash)
		VALUES ($1, 90 + $3, $2, $3, $4::numeric, 'BRL', 0, now(), '\x')`

	// A new transaction written leg by leg, one statement each: nothing is
	// refused before COMMIT, and the check at COMMIT (fired here with SET
	// CONSTRAINTS, then rolled back) accepts it once it balances.
	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	var id int64
	require.NoError(t, tx.QueryRow(ctx, insertTx, "split").Scan(&id))
	_, err = tx.Exec(ctx, insertLeg, a.ID, id, 1, "-2")
	require.NoError(t, err, "one leg of a new transaction waits for COMMIT")
	_, err = tx.Exec(ctx, insertLeg, b.ID, id, 2, "2")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SET CONSTRAINTS ALL IMMEDIATE`)
	require.NoError(t, err, "a balanced transaction passes the check")
	require.NoError(t, tx.Rollback(ctx))

	// The same, unbalanced: refused when the check runs.
	tx, err = f.pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(ctx, insertTx, "split-bad").Scan(&id))
	_, err = tx.Exec(ctx, insertLeg, a.ID, id, 1, "-2")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, insertLeg, b.ID, id, 2, "3")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SET CONSTRAINTS ALL IMMEDIATE`)
	require.ErrorIs(t, ledger.MapCommitError(err), ledger.ErrUnbalanced)
	require.NoError(t, tx.Rollback(ctx))

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

	// Posting inside a savepoint (the transaction row then carries the
	// subtransaction's id, so its postings are checked at the end of the
	// statement as well as at COMMIT): posted as usual.
	tx, err = f.pool.Begin(ctx)
	require.NoError(t, err)
	sp, err := tx.Begin(ctx)
	require.NoError(t, err)
	_, err = ledger.Post(ctx, sp, transfer("c2", a.Code, b.Code, "2.00"))
	require.NoError(t, err)
	require.NoError(t, sp.Commit(ctx))
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, "7.00", balance(t, ctx, f.pool, a.Code))

	requireClean(t, ctx, f.pool)
}
