package ledger_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// TestVerifyDetectsDamage breaks a ledger on purpose, as a superuser with
// triggers disabled (session_replication_role = replica), and shows that
// Verify catches each kind of damage and nothing else.
func TestVerifyDetectsDamage(t *testing.T) {
	t.Parallel()

	// history builds a small clean ledger and returns a superuser connection
	// with triggers disabled, plus the two merchant codes.
	history := func(t *testing.T) (context.Context, fixture, *pgx.Conn, string, string) {
		ctx, f := setup(t)
		a := f.merchant(t, ctx, "a", "50.00")
		b := f.merchant(t, ctx, "b", "5.00")
		for i := range 6 {
			_, err := ledger.Post(ctx, f.pool, transfer(fmt.Sprintf("h%d", i), a.Code, b.Code, "1.25"))
			require.NoError(t, err)
		}
		requireClean(t, ctx, f.pool)
		admin, err := pgx.Connect(ctx, testdb.AdminURL(t, f.pool))
		require.NoError(t, err)
		t.Cleanup(func() { admin.Close(context.Background()) })
		_, err = admin.Exec(ctx, `SET session_replication_role = replica`)
		require.NoError(t, err)
		return ctx, f, admin, a.Code, b.Code
	}
	exec := func(t *testing.T, c *pgx.Conn, sql string, args ...any) {
		t.Helper()
		_, err := c.Exec(context.Background(), sql, args...)
		require.NoError(t, err, sql)
	}
	// expect runs Verify and checks the violation counts: every kind listed
	// in want with at least that many (exactly, when exact), no other kind.
	expect := func(t *testing.T, ctx context.Context, db ledger.DBTX, exact bool, want map[ledger.ViolationKind]int64) ledger.Report {
		t.Helper()
		rep, err := ledger.Verify(ctx, db)
		require.NoError(t, err)
		require.False(t, rep.OK())
		for _, k := range ledger.AllViolationKinds {
			got := rep.Counts[k]
			switch w, listed := want[k]; {
			case !listed:
				require.Zero(t, got, "unexpected %s: %v", k, rep.Violations)
			case exact:
				require.Equal(t, w, got, "%s: %v", k, rep.Violations)
			default:
				require.GreaterOrEqual(t, got, w, "%s: %v", k, rep.Violations)
			}
		}
		require.NotEmpty(t, rep.Violations)
		return rep
	}

	t.Run("wrong balance", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, a, _ := history(t)
		exec(t, admin, `UPDATE ledger_accounts SET balance = balance + 100 WHERE code = $1`, a)
		rep := expect(t, ctx, f.pool, true, map[ledger.ViolationKind]int64{ledger.ViolationBalanceMismatch: 1})
		require.Equal(t, a, rep.Violations[0].AccountCode)
		require.Contains(t, rep.Violations[0].Detail, "postings sum to")
	})

	t.Run("unbalanced transaction", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, a, b := history(t)
		// ledger_post refuses an unbalanced transaction (migration 00100),
		// so a balanced one loses its third leg, on an account that had no
		// other posting and is put back as it was: everything else about
		// the transaction and the accounts is consistent.
		c, err := ledger.EnsureAccount(ctx, f.pool, ledger.MerchantAvailable("c", money.BRL))
		require.NoError(t, err)
		exec(t, admin, `SELECT * FROM ledger_post('bad', 'test', 'bad', '', NULL, NULL, NULL,
			'{0,0,0}', ARRAY[$1, $2, $3], '{-5.00,4.00,1.00}', '{BRL,BRL,BRL}')`, a, b, c.Code)
		exec(t, admin, `DELETE FROM ledger_postings WHERE account_id = $1`, c.ID)
		exec(t, admin, `UPDATE ledger_accounts SET balance = 0, last_seq = 0, last_hash = chain_genesis, last_posted_at = NULL
			WHERE id = $1`, c.ID)
		rep := expect(t, ctx, f.pool, true, map[ledger.ViolationKind]int64{ledger.ViolationUnbalancedTransaction: 1})
		require.Contains(t, rep.Violations[0].Detail, "BRL -1")
		// A transaction with a single posting is caught too.
		exec(t, admin, `WITH t AS (INSERT INTO ledger_transactions (idempotency_key, cause_kind, cause_id, effective_at, posted_at)
			VALUES ('lonely', 'test', 'x', now(), now()) RETURNING id) SELECT 1 FROM t`)
		expect(t, ctx, f.pool, true, map[ledger.ViolationKind]int64{ledger.ViolationUnbalancedTransaction: 2})
	})

	t.Run("negative history", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, _, b := history(t)
		// Let b overdraw for a moment, then restore it: the current balance
		// is fine, the history is not.
		exec(t, admin, `UPDATE ledger_accounts SET allow_negative = true WHERE code = $1`, b)
		exec(t, admin, `SELECT * FROM ledger_post('over', 'test', 'over', '', NULL, NULL, NULL,
			'{0,0}', ARRAY[$1, 'platform/main/funding/BRL'], '{-20.00,20.00}', '{BRL,BRL}')`, b)
		exec(t, admin, `SELECT * FROM ledger_post('back', 'test', 'back', '', NULL, NULL, NULL,
			'{0,0}', ARRAY['platform/main/funding/BRL', $1], '{-20.00,20.00}', '{BRL,BRL}')`, b)
		exec(t, admin, `UPDATE ledger_accounts SET allow_negative = false WHERE code = $1`, b)
		rep := expect(t, ctx, f.pool, true, map[ledger.ViolationKind]int64{ledger.ViolationForbiddenNegative: 1})
		require.Equal(t, b, rep.Violations[0].AccountCode)
		require.Contains(t, rep.Violations[0].Detail, "-7.5")
	})

	t.Run("sequence gap", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, a, _ := history(t)
		// Renumber the newest posting of a (and the account's head) so a
		// number is skipped.
		exec(t, admin, `UPDATE ledger_postings SET seq = seq + 1
			WHERE account_id = (SELECT id FROM ledger_accounts WHERE code = $1)
			  AND seq = (SELECT last_seq FROM ledger_accounts WHERE code = $1)`, a)
		exec(t, admin, `UPDATE ledger_accounts SET last_seq = last_seq + 1 WHERE code = $1`, a)
		rep := expect(t, ctx, f.pool, true, map[ledger.ViolationKind]int64{
			ledger.ViolationSequenceGap: 1,
			ledger.ViolationHashChain:   1, // seq is part of the hashed content
		})
		require.Equal(t, a, rep.Violations[0].AccountCode)
		require.EqualValues(t, 8, rep.Violations[0].Seq) // funding + 6 transfers = 7, renumbered to 8
	})

	t.Run("deleted posting", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, a, _ := history(t)
		exec(t, admin, `DELETE FROM ledger_postings WHERE account_id = (SELECT id FROM ledger_accounts WHERE code = $1) AND seq = 3`, a)
		expect(t, ctx, f.pool, false, map[ledger.ViolationKind]int64{
			ledger.ViolationSequenceGap:           1,
			ledger.ViolationUnbalancedTransaction: 1,
			ledger.ViolationBalanceMismatch:       1,
			ledger.ViolationBalanceAfter:          1,
			ledger.ViolationHashChain:             1,
		})
	})

	t.Run("tampered amount, everything else adjusted", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, a, b := history(t)
		// The forger moves 1.00 more in the newest transfer and fixes up
		// amounts, balances after and account balances so that the ledger
		// still balances everywhere. Only the hash chain can tell.
		exec(t, admin, `UPDATE ledger_postings p SET amount = amount - 1, balance_after = balance_after - 1
			FROM ledger_transactions t WHERE t.id = p.transaction_id AND t.idempotency_key = 'h5' AND p.leg = 1`)
		exec(t, admin, `UPDATE ledger_postings p SET amount = amount + 1, balance_after = balance_after + 1
			FROM ledger_transactions t WHERE t.id = p.transaction_id AND t.idempotency_key = 'h5' AND p.leg = 2`)
		exec(t, admin, `UPDATE ledger_accounts SET balance = balance - 1 WHERE code = $1`, a)
		exec(t, admin, `UPDATE ledger_accounts SET balance = balance + 1 WHERE code = $1`, b)
		rep := expect(t, ctx, f.pool, true, map[ledger.ViolationKind]int64{ledger.ViolationHashChain: 2})
		for _, v := range rep.Violations {
			require.Contains(t, v.Detail, "content")
		}
	})

	t.Run("forged chain link", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, a, _ := history(t)
		// Rewrite a middle posting's hash (as if to match tampered
		// content): it no longer matches its content, and the next
		// posting's hash, computed over it, no longer matches either.
		exec(t, admin, `UPDATE ledger_postings SET hash = sha256(hash)
			WHERE account_id = (SELECT id FROM ledger_accounts WHERE code = $1) AND seq = 4`, a)
		expect(t, ctx, f.pool, true, map[ledger.ViolationKind]int64{ledger.ViolationHashChain: 2})
	})

	t.Run("orphan posting", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, _, _ := history(t)
		// Move a posting to a transaction that does not exist.
		exec(t, admin, `UPDATE ledger_postings SET transaction_id = 424242 WHERE transaction_id = 1 AND leg = 1`)
		expect(t, ctx, f.pool, true, map[ledger.ViolationKind]int64{
			ledger.ViolationOrphanPosting:         1,
			ledger.ViolationHashChain:             1, // the transaction id is hashed
			ledger.ViolationUnbalancedTransaction: 1, // transaction 1 lost a leg
		})
	})

	t.Run("posted_at backwards", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, a, _ := history(t)
		exec(t, admin, `UPDATE ledger_postings SET posted_at = posted_at - interval '1 hour'
			WHERE account_id = (SELECT id FROM ledger_accounts WHERE code = $1) AND seq = 4`, a)
		expect(t, ctx, f.pool, true, map[ledger.ViolationKind]int64{
			ledger.ViolationTimeOrder: 1,
			ledger.ViolationHashChain: 1, // posted_at is hashed
		})
	})

	t.Run("stale account head", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, a, _ := history(t)
		exec(t, admin, `UPDATE ledger_accounts SET last_hash = '\xdeadbeef' WHERE code = $1`, a)
		expect(t, ctx, f.pool, true, map[ledger.ViolationKind]int64{ledger.ViolationChainHead: 1})
	})
}
