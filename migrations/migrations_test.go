package migrations_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"slices"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/migrations"
	"github.com/saldo/saldo/money"
)

// emptyDatabase creates an empty database (no template) and returns its URL.
func emptyDatabase(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	admin, err := testdb.ServerURL()
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "saldo_mig_" + hex.EncodeToString(b)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)")
		_ = conn.Close(context.Background())
	})
	u, err := url.Parse(admin)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

// Two processes running `saldo migrate` at once must both succeed and apply
// every migration exactly once; a third run applies nothing.
func TestUpConcurrentAndIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := emptyDatabase(t)

	var wg sync.WaitGroup
	results := make([]migrations.Result, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = migrations.Up(ctx, dbURL, nil)
		}()
	}
	wg.Wait()
	applied := 0
	for i := range results {
		require.NoError(t, errs[i])
		applied += len(results[i].SaldoApplied)
	}
	all, err := fsGlobCount()
	require.NoError(t, err)
	require.Equal(t, all, applied, "each saldo migration applied exactly once across concurrent runs")

	again, err := migrations.Up(ctx, dbURL, nil)
	require.NoError(t, err)
	require.Empty(t, again.SaldoApplied)
	require.Empty(t, again.RiverApplied)
}

func fsGlobCount() (int, error) {
	names, err := fs.Glob(migrations.FS(), "*.sql")
	return len(names), err
}

func TestHashIsStable(t *testing.T) {
	t.Parallel()
	require.Equal(t, migrations.Hash(), migrations.Hash())
	require.Len(t, migrations.Hash(), 16)
}

// Files are numbered by owning package, so a file added to an early range
// (00011, the ledger) after later ones were applied must still be applied:
// Up allows out-of-order files, and such files are re-runnable. Simulated by
// forgetting that 00011 was applied on a fully migrated database.
func TestUpAppliesAFileOutOfOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := emptyDatabase(t)
	_, err := migrations.Up(ctx, dbURL, nil)
	require.NoError(t, err)

	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	tag, err := conn.Exec(ctx, `DELETE FROM goose_db_version WHERE version_id = 11`)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	again, err := migrations.Up(ctx, dbURL, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"00011_ledger_checks_at_commit.sql"}, again.SaldoApplied)
}

