package ledger_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"io/fs"
	"net/url"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/migrations"
	"github.com/saldo/saldo/money"
)

// migratedBefore makes a database of its own (dropped when t ends) migrated
// with River's migrations and saldo's files numbered below before, as a
// deployment that has not yet run the newer files; a pool on it as the
// owner.
func migratedBefore(t *testing.T, before string) (string, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	admin, err := testdb.ServerURL()
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "saldo_chain_" + hex.EncodeToString(b)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	u, err := url.Parse(admin)
	require.NoError(t, err)
	u.Path = "/" + name
	dbURL := u.String()
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() {
		pool.Close()
		_, _ = conn.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)")
		_ = conn.Close(context.Background())
	})

	files := fstest.MapFS{}
	names, err := fs.Glob(migrations.FS(), "*.sql")
	require.NoError(t, err)
	for _, n := range names {
		if n >= before {
			continue
		}
		b, err := fs.ReadFile(migrations.FS(), n)
		require.NoError(t, err)
		files[n] = &fstest.MapFile{Data: b}
	}
	rm, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	require.NoError(t, err)
	_, err = rm.Migrate(ctx, rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	sqlDB, err := sql.Open("pgx", dbURL)
	require.NoError(t, err)
	defer sqlDB.Close()
	gp, err := goose.NewProvider(goose.DialectPostgres, sqlDB, files,
		goose.WithDisableGlobalRegistry(true), goose.WithAllowOutofOrder(true))
	require.NoError(t, err)
	_, err = gp.Up(ctx)
	require.NoError(t, err)
	return dbURL, pool
}

// R22, R23: a ledger written before migration 00108 keeps its v1 chains
// through the upgrade, untouched, and its accounts keep chaining v1 on
// every write path afterwards; accounts opened after it chain v2, also in
// transactions shared with the old ones; Verify and the Go replay of the
// documented formats are clean throughout.
func TestChainUpgradeKeepsOldAccountsV1_R22_R23(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, pool := migratedBefore(t, "00108")
	f := fixture{pool: pool}
	var err error
	f.funding, err = ledger.EnsureAccount(ctx, pool, ledger.PlatformFunding(money.BRL))
	require.NoError(t, err)
	a := f.merchant(t, ctx, "a", "80.00")
	b := f.merchant(t, ctx, "b", "10.00")
	d := f.merchant(t, ctx, "d", "10.00")
	chainPosts(t, ctx, f, "before-", a, b, d)
	var heads []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT string_agg(last_hash, '' ORDER BY id) FROM ledger_accounts`).Scan(&heads))

	res, err := migrations.Up(ctx, dbURL, nil)
	require.NoError(t, err)
	require.Contains(t, res.SaldoApplied, "00108_ledger_chain_v2.sql")
	var after []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT string_agg(last_hash, '' ORDER BY id) FROM ledger_accounts`).Scan(&after))
	require.Equal(t, heads, after, "the upgrade rewrote no chain")
	versions := chainReplay(t, ctx, pool)
	require.Len(t, versions, 4)
	for code, v := range versions {
		require.Equal(t, 1, v, code)
	}
	requireClean(t, ctx, pool)

	c := f.merchant(t, ctx, "c", "10.00")
	chainPosts(t, ctx, f, "after-", a, b, d)
	chainPosts(t, ctx, f, "mixed-", a, c, b)
	versions = chainReplay(t, ctx, pool)
	for _, code := range []string{f.funding.Code, a.Code, b.Code, d.Code} {
		require.Equal(t, 1, versions[code], code)
	}
	require.Equal(t, 2, versions[c.Code])
	requireClean(t, ctx, pool)
}
