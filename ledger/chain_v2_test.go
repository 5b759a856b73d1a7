package ledger_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// chainReplay recomputes every posting's hash in Go from the format
// docs/architecture.md gives (migration 00108), independently of both the
// writers and ledger.Verify, which are SQL: a writer and Verify that agreed
// on a wrong input (say, neither covering the cause) would pass Verify but
// not this. It returns each account's chain version by code and fails the
// test on any hash, head or genesis that differs.
func chainReplay(t *testing.T, ctx context.Context, db ledger.DBTX) map[string]int {
	t.Helper()
	type account struct {
		id                              int64
		code, kind, owner, purpose, cur string
		allowNegative                   bool
		version                         int
		genesis, head                   []byte
	}
	accounts := map[int64]*account{}
	versions := map[string]int{}
	rows, err := db.Query(ctx, `SELECT id, code, owner_kind, owner_id, purpose, currency, allow_negative,
		chain_version, chain_genesis, last_hash FROM ledger_accounts`)
	require.NoError(t, err)
	for rows.Next() {
		a := &account{}
		require.NoError(t, rows.Scan(&a.id, &a.code, &a.kind, &a.owner, &a.purpose, &a.cur, &a.allowNegative,
			&a.version, &a.genesis, &a.head))
		accounts[a.id] = a
		versions[a.code] = a.version
	}
	require.NoError(t, rows.Err())

	genesis := func(a *account) []byte {
		neg := "f"
		if a.allowNegative {
			neg = "t"
		}
		h := sha256.Sum256([]byte(strings.Join([]string{"saldo-ledger-account-v2", strconv.FormatInt(a.id, 10),
			a.code, a.kind, a.owner, a.purpose, a.cur, neg}, "|")))
		return h[:]
	}
	prev := map[int64][]byte{}
	for id, a := range accounts {
		switch a.version {
		case 1:
			prev[id] = []byte{}
			require.Nil(t, a.genesis, "v1 account %s has a genesis", a.code)
		case 2:
			prev[id] = genesis(a)
			require.Equal(t, prev[id], a.genesis, "genesis of %s", a.code)
		default:
			t.Fatalf("account %s: chain version %d", a.code, a.version)
		}
	}

	rows, err = db.Query(ctx, `SELECT p.account_id, p.seq, p.transaction_id, p.leg, trim_scale(p.amount)::text,
		p.currency, trim_scale(p.balance_after)::text, (extract(epoch FROM p.posted_at) * 1000000)::bigint, p.hash,
		t.cause_kind, coalesce(t.reverses_id, 0), t.cause_id, t.idempotency_key
		FROM ledger_postings p JOIN ledger_transactions t ON t.id = p.transaction_id
		ORDER BY p.account_id, p.seq`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var (
			acc, seq, tx, micros, reverses       int64
			leg                                  int
			amount, cur, after, kind, cause, key string
			stored                               []byte
		)
		require.NoError(t, rows.Scan(&acc, &seq, &tx, &leg, &amount, &cur, &after, &micros, &stored,
			&kind, &reverses, &cause, &key))
		a := accounts[acc]
		require.NotNil(t, a, "posting of unknown account %d", acc)
		fields := []string{"saldo-ledger-posting-v1", strconv.FormatInt(acc, 10), strconv.FormatInt(seq, 10),
			strconv.FormatInt(tx, 10), strconv.Itoa(leg), amount, cur, after, strconv.FormatInt(micros, 10)}
		if a.version == 2 {
			fields[0] = "saldo-ledger-posting-v2"
			fields = append(fields, kind, strconv.FormatInt(reverses, 10),
				strconv.Itoa(utf8.RuneCountInString(cause)), cause, strconv.Itoa(utf8.RuneCountInString(key)), key)
		}
		h := sha256.Sum256(append([]byte(strings.Join(fields, "|")), prev[acc]...))
		require.True(t, bytes.Equal(h[:], stored), "account %s seq %d (v%d): stored hash is not the documented one",
			a.code, seq, a.version)
		prev[acc] = h[:]
	}
	require.NoError(t, rows.Err())
	for id, a := range accounts {
		require.Equal(t, prev[id], a.head, "head of %s", a.code)
	}
	return versions
}