// TestLedgerFunctionsKeepTheirSettings: the settings the ledger's functions
// run with (docs/pitfalls.md) survive every later migration. A CREATE OR
// REPLACE FUNCTION drops any SET clause it does not repeat: one that forgot
// jit = off left ledger_post_batch JIT-compiling on every call, 15 % more
// CPU per transfer in bench ledger, and no other test noticed.
func TestLedgerFunctionsKeepTheirSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	generic := []string{"ledger_post", "ledger_post_general", "ledger_post_batch", "ledger_statement_page"}
	writers := []string{"ledger_post", "ledger_post_general", "ledger_post_batch", "ledger_lock_accounts"}
	indexOnly := append([]string{"ledger_request_text", "ledger_lock_accounts"}, generic...)
	settings := map[string][]string{}
	definer := map[string]bool{}
	rows, err := pool.Query(ctx, `SELECT proname, coalesce(proconfig, '{}'), prosecdef FROM pg_proc
		WHERE proname LIKE 'ledger%' AND pronamespace = current_schema()::regnamespace`)
	require.NoError(t, err)
	for rows.Next() {
		var name string
		var config []string
		var secdef bool
		require.NoError(t, rows.Scan(&name, &config, &secdef))
		settings[name] = config
		definer[name] = secdef
	}
	require.NoError(t, rows.Err())
	for _, f := range indexOnly {
		require.Contains(t, settings, f)
		require.Contains(t, settings[f], "jit=off", f)
		require.Contains(t, settings[f], "enable_seqscan=off", f)
	}
	for _, f := range generic {
		require.Contains(t, settings[f], "plan_cache_mode=force_generic_plan", f)
	}
	// ledger_post's one statement joins two legs with two accounts: no hash
	// table allocated per call, no bitmap (00102, docs/pitfalls.md).
	for _, set := range []string{"enable_hashjoin=off", "enable_mergejoin=off", "enable_bitmapscan=off"} {
		require.Contains(t, settings["ledger_post"], set)
	}
	// The writers run as the ledger's owner with their search path pinned
	// (migrations 00100, 00102): the application role may not write the
	// tables.
	for _, f := range writers {
		require.True(t, definer[f], "%s must be SECURITY DEFINER", f)
		require.Contains(t, settings[f], "search_path=public, pg_temp", f)
	}
	for name, secdef := range definer {
		if !slices.Contains(writers, name) {
			require.False(t, secdef, "%s runs as its caller", name)
		}
	}
	// ... and are not PUBLIC's to call (00101): a role granted nothing
	// could otherwise move money through them.
	var public []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(array_agg(p.proname ORDER BY p.proname), '{}')
		FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
		WHERE p.proname = ANY ($1) AND p.pronamespace = current_schema()::regnamespace
		  AND a.grantee = 0 AND a.privilege_type = 'EXECUTE'`, writers).Scan(&public))
	require.Empty(t, public, "writers executable by PUBLIC")
}

// TestUpgradeTo00102KeepsTheApplicationRolePosting: 00102 renames 00100's
// ledger_post to ledger_post_general and creates a new ledger_post, whose
// EXECUTE right is not the one `saldo migrate --app-role` granted before.
// A deployment upgraded without granting again must keep posting: the
// migration gives the new function to whoever could call the old one, and
// to nobody else.
func TestUpgradeTo00102KeepsTheApplicationRolePosting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := emptyDatabase(t)

	before := fstest.MapFS{}
	names, err := fs.Glob(migrations.FS(), "*.sql")
	require.NoError(t, err)
	for _, n := range names {
		if n >= "00102" {
			continue
		}
		b, err := fs.ReadFile(migrations.FS(), n)
		require.NoError(t, err)
		before[n] = &fstest.MapFile{Data: b}
	}
	owner, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer owner.Close()
	rm, err := rivermigrate.New(riverpgxv5.New(owner), nil)
	require.NoError(t, err)
	_, err = rm.Migrate(ctx, rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	sqlDB, err := sql.Open("pgx", dbURL)
	require.NoError(t, err)
	defer sqlDB.Close()
	gp, err := goose.NewProvider(goose.DialectPostgres, sqlDB, before,
		goose.WithDisableGlobalRegistry(true), goose.WithAllowOutofOrder(true))
	require.NoError(t, err)
	_, err = gp.Up(ctx)
	require.NoError(t, err)
	appURL := testdb.AppURL(t, dbURL)
	require.NoError(t, migrations.GrantApplicationRole(ctx, dbURL, testdb.AppRole))

	res, err := migrations.Up(ctx, dbURL, nil)
	require.NoError(t, err)
	require.Contains(t, res.SaldoApplied, "00102_ledger_post_one_statement.sql")

	var callers []string
	require.NoError(t, owner.QueryRow(ctx, `SELECT coalesce(array_agg(CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END ORDER BY 1), '{}')
		FROM pg_proc p, aclexplode(p.proacl) a
		WHERE p.proname = 'ledger_post' AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner`).Scan(&callers))
	require.Equal(t, []string{testdb.AppRole}, callers)

	funding, err := ledger.EnsureAccount(ctx, owner, ledger.PlatformFunding(money.BRL))
	require.NoError(t, err)
	a, err := ledger.EnsureAccount(ctx, owner, ledger.MerchantAvailable("a", money.BRL))
	require.NoError(t, err)
	app, err := pgxpool.New(ctx, appURL)
	require.NoError(t, err)
	defer app.Close()
	tx, err := ledger.Post(ctx, app, ledger.TransactionInput{IdempotencyKey: "after-upgrade", CauseKind: "test", CauseID: "u",
		Postings: []ledger.PostingInput{
			{AccountID: funding.ID, Amount: decimal.RequireFromString("-5"), Currency: money.BRL},
			{AccountID: a.ID, Amount: decimal.RequireFromString("5"), Currency: money.BRL},
		}})
	require.NoError(t, err)
	require.Len(t, tx.Postings, 2)
	rep, err := ledger.Verify(ctx, app)
	require.NoError(t, err)
	require.True(t, rep.OK(), "verify: %v", rep.Violations)
}

// TestLedgerUpgradeKeepsReplays: a ledger written before migrations 00018
// (keys unique by a hash index) and 00019 (request_hash dropped) is
// upgraded with its history in place: every key posted before still
// replays to its transaction, through ledger_post and through a Poster's
// batch, and a changed request under an old key is still a conflict; the
// key stays unique and Verify is clean.
func TestLedgerUpgradeKeepsReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := emptyDatabase(t)

	// The ledger as it was before 00018: its own files up to 00017.
	old := fstest.MapFS{}
	names, err := fs.Glob(migrations.FS(), "0001[0-7]_*.sql")
	require.NoError(t, err)
	require.Len(t, names, 8)
	for _, n := range names {
		b, err := fs.ReadFile(migrations.FS(), n)
		require.NoError(t, err)
		old[n] = &fstest.MapFile{Data: b}
	}
	sqlDB, err := sql.Open("pgx", dbURL)
	require.NoError(t, err)
	defer sqlDB.Close()
	gp, err := goose.NewProvider(goose.DialectPostgres, sqlDB, old, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = gp.Up(ctx)
	require.NoError(t, err)

	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	var hasRequestHash bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_name = 'ledger_transactions' AND column_name = 'request_hash')`).Scan(&hasRequestHash))
	require.True(t, hasRequestHash, "the old schema")

	funding, err := ledger.EnsureAccount(ctx, pool, ledger.PlatformFunding(money.BRL))
	require.NoError(t, err)
	a, err := ledger.EnsureAccount(ctx, pool, ledger.MerchantAvailable("a", money.BRL))
	require.NoError(t, err)
	b, err := ledger.EnsureAccount(ctx, pool, ledger.MerchantAvailable("b", money.BRL))
	require.NoError(t, err)
	move := func(key, from, to, amount string) ledger.TransactionInput {
		d := decimal.RequireFromString(amount)
		return ledger.TransactionInput{IdempotencyKey: key, CauseKind: "test", CauseID: key,
			Postings: []ledger.PostingInput{
				{AccountCode: from, Amount: d.Neg(), Currency: money.BRL},
				{AccountCode: to, Amount: d, Currency: money.BRL},
			}}
	}
	fund, err := ledger.Post(ctx, pool, move("fund", funding.Code, a.Code, "100.00"))
	require.NoError(t, err)
	single, err := ledger.Post(ctx, pool, move("single", a.Code, b.Code, "10.00"))
	require.NoError(t, err)
	rev, err := ledger.Reverse(ctx, pool, single.ID, "single-rev", "")
	require.NoError(t, err)
	p := ledger.NewPoster(pool, ledger.PosterOptions{})
	batched := make([]ledger.Transaction, 4)
	var wg sync.WaitGroup
	for i := range batched {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tx, err := p.Post(ctx, move(fmt.Sprintf("batched-%d", i), a.Code, b.Code, "1.50"))
			assert.NoError(t, err)
			batched[i] = tx
		}()
	}
	wg.Wait()
	p.Close()

	_, err = migrations.Up(ctx, dbURL, nil)
	require.NoError(t, err)
	require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_name = 'ledger_transactions' AND column_name = 'request_hash')`).Scan(&hasRequestHash))
	require.False(t, hasRequestHash)
	var kind string
	require.NoError(t, pool.QueryRow(ctx, `SELECT contype::text FROM pg_constraint
		WHERE conname = 'ledger_transactions_idempotency_key'`).Scan(&kind))
	require.Equal(t, "x", kind, "an exclusion constraint")

	// A new pool: the old one's sessions cached the old functions' plans.
	pool.Close()
	pool, err = pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	for _, want := range []struct {
		in ledger.TransactionInput
		tx ledger.Transaction
	}{
		{move("fund", funding.Code, a.Code, "100.00"), fund},
		{move("single", a.Code, b.Code, "10.0"), single},
		{move("batched-0", a.Code, b.Code, "1.5"), batched[0]},
		{move("batched-3", a.Code, b.Code, "1.50"), batched[3]},
	} {
		again, err := ledger.Post(ctx, pool, want.in)
		require.NoError(t, err, want.in.IdempotencyKey)
		require.True(t, again.Replayed, want.in.IdempotencyKey)
		require.Equal(t, want.tx.ID, again.ID, want.in.IdempotencyKey)
		_, err = ledger.Post(ctx, pool, move(want.in.IdempotencyKey, a.Code, b.Code, "0.01"))
		require.ErrorIs(t, err, ledger.ErrIdempotencyConflict, want.in.IdempotencyKey)
	}
	again, err := ledger.Reverse(ctx, pool, single.ID, "single-rev", "retried")
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, rev.ID, again.ID)
	_, err = pool.Exec(ctx, `INSERT INTO ledger_transactions (idempotency_key, cause_kind, cause_id, effective_at, posted_at)
		VALUES ('batched-1', 'test', 'x', now(), now())`)
	require.ErrorContains(t, err, "ledger_transactions_idempotency_key")

	rep, err := ledger.Verify(ctx, pool)
	require.NoError(t, err)
	require.True(t, rep.OK(), "verify: %v", rep.Violations)
	pool.Close()
}

// R23, decision 0003: a role that may create objects in the ledger's schema
// could plant an operator the ledger's SECURITY DEFINER functions would run
// as the tables' owner (ledger TestApplicationRoleCannotPlantObjectsInTheLedgersSchema_R23).
// GrantApplicationRole and GrantReadOnlyRole revoke a direct grant, and
// refuse, naming the fix, a role that may still create there through
// PUBLIC (PostgreSQL 14 and older granted CREATE on public to PUBLIC, and
// pg_upgrade keeps it); once PUBLIC's grant is revoked they succeed.
func TestGrantRefusesARoleThatMayCreateInTheSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := emptyDatabase(t)
	_, err := migrations.Up(ctx, dbURL, nil)
	require.NoError(t, err)
	testdb.AppURL(t, dbURL) // the application role exists
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)

	_, err = conn.Exec(ctx, `GRANT CREATE ON SCHEMA public TO `+testdb.AppRole)
	require.NoError(t, err)
	require.NoError(t, migrations.GrantApplicationRole(ctx, dbURL, testdb.AppRole), "a direct grant is revoked")
	var create bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT has_schema_privilege($1, 'public', 'CREATE')`, testdb.AppRole).Scan(&create))
	require.False(t, create)

	_, err = conn.Exec(ctx, `GRANT CREATE ON SCHEMA public TO PUBLIC`)
	require.NoError(t, err)
	err = migrations.GrantApplicationRole(ctx, dbURL, testdb.AppRole)
	require.ErrorContains(t, err, "may create objects in schema public")
	require.ErrorContains(t, err, `REVOKE CREATE ON SCHEMA "public" FROM PUBLIC`)
	require.ErrorContains(t, migrations.GrantReadOnlyRole(ctx, dbURL, testdb.AppRole), "may create objects in schema public")

	_, err = conn.Exec(ctx, `REVOKE CREATE ON SCHEMA public FROM PUBLIC`)
	require.NoError(t, err)
	require.NoError(t, migrations.GrantApplicationRole(ctx, dbURL, testdb.AppRole))
}

