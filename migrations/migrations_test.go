package migrations_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"net/url"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/migrations"
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
	generic := []string{"ledger_post", "ledger_post_batch", "ledger_check_transaction", "ledger_statement_page"}
	indexOnly := append([]string{"ledger_check_postings", "ledger_check_new_transactions", "ledger_request_text"}, generic...)
	settings := map[string][]string{}
	rows, err := pool.Query(ctx, `SELECT proname, coalesce(proconfig, '{}') FROM pg_proc
		WHERE proname LIKE 'ledger%' AND pronamespace = current_schema()::regnamespace`)
	require.NoError(t, err)
	for rows.Next() {
		var name string
		var config []string
		require.NoError(t, rows.Scan(&name, &config))
		settings[name] = config
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
}
