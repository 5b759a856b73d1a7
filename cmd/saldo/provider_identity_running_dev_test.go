package main

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
)

// R4, R8, R16: two `saldo dev` on one outside database (SALDO_DATABASE_URL,
// shared by two terminals or two developers). The first runs against its
// embedded sim A and keeps sending under the name "sim". The second
// re-points "sim" at its own embedded sim B by itself (dev always passes
// --accept-provider-identity sim on an outside database) while the first is
// still running: nothing open at that instant, so it is accepted. From then
// on both run under one name for two PSPs, sharing one River queue: an
// attempt the first sent to A is looked up (or executed) by the second at
// B, reads "not found", fails, and the retry pays again. The identity
// check's promise (one name, one account) holds only at start; dev's
// automatic re-point must not happen while another process configured for
// the recorded account is alive: every process holds its names
// (providerNameLocks) and a re-point needs them exclusively. Before, the
// second dev re-pointed under the running first (found by review).
func TestDevNeverRepointsUnderARunningDev_R16(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	dbURL := testdb.NewURL(t)

	first, ok := startDevOn(t, bin, dbURL)
	require.True(t, ok, "first dev starts:\n%s", first.stderr.String())
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	defer pool.Close()
	var accountA string
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT account FROM provider_identities WHERE name = 'sim'`).Scan(&accountA))

	second, ok := startDevOn(t, bin, dbURL)
	var accountNow string
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT account FROM provider_identities WHERE name = 'sim'`).Scan(&accountNow))
	select {
	case <-first.done:
		t.Fatalf("first dev stopped:\n%s", first.stderr.String())
	default:
	}
	require.False(t, ok, "a second saldo dev re-pointed \"sim\" from %q to %q while the first, configured for %q, "+
		"still runs and sends under that name:\n%s", accountA, accountNow, accountA, second.stderr.String())
	require.Equal(t, accountA, accountNow, "the recorded account changed under a running process")
}
