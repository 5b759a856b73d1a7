package testdb_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
)

func TestNewGivesIsolatedMigratedDatabases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := testdb.New(t), testdb.New(t)
	require.NotEqual(t, a.Config().ConnConfig.Database, b.Config().ConnConfig.Database)

	// Migrated: saldo's and River's tables exist.
	for _, table := range []string{"merchants", "river_job"} {
		var ok bool
		require.NoError(t, a.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&ok))
		require.True(t, ok, "table %s missing", table)
	}
	// Isolated: a row in one is not in the other.
	_, err := a.Exec(ctx, "INSERT INTO merchants (id, name) VALUES ('m_1', 'one')")
	require.NoError(t, err)
	var n int
	require.NoError(t, b.QueryRow(ctx, "SELECT count(*) FROM merchants").Scan(&n))
	require.Zero(t, n)

	// The app role is not a superuser; AdminURL is.
	var super bool
	require.NoError(t, a.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super))
	require.False(t, super)
	conn, err := pgx.Connect(ctx, testdb.AdminURL(t, a))
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.NoError(t, conn.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super))
	require.True(t, super)
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM merchants").Scan(&n))
	require.Equal(t, 1, n)
}
