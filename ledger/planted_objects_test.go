package ledger_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
)

// plantStatements create, in public (the schema the ledger's definer
// functions pin as their search path), two operators on (numeric,
// integer): an "=" that also calls 10 zero, and a "<>" that calls 10 not
// different from zero. pg_catalog has no numeric-integer operator, so an
// exact-type match in public wins over pg_catalog's numeric = numeric
// reached through a cast.
var plantStatements = []string{
	`CREATE FUNCTION public.review_eq(numeric, integer) RETURNS boolean LANGUAGE sql AS
		$$ SELECT $1 OPERATOR(pg_catalog.=) $2::numeric OR $1 OPERATOR(pg_catalog.=) 10::numeric $$`,
	`CREATE FUNCTION public.review_ne(numeric, integer) RETURNS boolean LANGUAGE sql AS
		$$ SELECT NOT ($1 OPERATOR(pg_catalog.=) $2::numeric OR $1 OPERATOR(pg_catalog.=) 10::numeric) $$`,
	`CREATE OPERATOR public.= (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = public.review_eq)`,
	`CREATE OPERATOR public.<> (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = public.review_ne)`,
}

// R23, decision 0003: the ledger's SECURITY DEFINER functions pin their
// search path to the schema of the ledger's tables, and pg_catalog has no
// numeric = integer operator: an operator of that exact signature created
// in that schema would be chosen inside ledger_post's and
// ledger_post_batch's "sum(...) = 0" and run as the tables' owner (an
// unbalanced posting, anything the owner may do). So the application role
// may create nothing there: migrations.GrantApplicationRole revokes CREATE
// and refuses a role that still has it (TestGrantRefusesARoleThatMayCreateInTheSchema).
func TestApplicationRoleCannotPlantObjectsInTheLedgersSchema_R23(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	conn, err := pgx.ConnectConfig(ctx, f.pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var who string
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_user`).Scan(&who))
	require.Equal(t, testdb.AppRole, who)
	for _, q := range plantStatements {
		_, err := conn.Exec(ctx, q)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, q)
		require.Equal(t, "42501", pgErr.Code, "%s: %v", q, err) // insufficient_privilege
	}
	var create bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT has_schema_privilege('public', 'CREATE')`).Scan(&create))
	require.False(t, create)
}

// ledger.Verify's checks compare numerics with numeric literals, so an
// operator on (numeric, integer) planted in public, the schema on every
// session's default search path (here by the tables' owner, who may create
// there), cannot make it call a transaction whose postings sum to 10.00
// balanced: the hash is computed in Verify's own query so that a replaced
// database function cannot vouch for tampered rows, and an added operator
// cannot either.
func TestVerifyIgnoresPlantedOperators_R23(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "100.00")
	b := f.merchant(t, ctx, "b", "")
	_, err := ledger.Post(ctx, f.pool, transfer("t1", a.Code, b.Code, "5.00"))
	require.NoError(t, err)

	admin, err := pgx.Connect(ctx, testdb.AdminURL(t, f.pool))
	require.NoError(t, err)
	defer admin.Close(ctx)
	// The damage, written as a superuser: leg 2 of t1 credits 10.00 more,
	// its account's balance, balance_after and hash chain made consistent,
	// so only the transaction's sum is wrong.
	for _, q := range []string{
		`SET session_replication_role = replica`,
		`UPDATE ledger_postings p SET amount = amount + 10, balance_after = balance_after + 10
		 FROM ledger_transactions t WHERE t.id = p.transaction_id AND t.idempotency_key = 't1' AND p.leg = 2`,
		`UPDATE ledger_postings p SET hash = sha256(convert_to(concat_ws('|', 'saldo-ledger-posting-v2',
			p.account_id, p.seq, p.transaction_id, p.leg, trim_scale(p.amount)::text, p.currency,
			trim_scale(p.balance_after)::text, (extract(epoch FROM p.posted_at) * 1000000)::bigint,
			t.cause_kind, 0, length(t.cause_id), t.cause_id, length(t.idempotency_key), t.idempotency_key), 'UTF8')
			|| a.chain_genesis)
		 FROM ledger_transactions t, ledger_accounts a
		 WHERE t.id = p.transaction_id AND t.idempotency_key = 't1' AND p.leg = 2 AND a.id = p.account_id`,
		`UPDATE ledger_accounts a SET balance = p.balance_after, last_hash = p.hash
		 FROM ledger_postings p WHERE p.account_id = a.id AND p.seq = a.last_seq AND a.code = '` + b.Code + `'`,
		`SET session_replication_role = origin`,
	} {
		_, err := admin.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	rep, err := ledger.Verify(ctx, admin)
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.Counts[ledger.ViolationUnbalancedTransaction], "control: %v", rep.Violations)
	require.Equal(t, int64(1), rep.Total(), "control: only the sum is wrong: %v", rep.Violations)

	owner, err := pgx.Connect(ctx, testdb.OwnerURL(t, f.pool))
	require.NoError(t, err)
	defer owner.Close(ctx)
	for _, q := range plantStatements {
		_, err := owner.Exec(ctx, q)
		require.NoError(t, err, q)
	}

	// A new superuser session, as `saldo audit verify` would open.
	auditor, err := pgx.Connect(ctx, testdb.AdminURL(t, f.pool))
	require.NoError(t, err)
	defer auditor.Close(ctx)
	rep, err = ledger.Verify(ctx, auditor)
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.Counts[ledger.ViolationUnbalancedTransaction],
		"Verify misses the unbalanced transaction once an operator was planted: %v", rep.Violations)
}