// chainPosts posts through every write path: ledger_post's one statement
// (two legs by code, and by id), ledger_post_general (three legs, one
// account twice; a reversal; free text holding '|' and non-ASCII), and
// ledger_post_batch (PostMany in a transaction, and a Poster's group
// commit), between the accounts given.
func chainPosts(t *testing.T, ctx context.Context, f fixture, prefix string, a, b, c ledger.Account) {
	t.Helper()
	one, err := ledger.Post(ctx, f.pool, transfer(prefix+"one", a.Code, b.Code, "1.10"))
	require.NoError(t, err)
	_, err = ledger.Post(ctx, f.pool, ledger.TransactionInput{IdempotencyKey: prefix + "ids", CauseKind: "test", CauseID: prefix + "ids",
		Postings: []ledger.PostingInput{
			{AccountID: b.ID, Amount: dec("-0.10"), Currency: money.BRL},
			{AccountID: c.ID, Amount: dec("0.10"), Currency: money.BRL},
		}})
	require.NoError(t, err)
	_, err = ledger.Post(ctx, f.pool, ledger.TransactionInput{
		IdempotencyKey: prefix + "three|legs:é", CauseKind: "payout_reserve", CauseID: "po|1:ção",
		Postings: []ledger.PostingInput{
			{AccountCode: a.Code, Amount: dec("-2.00"), Currency: money.BRL},
			{AccountCode: b.Code, Amount: dec("1.50"), Currency: money.BRL},
			{AccountCode: c.Code, Amount: dec("0.25"), Currency: money.BRL},
			{AccountCode: b.Code, Amount: dec("0.25"), Currency: money.BRL},
		}})
	require.NoError(t, err)
	_, err = ledger.Reverse(ctx, f.pool, one.ID, prefix+"reverse-one", "test")
	require.NoError(t, err)

	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = ledger.PostMany(ctx, tx, []ledger.TransactionInput{
		transfer(prefix+"many-1", a.Code, b.Code, "0.30"),
		transfer(prefix+"many-2", b.Code, c.Code, "0.20"),
		transfer(prefix+"many-3", a.Code, c.Code, "0.05"),
	})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	poster := ledger.NewPoster(f.pool, ledger.PosterOptions{MaxBatch: 8, Flushers: 1})
	defer poster.Close()
	done := make(chan error, 6)
	for i := range 6 {
		from, to := a, c
		if i%2 == 1 {
			from, to = c, b
		}
		go func() {
			_, err := poster.Post(ctx, transfer(fmt.Sprintf("%sposter|%d", prefix, i), from.Code, to.Code, "0.01"))
			done <- err
		}()
	}
	for range 6 {
		require.NoError(t, <-done)
	}
	require.Positive(t, poster.Stats().SetBased, "the Poster's batches took ledger_post_batch")
}

// R22, R23 (migration 00108): accounts opened now chain v2, and every write
// path produces the documented v2 hashes: the transaction's cause, reversed
// transaction and key are covered, the chain starts at the account's
// genesis, and Verify is clean.
func TestChainV2WritePathsProduceTheDocumentedHashes_R22_R23(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "50.00")
	b := f.merchant(t, ctx, "b", "5.00")
	c, err := ledger.EnsureAccount(ctx, f.pool, ledger.PlatformSuspense(money.BRL))
	require.NoError(t, err)
	empty, err := ledger.EnsureAccount(ctx, f.pool, ledger.MerchantReserved("a", money.BRL))
	require.NoError(t, err)
	chainPosts(t, ctx, f, "", a, b, c)

	versions := chainReplay(t, ctx, f.pool)
	for code, v := range versions {
		require.Equal(t, 2, v, code)
	}
	require.Contains(t, versions, empty.Code) // no posting: its head is its genesis
	requireClean(t, ctx, f.pool)
}

