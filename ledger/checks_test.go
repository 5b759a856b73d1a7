package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// ownerPool connects to pool's database as the role that owns the
// ledger's tables (the one `saldo migrate` runs as).
func ownerPool(t *testing.T, ctx context.Context, pool *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	owner, err := pgxpool.New(ctx, testdb.OwnerURL(t, pool))
	require.NoError(t, err)
	t.Cleanup(owner.Close)
	return owner
}

// requireRefusedByPrivilege: the statement was refused for want of a
// privilege, before it wrote anything.
func requireRefusedByPrivilege(t *testing.T, err error, q string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%s: %v", q, err)
	require.Equal(t, pgerrcode.InsufficientPrivilege, pgErr.Code, q)
}

// TestApplicationRoleWritesTheLedgerOnlyThroughItsFunctions: the role saldo
// serves as (testdb.AppRole, granted by migrations.GrantApplicationRole) may
// read the ledger and open accounts, and write postings and transactions
// only through ledger_post, ledger_post_batch and ledger_lock_accounts,
// which check every transaction (migration 00100, decision 0003). Every
// direct write, and every way around the checks (disabling a trigger,
// adding one, locking rows for update), is refused.
func TestApplicationRoleWritesTheLedgerOnlyThroughItsFunctions(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	var role string
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT current_user`).Scan(&role))
	require.Equal(t, testdb.AppRole, role)

	a := f.merchant(t, ctx, "a", "10.00")
	b := f.merchant(t, ctx, "b", "")
	posted, err := ledger.Post(ctx, f.pool, transfer("p1", a.Code, b.Code, "1.00"))
	require.NoError(t, err)

	for _, q := range []string{
		`INSERT INTO ledger_transactions (idempotency_key, cause_kind, cause_id, effective_at, posted_at)
			VALUES ('raw', 'test', 'raw', now(), now())`,
		fmt.Sprintf(`INSERT INTO ledger_postings (account_id, seq, transaction_id, leg, amount, currency, balance_after, posted_at, hash)
			VALUES (%d, 99, %d, 3, 5, 'BRL', 5, now(), '\x')`, b.ID, posted.ID),
		fmt.Sprintf(`UPDATE ledger_accounts SET balance = balance + 100 WHERE id = %d`, b.ID),
		`UPDATE ledger_postings SET amount = 1000`,
		`DELETE FROM ledger_postings`,
		`DELETE FROM ledger_transactions`,
		`TRUNCATE ledger_postings CASCADE`,
		`INSERT INTO ledger_accounts (code, owner_kind, owner_id, purpose, currency, allow_negative, balance)
			VALUES ('merchant/rich/available/BRL', 'merchant', 'rich', 'available', 'BRL', false, 1000)`,
		fmt.Sprintf(`SELECT FROM ledger_accounts WHERE id = %d FOR UPDATE`, a.ID),
		`ALTER TABLE ledger_postings DISABLE TRIGGER ledger_postings_append_only`,
		`CREATE TRIGGER x AFTER INSERT ON ledger_postings FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change()`,
		`UPDATE goose_db_version SET is_applied = false`,
	} {
		// A write lacks its privilege; ALTER and CREATE TRIGGER "must be
		// owner": the same SQLSTATE.
		_, err := f.pool.Exec(ctx, q)
		requireRefusedByPrivilege(t, err, q)
	}

	// Through the functions everything works: a post, a reversal, a batch
	// in one database transaction with its accounts locked first, the
	// group-commit Poster, and reads.
	_, err = ledger.Reverse(ctx, f.pool, posted.ID, "r1", "test")
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		_, err := ledger.PostMany(ctx, tx, []ledger.TransactionInput{
			transfer("m1", a.Code, b.Code, "1.00"), transfer("m2", b.Code, a.Code, "0.50")})
		return err
	}))
	p := ledger.NewPoster(f.pool, ledger.PosterOptions{})
	_, err = p.Post(ctx, transfer("g1", a.Code, b.Code, "2.00"))
	require.NoError(t, err)
	p.Close()
	require.Equal(t, "7.50", balance(t, ctx, f.pool, a.Code))
	require.Equal(t, "2.50", balance(t, ctx, f.pool, b.Code))
	requireClean(t, ctx, f.pool)
}

// callPost calls ledger_post as any SQL client could, without Go's
// Validate in front of it.
func callPost(ctx context.Context, db ledger.DBTX, key, kind, causeID, description string, ids []int64, amounts, currencies []string) (string, error) {
	codes := make([]string, len(ids))
	var outcome string
	err := db.QueryRow(ctx, `SELECT outcome FROM ledger_post($1, $2, $3, $4, NULL, NULL, NULL, $5, $6, $7::numeric[], $8) LIMIT 1`,
		key, kind, causeID, description, ids, codes, amounts, currencies).Scan(&outcome)
	return outcome, err
}

// TestWriteFunctionsRefuseWhatTheTriggersRefused: called directly, without
// Go's checks, ledger_post refuses every transaction the statement triggers
// of 00015-00016 refused, with their errors and constraint names (mapped
// by ledger.MapCommitError), and ledger_post_batch writes nothing for a
// batch holding one, leaving it to ledger_post ("fallback"). A transaction
// balanced in each of two currencies passes both.
func TestWriteFunctionsRefuseWhatTheTriggersRefused(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "10.00")
	b := f.merchant(t, ctx, "b", "")
	usdA, err := ledger.EnsureAccount(ctx, f.pool, ledger.MerchantAvailable("a", money.USD))
	require.NoError(t, err)
	usdFunding, err := ledger.EnsureAccount(ctx, f.pool, ledger.PlatformFunding(money.USD))
	require.NoError(t, err)
	pair := []int64{a.ID, b.ID}
	brl := []string{"BRL", "BRL"}
	long := strings.Repeat("k", 256)

	for name, c := range map[string]struct {
		key, kind, cause, description string
		ids                           []int64
		amounts, currencies           []string
		want                          error
		constraint                    string
	}{
		"unbalanced":          {"u1", "test", "c", "", pair, []string{"-1", "2"}, brl, ledger.ErrUnbalanced, "ledger_transaction_balanced"},
		"unbalanced in USD":   {"u2", "test", "c", "", []int64{a.ID, b.ID, usdFunding.ID, usdA.ID}, []string{"-1", "1", "-1", "2"}, []string{"BRL", "BRL", "USD", "USD"}, ledger.ErrUnbalanced, "ledger_transaction_balanced"},
		"zero leg":            {"u3", "test", "c", "", []int64{a.ID, b.ID, b.ID}, []string{"-1", "1", "0"}, []string{"BRL", "BRL", "BRL"}, ledger.ErrInvalidInput, "ledger_postings_valid"},
		"no amount":           {"u4", "test", "c", "", pair, []string{"-1", ""}, brl, ledger.ErrInvalidInput, "ledger_postings_valid"},
		"cause kind":          {"u5", "Not A Word", "c", "", pair, []string{"-1", "1"}, brl, ledger.ErrInvalidInput, "ledger_transactions_valid"},
		"empty key":           {"", "test", "c", "", pair, []string{"-1", "1"}, brl, ledger.ErrInvalidInput, "ledger_transactions_valid"},
		"long key":            {long, "test", "c", "", pair, []string{"-1", "1"}, brl, ledger.ErrInvalidInput, "ledger_transactions_valid"},
		"empty cause id":      {"u6", "test", "", "", pair, []string{"-1", "1"}, brl, ledger.ErrInvalidInput, "ledger_transactions_valid"},
		"long description":    {"u7", "test", "c", strings.Repeat("é", 1001), pair, []string{"-1", "1"}, brl, ledger.ErrInvalidInput, "ledger_transactions_valid"},
		"missing account":     {"u8", "test", "c", "", []int64{a.ID, 424242}, []string{"-1", "1"}, brl, nil, "unknown_account"},
		"account in BRL, USD": {"u9", "test", "c", "", pair, []string{"-1", "1"}, []string{"USD", "USD"}, nil, "currency_mismatch"},
		"balanced in two":     {"ok1", "test", "c", "", []int64{a.ID, b.ID, usdFunding.ID, usdA.ID}, []string{"-1", "1", "-0.2", "0.2"}, []string{"BRL", "BRL", "USD", "USD"}, nil, "posted"},
		"description of 1000": {"ok2", "test", "c", strings.Repeat("é", 1000), pair, []string{"-1", "1"}, brl, nil, "posted"},
	} {
		amounts := make([]*string, len(c.amounts))
		for i := range c.amounts {
			if c.amounts[i] != "" {
				amounts[i] = &c.amounts[i]
			}
		}
		var outcome string
		err := f.pool.QueryRow(ctx, `SELECT outcome FROM ledger_post($1, $2, $3, $4, NULL, NULL, NULL, $5, $6, $7::numeric[], $8) LIMIT 1`,
			c.key, c.kind, c.cause, c.description, c.ids, make([]string, len(c.ids)), amounts, c.currencies).Scan(&outcome)
		if c.want == nil {
			require.NoError(t, err, name)
			require.Equal(t, c.constraint, outcome, name)
			continue
		}
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, name)
		require.Equal(t, c.constraint, pgErr.ConstraintName, name)
		require.ErrorIs(t, ledger.MapCommitError(err), c.want, name)
	}

	// The batch function: each bad batch writes nothing and answers
	// "fallback"; the good one posts.
	batch := func(keys, kinds []string, tx, legs []int32, ids []int64, amounts []string, currencies []string) string {
		m := len(keys)
		var outcome string
		require.NoError(t, f.pool.QueryRow(ctx, `SELECT outcome FROM ledger_post_batch($1, $2, $3, $4, $5::jsonb[], $6::timestamptz[], $7, $8, $9, $10, $11::numeric[], $12)`,
			keys, kinds, slices.Repeat([]string{"c"}, m), make([]string, m), make([]*string, m), make([]*string, m),
			tx, legs, ids, make([]string, len(ids)), amounts, currencies).Scan(&outcome))
		return outcome
	}
	two := []int32{1, 1, 2, 2}
	legs := []int32{1, 2, 1, 2}
	four := []int64{a.ID, b.ID, b.ID, a.ID}
	brl4 := []string{"BRL", "BRL", "BRL", "BRL"}
	var before int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM ledger_transactions`).Scan(&before))
	for name, c := range map[string]struct {
		kinds   []string
		tx      []int32
		legs    []int32
		amounts []string
		curs    []string
	}{
		"unbalanced":         {[]string{"test", "test"}, two, legs, []string{"-1", "1", "-1", "2"}, brl4},
		"legs not 1..n":      {[]string{"test", "test"}, two, []int32{1, 3, 1, 2}, []string{"-1", "1", "-1", "1"}, brl4},
		"legs repeated":      {[]string{"test", "test"}, two, []int32{1, 1, 1, 2}, []string{"-1", "1", "-1", "1"}, brl4},
		"transactions mixed": {[]string{"test", "test"}, []int32{1, 2, 1, 2}, []int32{1, 1, 2, 2}, []string{"-1", "-1", "1", "1"}, brl4},
		"one leg":            {[]string{"test", "test"}, []int32{1, 2, 2, 2}, []int32{1, 1, 2, 3}, []string{"-1", "-1", "1", "1"}, brl4},
		"cause kind":         {[]string{"test", "Bad"}, two, legs, []string{"-1", "1", "-1", "1"}, brl4},
		"two currencies":     {[]string{"test", "test"}, two, legs, []string{"-1", "1", "-1", "1"}, []string{"BRL", "USD", "BRL", "BRL"}},
	} {
		require.Equal(t, "fallback", batch([]string{"b1-" + name, "b2-" + name}, c.kinds, c.tx, c.legs, four, c.amounts, c.curs), name)
	}
	var after int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM ledger_transactions`).Scan(&after))
	require.Equal(t, before, after, "a refused batch writes nothing")
	require.Equal(t, "posted", batch([]string{"b1", "b2"}, []string{"test", "test"}, two, legs, four, []string{"-1", "1", "-1", "1"}, brl4))
	requireClean(t, ctx, f.pool)
}

// TestWriteFunctionsKeepTheCauseKindRule: ledger_post refuses a cause
// kind exactly when ^[a-z][a-z0-9_]{0,39}$ does (length bounds, first
// character, non-ASCII letters, a trailing newline), as the transactions'
// statement check did before migration 00100.
func TestWriteFunctionsKeepTheCauseKindRule(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "10.00")
	b := f.merchant(t, ctx, "b", "")
	rule := regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)
	for i, kind := range []string{
		"payout_settle", "a", "x9", "a_", strings.Repeat("a", 40), "z" + strings.Repeat("_", 39),
		"", strings.Repeat("a", 41), "_a", "9a", "Payout", "payoutA", "payout-settle", "payout settle",
		"pagamento_à", "é", "a\n", "a|b", "abc" + strings.Repeat("z", 38),
	} {
		outcome, err := callPost(ctx, f.pool, fmt.Sprintf("kind-%d", i), kind, "raw", "",
			[]int64{a.ID, b.ID}, []string{"-0.01", "0.01"}, []string{"BRL", "BRL"})
		if rule.MatchString(kind) {
			require.NoError(t, err, "%q", kind)
			require.Equal(t, "posted", outcome, "%q", kind)
			continue
		}
		require.Error(t, err, "%q", kind)
		require.ErrorContains(t, err, "is invalid", "%q", kind)
		require.ErrorIs(t, ledger.MapCommitError(err), ledger.ErrInvalidInput, "%q", kind)
	}
	requireClean(t, ctx, f.pool)
}
