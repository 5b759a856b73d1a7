package pgcluster_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/pgcluster"
)

// TestStartFromLocalBinaries starts a real cluster from the local binaries
// (as the postgres user when root), connects, and removes it. It fails, not
// skips, when no binaries exist: the brief requires them on dev machines.
func TestStartFromLocalBinaries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Remove()) }()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
	require.Equal(t, 1, one)
	require.NoError(t, conn.Close(ctx))

	// Reuse finds the running cluster in the same directory.
	again, err := pgcluster.Start(ctx, pgcluster.Options{Dir: c.Dir, Reuse: true})
	require.NoError(t, err)
	require.Equal(t, c.Port, again.Port)
}
