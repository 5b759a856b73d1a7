package replica_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/replica"
)

// TestIdlePrimaryAfterSegmentSwitch: after a WAL segment switch
// (archive_timeout, pg_switch_wal) an idle primary's insert position sits
// just past the new segment's page header, a position no WAL record will
// ever end at; the replica has replayed everything there is and must be
// read with a small lag, not left as lagging until the next write.
func TestIdlePrimaryAfterSegmentSwitch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rc := startReplicated(t, nil, false)
	pool, rpool := rc.pool, rc.rpool

	_, err := pool.Exec(ctx, `CREATE TABLE w (x int); INSERT INTO w VALUES (1)`)
	require.NoError(t, err)
	var insertLSN, segOffset int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_switch_wal() IS NOT NULL`).Scan(new(bool)))
	require.NoError(t, pool.QueryRow(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint,
		(pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint % (SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size')`).
		Scan(&insertLSN, &segOffset))
	t.Logf("insert position after the switch: %d, %d bytes into its segment", insertLSN, segOffset)
	var replay int64
	require.Eventually(t, func() bool {
		require.NoError(t, rpool.QueryRow(ctx, `SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&replay))
		return replay >= insertLSN-segOffset
	}, 30*time.Second, 10*time.Millisecond, "the replica replays the switch")
	t.Logf("replica replayed up to %d", replay)

	const maxLag = 500 * time.Millisecond
	reads, err := replica.New(replica.Config{Primary: pool, Replica: rpool, MaxLag: maxLag, Interval: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(reads.Close)
	// Idle for several MaxLags, then the lag is small. (Without the fix it
	// grows without end from the last sample before the switch, so waiting
	// for it to come down fails; with it, a measurement delayed on a busy
	// machine only delays the wait.)
	time.Sleep(4 * maxLag)
	var now int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&now))
	if now != insertLSN {
		t.Logf("the primary wrote WAL meanwhile (%d -> %d): the idle case was not held", insertLSN, now)
	}
	require.Eventually(t, func() bool {
		lag, ok := reads.Lag()
		return ok && lag < maxLag
	}, 10*time.Second, 10*time.Millisecond,
		"an idle replica that replayed everything is read with a lag under the bound (insert position %d, replayed %d)", insertLSN, replay)
}