// asV1 turns freshly opened accounts (no postings yet) into what accounts
// opened before migration 00108 are: chain version 1, no genesis, an empty
// head. Written as a superuser with triggers off: the version is part of
// the identity, which nobody may change.
func asV1(t *testing.T, ctx context.Context, f fixture, codes ...string) {
	t.Helper()
	admin, err := pgx.Connect(ctx, testdb.AdminURL(t, f.pool))
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `SET session_replication_role = replica`)
	require.NoError(t, err)
	tag, err := admin.Exec(ctx, `UPDATE ledger_accounts SET chain_version = 1, chain_genesis = NULL, last_hash = '\x'
		WHERE code = ANY ($1) AND last_seq = 0`, codes)
	require.NoError(t, err)
	require.EqualValues(t, len(codes), tag.RowsAffected())
}

// R22, R23 (migration 00108): an account opened before 00108 stays v1 for
// ever: every write path keeps hashing its postings the v1 way, from the
// empty string, also in transactions and batches that touch v2 accounts,
// and Verify replays both kinds clean.
func TestChainV1AccountsStayV1OnEveryWritePath_R22_R23(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	for _, id := range []string{"a", "b", "d"} {
		_, err := ledger.EnsureAccount(ctx, f.pool, ledger.MerchantAvailable(id, money.BRL))
		require.NoError(t, err)
	}
	asV1(t, ctx, f, f.funding.Code, "merchant/a/available/BRL", "merchant/b/available/BRL", "merchant/d/available/BRL")
	a := f.merchant(t, ctx, "a", "50.00")
	b := f.merchant(t, ctx, "b", "5.00")
	d := f.merchant(t, ctx, "d", "5.00")
	c := f.merchant(t, ctx, "c", "5.00") // v2, funded from the v1 funding account
	chainPosts(t, ctx, f, "v1-", a, b, d)
	chainPosts(t, ctx, f, "mixed-", a, c, b)

	versions := chainReplay(t, ctx, f.pool)
	for _, code := range []string{f.funding.Code, a.Code, b.Code, d.Code} {
		require.Equal(t, 1, versions[code], code)
	}
	require.Equal(t, 2, versions[c.Code])
	requireClean(t, ctx, f.pool)
}

