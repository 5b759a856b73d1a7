package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

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

// TestPlainTransferIsOneStatement: ledger_post writes a transfer of two
// legs on two different accounts, named by id or by code, in one statement
// (migration 00102), and leaves everything else to ledger_post_general:
// three legs, one account twice, a reversal, and every transfer that
// statement would refuse or that finds its key used, which then get
// ledger_post_general's exact answer: an overdraft refused (R23), a replay
// answered with the original and a reused key refused (R4). Counted with
// track_functions in the caller's transaction.
func TestPlainTransferIsOneStatement(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "10.00")
	b := f.merchant(t, ctx, "b", "")
	c := f.merchant(t, ctx, "c", "")
	admin, err := pgxpool.New(ctx, testdb.AdminURL(t, f.pool))
	require.NoError(t, err)
	t.Cleanup(admin.Close)

	byID := func(key string, from, to ledger.Account, amount string) ledger.TransactionInput {
		in := transfer(key, "", "", amount)
		in.Postings[0].AccountID, in.Postings[1].AccountID = from.ID, to.ID
		return in
	}
	const generalCalls = `SELECT coalesce(pg_stat_get_xact_function_calls('ledger_post_general'::regproc), 0)`
	// counted runs write (ledger.Post or ledger.Reverse) in a transaction
	// of its own and says how often ledger_post_general ran in it.
	counted := func(write func(tx pgx.Tx) (ledger.Transaction, error)) (ledger.Transaction, int, error) {
		var (
			posted  ledger.Transaction
			calls   int
			postErr error
		)
		require.NoError(t, pgx.BeginFunc(ctx, admin, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL track_functions = 'pl'`); err != nil {
				return err
			}
			// The backend's counts not yet reported include earlier
			// transactions': count the difference.
			var before int
			if err := tx.QueryRow(ctx, generalCalls).Scan(&before); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SAVEPOINT post`); err != nil {
				return err
			}
			posted, postErr = write(tx)
			if postErr != nil {
				// A refusal leaves the transaction usable; an error
				// raised in the database does not.
				if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT post`); err != nil {
					return err
				}
			}
			if err := tx.QueryRow(ctx, generalCalls).Scan(&calls); err != nil {
				return err
			}
			calls -= before
			return nil
		}))
		return posted, calls, postErr
	}
	post := func(in ledger.TransactionInput) (ledger.Transaction, int, error) {
		return counted(func(tx pgx.Tx) (ledger.Transaction, error) { return ledger.Post(ctx, tx, in) })
	}

	for name, in := range map[string]ledger.TransactionInput{
		"by id":   byID("one-id", a, b, "1.00"),
		"by code": transfer("one-code", a.Code, b.Code, "1.00"),
		"mixed":   {IdempotencyKey: "one-mixed", CauseKind: "test", CauseID: "m", Postings: []ledger.PostingInput{{AccountID: a.ID, Amount: dec("-0.50"), Currency: money.BRL}, {AccountCode: c.Code, Amount: dec("0.50"), Currency: money.BRL}}},
	} {
		tx, calls, err := post(in)
		require.NoError(t, err, name)
		require.Zero(t, calls, "%s: one statement", name)
		require.Len(t, tx.Postings, 2, name)
		require.False(t, tx.Replayed, name)
	}

	first, _, err := post(byID("twice", a, b, "2.00"))
	require.NoError(t, err)
	three := byID("three", a, b, "1.00")
	three.Postings = append(three.Postings, ledger.PostingInput{AccountID: c.ID, Amount: dec("0.25"), Currency: money.BRL})
	three.Postings[1].Amount = dec("0.75")
	sameTwice := byID("same", a, a, "1.00")
	for name, tc := range map[string]struct {
		in   ledger.TransactionInput
		want error
	}{
		"replay":             {byID("twice", a, b, "2.00"), nil},
		"key reused":         {byID("twice", a, b, "2.01"), ledger.ErrIdempotencyConflict},
		"insufficient funds": {byID("short", b, a, "1000.00"), ledger.ErrInsufficientFunds},
		"unknown account":    {transfer("nobody", a.Code, "merchant/nobody/available/BRL", "1.00"), ledger.ErrAccountNotFound},
		"three legs":         {three, nil},
		"one account twice":  {sameTwice, nil},
	} {
		tx, calls, err := post(tc.in)
		require.Equal(t, 1, calls, "%s: ledger_post_general", name)
		if tc.want != nil {
			require.ErrorIs(t, err, tc.want, name)
			continue
		}
		require.NoError(t, err, name)
		if name == "replay" {
			require.True(t, tx.Replayed)
			require.Equal(t, first.ID, tx.ID)
		}
	}
	var ie *ledger.InsufficientFundsError
	_, _, err = post(byID("short-2", b, a, "1000.00"))
	require.ErrorAs(t, err, &ie)
	require.Equal(t, b.Code, ie.AccountCode)
	rev, calls, err := counted(func(tx pgx.Tx) (ledger.Transaction, error) {
		return ledger.Reverse(ctx, tx, first.ID, "twice-rev", "")
	})
	require.NoError(t, err)
	require.Equal(t, 1, calls, "a reversal: ledger_post_general")
	require.Equal(t, first.ID, rev.ReversesID)
	requireClean(t, ctx, f.pool)
}

// TestPlainTransferAgreesWithTheGeneralFunction: the same transfers posted
// through ledger_post's one statement on two accounts and through
// ledger_post_general on two twins give the same balances after, sequence
// numbers, refusals for insufficient funds (R23) and posting times in
// order; Verify (which recomputes every hash chain) is clean, and the
// answers are what the rows hold.
func TestPlainTransferAgreesWithTheGeneralFunction(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	pair := func(name string) [2]ledger.Account {
		return [2]ledger.Account{f.merchant(t, ctx, name+"x", "7.00"), f.merchant(t, ctx, name+"y", "0.30")}
	}
	one, gen := pair("one"), pair("gen")
	type answer struct {
		outcome        string
		balances, seqs []string
	}
	call := func(fn, key string, accs [2]ledger.Account, from int, amount string) answer {
		rows, err := f.pool.Query(ctx, `SELECT outcome, balance_after::text, seq::text, hash, posted_at
			FROM `+fn+`($1, 'test', 'c', NULL, NULL, NULL, NULL, $2, ARRAY['', ''], $3::numeric[], ARRAY['BRL', 'BRL'])`,
			key, []int64{accs[from].ID, accs[1-from].ID}, []string{"-" + amount, amount})
		require.NoError(t, err)
		var ans answer
		for rows.Next() {
			var bal, seq *string
			var hash []byte
			var at *time.Time
			require.NoError(t, rows.Scan(&ans.outcome, &bal, &seq, &hash, &at))
			if ans.outcome == "posted" {
				require.Len(t, hash, 32)
				require.NotNil(t, at)
				ans.balances, ans.seqs = append(ans.balances, *bal), append(ans.seqs, *seq)
			}
		}
		require.NoError(t, rows.Err())
		return ans
	}
	amounts := []string{"1.00", "0.01", "6.50", "0.30", "12.00", "0.29", "3.33", "0.01", "7.00"}
	for i, amount := range amounts {
		from := i % 2
		key := fmt.Sprintf("k%d", i)
		want := call("ledger_post_general", "gen-"+key, gen, from, amount)
		got := call("ledger_post", "one-"+key, one, from, amount)
		require.Equal(t, want, got, "transfer %d of %s from leg %d", i, amount, from)
	}
	var disorder int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT posted_at < lag(posted_at) OVER (PARTITION BY account_id ORDER BY seq) AS back FROM ledger_postings) s
		WHERE back`).Scan(&disorder))
	require.Zero(t, disorder, "posted_at never goes back on an account")
	requireClean(t, ctx, f.pool)
}