// R16: provider_identities.fingerprint_key is the key of the HMAC of a
// provider secret in the row's fingerprint. A read-only role granted
// before 00110 (SELECT on the whole table) loses the key with the upgrade,
// without a re-grant, and keeps the other columns; so does PUBLIC, had
// someone granted it the table. The application role keeps everything.
// GrantReadOnlyRole then gives the other columns only, and refuses while
// the key is still readable to the role (through PUBLIC).
func TestUpgradeTo00110TakesTheFingerprintKeyFromReaders_R16(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	adminURL, err := testdb.ServerURL()
	require.NoError(t, err)
	admin, err := pgx.Connect(ctx, adminURL)
	require.NoError(t, err)
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	reader := "saldo_mig_reader_" + hex.EncodeToString(b)
	_, err = admin.Exec(ctx, "CREATE ROLE "+reader)
	require.NoError(t, err)
	// Registered before the database's, so run after it is dropped.
	t.Cleanup(func() {
		_, err := admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+reader)
		assert.NoError(t, err)
		_ = admin.Close(context.Background())
	})
	dbURL := emptyDatabase(t)

	before := fstest.MapFS{}
	names, err := fs.Glob(migrations.FS(), "*.sql")
	require.NoError(t, err)
	for _, n := range names {
		if n >= "00110" {
			continue
		}
		b, err := fs.ReadFile(migrations.FS(), n)
		require.NoError(t, err)
		before[n] = &fstest.MapFile{Data: b}
	}
	owner, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer owner.Close()
	rm, err := rivermigrate.New(riverpgxv5.New(owner), nil)
	require.NoError(t, err)
	_, err = rm.Migrate(ctx, rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	sqlDB, err := sql.Open("pgx", dbURL)
	require.NoError(t, err)
	defer sqlDB.Close()
	gp, err := goose.NewProvider(goose.DialectPostgres, sqlDB, before,
		goose.WithDisableGlobalRegistry(true), goose.WithAllowOutofOrder(true))
	require.NoError(t, err)
	_, err = gp.Up(ctx)
	require.NoError(t, err)
	testdb.AppURL(t, dbURL) // the application role exists
	require.NoError(t, migrations.GrantApplicationRole(ctx, dbURL, testdb.AppRole))
	// As GrantReadOnlyRole granted before 00110, and a stray PUBLIC grant.
	_, err = owner.Exec(ctx, `GRANT SELECT ON ALL TABLES IN SCHEMA public TO `+reader)
	require.NoError(t, err)
	_, err = owner.Exec(ctx, `GRANT SELECT ON provider_identities TO PUBLIC`)
	require.NoError(t, err)

	may := func(role, col string) bool {
		t.Helper()
		var ok bool
		require.NoError(t, owner.QueryRow(ctx, `SELECT has_column_privilege($1, 'provider_identities', $2, 'SELECT')`,
			role, col).Scan(&ok))
		return ok
	}
	require.True(t, may(reader, "fingerprint_key"), "the grant before 00110")

	res, err := migrations.Up(ctx, dbURL, nil)
	require.NoError(t, err)
	require.Contains(t, res.SaldoApplied, "00110_provider_identities_key_not_readers.sql")
	cols := []string{"name", "account", "fingerprint", "recorded_at", "confirmed_at", "fingerprint_at"}
	for _, c := range cols {
		require.True(t, may(reader, c), c)
	}
	require.False(t, may(reader, "fingerprint_key"))
	var public bool
	require.NoError(t, owner.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_class c, aclexplode(c.relacl) a
		WHERE c.oid = 'provider_identities'::regclass AND a.grantee = 0 AND a.privilege_type = 'SELECT')`).Scan(&public))
	require.False(t, public, "PUBLIC's table-wide SELECT is gone")
	for _, c := range append(cols, "fingerprint_key") {
		require.True(t, may(testdb.AppRole, c), c)
	}

	// A re-grant keeps the key hidden; PUBLIC holding it again is refused.
	require.NoError(t, migrations.GrantReadOnlyRole(ctx, dbURL, reader))
	require.False(t, may(reader, "fingerprint_key"))
	require.True(t, may(reader, "fingerprint"))
	_, err = owner.Exec(ctx, `GRANT SELECT ON provider_identities TO PUBLIC`)
	require.NoError(t, err)
	err = migrations.GrantReadOnlyRole(ctx, dbURL, reader)
	require.ErrorContains(t, err, "may still read provider_identities.fingerprint_key")
	_, err = owner.Exec(ctx, `REVOKE SELECT ON provider_identities FROM PUBLIC`)
	require.NoError(t, err)
	require.NoError(t, migrations.GrantReadOnlyRole(ctx, dbURL, reader))
}