// R22: the application cannot choose an account's chain (it may insert the
// identity columns only, migrations.GrantApplicationRole), and neither can
// the tables' owner through the triggers: a new account is v2 with the
// ledger's genesis, and the version and genesis never change afterwards.
func TestChainVersionAndGenesisAreTheLedgers_R22(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	owner, err := pgx.Connect(ctx, testdb.OwnerURL(t, f.pool))
	require.NoError(t, err)
	defer owner.Close(ctx)
	for _, q := range []string{
		`INSERT INTO ledger_accounts (code, owner_kind, owner_id, purpose, currency, allow_negative, chain_version)
		 VALUES ('merchant/x/available/BRL', 'merchant', 'x', 'available', 'BRL', false, 1)`,
		`INSERT INTO ledger_accounts (code, owner_kind, owner_id, purpose, currency, allow_negative, chain_genesis)
		 VALUES ('merchant/x/available/BRL', 'merchant', 'x', 'available', 'BRL', false, '\x00')`,
		`INSERT INTO ledger_accounts (code, owner_kind, owner_id, purpose, currency, allow_negative, last_hash)
		 VALUES ('merchant/x/available/BRL', 'merchant', 'x', 'available', 'BRL', false, '\x00')`,
	} {
		_, err := owner.Exec(ctx, q)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, q)
		require.Equal(t, "ledger_accounts_valid", pgErr.ConstraintName, "%s: %v", q, err)
	}
	for _, q := range []string{
		`UPDATE ledger_accounts SET chain_version = 1 WHERE id = $1`,
		`UPDATE ledger_accounts SET chain_genesis = sha256('x') WHERE id = $1`,
	} {
		_, err := owner.Exec(ctx, q, f.funding.ID)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, q)
		require.Equal(t, "23001", pgErr.Code, "%s: %v", q, err) // restrict_violation: identity fixed
	}
	var version int
	var genesis, head []byte
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT chain_version, chain_genesis, last_hash FROM ledger_accounts WHERE id = $1`,
		f.funding.ID).Scan(&version, &genesis, &head))
	require.Equal(t, 2, version)
	require.Len(t, genesis, 32)
	require.Equal(t, genesis, head)
	chainReplay(t, ctx, f.pool)
}

// R22, R23 (migration 00108): on v2 accounts, what the v1 chain left out is
// now tamper-evident. Each case is written as a superuser with triggers off
// (someone who can bypass the append-only triggers) and keeps every other
// invariant true: balances, sums, sequences and the stored hashes are left
// as they were; with the v1 chain each went unreported.
func TestChainV2ReportsReattributionAndIdentityChanges_R22_R23(t *testing.T) {
	t.Parallel()

	history := func(t *testing.T) (context.Context, fixture, *pgx.Conn, ledger.Account, ledger.Account) {
		ctx, f := setup(t)
		a := f.merchant(t, ctx, "a", "50.00")
		b := f.merchant(t, ctx, "b", "5.00")
		for i := range 3 {
			_, err := ledger.Post(ctx, f.pool, transfer(fmt.Sprintf("h%d", i), a.Code, b.Code, "1.25"))
			require.NoError(t, err)
		}
		// A key holding '|', as a client's Idempotency-Key may.
		_, err := ledger.Post(ctx, f.pool, ledger.TransactionInput{IdempotencyKey: "funding:m|k", CauseKind: "funding",
			CauseID: "c", Postings: []ledger.PostingInput{
				{AccountCode: f.funding.Code, Amount: dec("-1.00"), Currency: money.BRL},
				{AccountCode: a.Code, Amount: dec("1.00"), Currency: money.BRL},
			}})
		require.NoError(t, err)
		requireClean(t, ctx, f.pool)
		admin, err := pgx.Connect(ctx, testdb.AdminURL(t, f.pool))
		require.NoError(t, err)
		t.Cleanup(func() { admin.Close(context.Background()) })
		_, err = admin.Exec(ctx, `SET session_replication_role = replica`)
		require.NoError(t, err)
		return ctx, f, admin, a, b
	}
	exec := func(t *testing.T, c *pgx.Conn, sql string, args ...any) {
		t.Helper()
		tag, err := c.Exec(context.Background(), sql, args...)
		require.NoError(t, err, sql)
		require.Positive(t, tag.RowsAffected(), sql)
	}
	expect := func(t *testing.T, ctx context.Context, db ledger.DBTX, want map[ledger.ViolationKind]int64) ledger.Report {
		t.Helper()
		rep, err := ledger.Verify(ctx, db)
		require.NoError(t, err)
		for _, k := range ledger.AllViolationKinds {
			require.Equal(t, want[k], rep.Counts[k], "%s: %v", k, rep.Violations)
		}
		return rep
	}

	t.Run("cause re-attributed", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, _, _ := history(t)
		exec(t, admin, `UPDATE ledger_transactions SET cause_id = 'another payout' WHERE idempotency_key = 'h1'`)
		rep := expect(t, ctx, f.pool, map[ledger.ViolationKind]int64{ledger.ViolationHashChain: 2}) // both legs
		require.Contains(t, rep.Violations[0].Detail, "cause")
	})

	t.Run("cause kind changed", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, _, _ := history(t)
		exec(t, admin, `UPDATE ledger_transactions SET cause_kind = 'refund' WHERE idempotency_key = 'h1'`)
		expect(t, ctx, f.pool, map[ledger.ViolationKind]int64{ledger.ViolationHashChain: 2})
	})

	t.Run("key changed", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, _, _ := history(t)
		exec(t, admin, `UPDATE ledger_transactions SET idempotency_key = 'payout_reserve:other' WHERE idempotency_key = 'h2'`)
		expect(t, ctx, f.pool, map[ledger.ViolationKind]int64{ledger.ViolationHashChain: 2})
	})

	t.Run("separator moved between cause and key", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, _, _ := history(t)
		// cause "c", key "funding:m|k" becomes cause "c|funding:m", key
		// "k": the same text joined by '|', told apart by the lengths.
		exec(t, admin, `UPDATE ledger_transactions SET cause_id = 'c|funding:m', idempotency_key = 'k'
			WHERE idempotency_key = 'funding:m|k'`)
		expect(t, ctx, f.pool, map[ledger.ViolationKind]int64{ledger.ViolationHashChain: 2})
	})

	t.Run("reversal re-pointed", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, _, _ := history(t)
		var h0, h1 int64
		require.NoError(t, f.pool.QueryRow(ctx, `SELECT (SELECT id FROM ledger_transactions WHERE idempotency_key = 'h0'),
			(SELECT id FROM ledger_transactions WHERE idempotency_key = 'h1')`).Scan(&h0, &h1))
		_, err := ledger.Reverse(ctx, f.pool, h0, "undo-h0", "test")
		require.NoError(t, err)
		exec(t, admin, `UPDATE ledger_transactions SET reverses_id = $1, cause_id = $2 WHERE idempotency_key = 'undo-h0'`,
			h1, strconv.FormatInt(h1, 10))
		expect(t, ctx, f.pool, map[ledger.ViolationKind]int64{ledger.ViolationHashChain: 2})
	})

	t.Run("two accounts' codes and owners swapped", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, a, b := history(t)
		// a's postings become b's and the other way round: every amount,
		// balance and sequence stays consistent.
		exec(t, admin, `UPDATE ledger_accounts SET code = 'tmp' WHERE id = $1`, a.ID)
		exec(t, admin, `UPDATE ledger_accounts SET code = $1, owner_id = 'a' WHERE id = $2`, a.Code, b.ID)
		exec(t, admin, `UPDATE ledger_accounts SET code = $1, owner_id = 'b' WHERE id = $2`, b.Code, a.ID)
		rep := expect(t, ctx, f.pool, map[ledger.ViolationKind]int64{
			ledger.ViolationChainGenesis: 2, // each identity no longer hashes to its genesis
			ledger.ViolationHashChain:    2, // each first posting chained to the old genesis
		})
		for _, v := range rep.Violations {
			if v.Kind == ledger.ViolationHashChain {
				require.EqualValues(t, 1, v.Seq)
			}
		}
	})

	t.Run("allow_negative flipped on an account without postings", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, _, _ := history(t)
		s, err := ledger.EnsureAccount(ctx, f.pool, ledger.PlatformSuspense(money.BRL))
		require.NoError(t, err)
		exec(t, admin, `UPDATE ledger_accounts SET allow_negative = NOT allow_negative WHERE id = $1`, s.ID)
		expect(t, ctx, f.pool, map[ledger.ViolationKind]int64{
			ledger.ViolationChainGenesis: 1,
			ledger.ViolationChainHead:    1, // its head is its genesis, no longer its identity's
		})
	})

	t.Run("genesis tampered", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, a, _ := history(t)
		exec(t, admin, `UPDATE ledger_accounts SET chain_genesis = sha256(chain_genesis) WHERE id = $1`, a.ID)
		rep := expect(t, ctx, f.pool, map[ledger.ViolationKind]int64{ledger.ViolationChainGenesis: 1})
		require.Equal(t, a.Code, rep.Violations[0].AccountCode)
	})

	t.Run("turned v1", func(t *testing.T) {
		t.Parallel()
		ctx, f, admin, a, _ := history(t)
		exec(t, admin, `UPDATE ledger_accounts SET chain_version = 1 WHERE id = $1`, a.ID)
		rep := expect(t, ctx, f.pool, map[ledger.ViolationKind]int64{
			ledger.ViolationChainGenesis: 1,
			ledger.ViolationHashChain:    5, // every posting of a, replayed as v1
		})
		require.Equal(t, a.Code, rep.Violations[len(rep.Violations)-1].AccountCode)
	})
}
