package pgcluster_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	// The server runs with the allocator settings, which its backends
	// inherit: read from the postmaster's environment (a backend's own
	// /proc environ holds its process title instead).
	pidFile, err := os.ReadFile(filepath.Join(c.Dir, "data", "postmaster.pid"))
	require.NoError(t, err)
	environ, err := os.ReadFile("/proc/" + strings.SplitN(string(pidFile), "\n", 2)[0] + "/environ")
	require.NoError(t, err)
	for _, kv := range pgcluster.ServerEnv {
		require.Contains(t, strings.Split(string(environ), "\x00"), kv)
	}
	require.NoError(t, conn.Close(ctx))

	// Reuse finds the running cluster in the same directory.
	again, err := pgcluster.Start(ctx, pgcluster.Options{Dir: c.Dir, Reuse: true})
	require.NoError(t, err)
	require.Equal(t, c.Port, again.Port)
}

// TestReplicaStreamsFromPrimary makes a real streaming replica of a cluster
// of its own (pg_basebackup -R, as the postgres user when root): a row
// committed on the primary appears on the replica, the replica is a hot
// standby that refuses writes (Options.Settings reach the primary), it catches up after a restart, and Remove
// drops its replication slot on the primary.
func TestReplicaStreamsFromPrimary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, err := pgcluster.Start(ctx, pgcluster.Options{Settings: []string{"synchronous_commit=on"}})
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Remove()) }()
	pc, err := pgx.Connect(ctx, p.URL("postgres"))
	require.NoError(t, err)
	defer pc.Close(ctx)
	var syncCommit string
	require.NoError(t, pc.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&syncCommit))
	require.Equal(t, "on", syncCommit, "Options.Settings override the defaults")
	_, err = pgcluster.Start(ctx, pgcluster.Options{Settings: []string{"work_mem = 1MB"}})
	require.Error(t, err, "a setting with a space is refused")
	_, err = pc.Exec(ctx, `CREATE TABLE t (v int); INSERT INTO t VALUES (1)`)
	require.NoError(t, err)

	r, err := p.StartReplica(ctx, pgcluster.ReplicaOptions{})
	require.NoError(t, err)
	require.True(t, r.IsReplica())
	require.NotEqual(t, p.Port, r.Port)
	rc, err := pgx.Connect(ctx, r.URL("postgres"))
	require.NoError(t, err)
	var inRecovery bool
	require.NoError(t, rc.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&inRecovery))
	require.True(t, inRecovery, "the replica is a standby")
	_, err = rc.Exec(ctx, `INSERT INTO t VALUES (2)`)
	require.Error(t, err, "a hot standby refuses writes")

	sumOn := func(c *pgx.Conn) int {
		var n int
		require.NoError(t, c.QueryRow(ctx, `SELECT coalesce(sum(v), 0) FROM t`).Scan(&n))
		return n
	}
	require.Equal(t, 1, sumOn(rc), "the base backup holds the row")
	_, err = pc.Exec(ctx, `INSERT INTO t VALUES (10)`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return sumOn(rc) == 11 }, 30*time.Second, 20*time.Millisecond,
		"a row committed on the primary streams to the replica")
	require.NoError(t, rc.Close(ctx))

	// Stopped, the primary keeps its WAL (the slot); restarted, it catches up.
	require.NoError(t, r.Stop())
	require.False(t, r.Running())
	_, err = pc.Exec(ctx, `INSERT INTO t VALUES (100)`)
	require.NoError(t, err)
	require.NoError(t, r.Restart(ctx))
	rc, err = pgx.Connect(ctx, r.URL("postgres"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return sumOn(rc) == 111 }, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, rc.Close(ctx))

	require.NoError(t, r.Remove())
	var slots int
	require.NoError(t, pc.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots`).Scan(&slots))
	require.Zero(t, slots, "Remove dropped the replica's slot")
}
