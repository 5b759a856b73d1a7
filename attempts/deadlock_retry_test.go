package attempts

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/dbfault"
)

// R6, R9, R22: a divergence locks its payout's row after its attempt, then
// holds the payout's unsent siblings again; a transaction that locked such
// a sibling in that instant and waits for the payout's row is a deadlock,
// which PostgreSQL breaks by aborting one side (40P01). An attempts
// transaction so aborted runs again (runTx): its caller (a provider's
// webhook, a job, an operator) gets its answer, not the deadlock's error.
// Here the cycle is two advisory locks taken in opposite orders.
func TestDeadlockVictimRunsAgain_R6_R9_R22(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	waiters := func() int {
		var n int
		_ = h.pool.QueryRow(h.ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock'`).Scan(&n)
		return n
	}
	// Which side PostgreSQL aborts is its choice: rounds until it chose
	// the attempts transaction.
	for round := int64(0); round < 8; round++ {
		a, b := 7_770_000+2*round, 7_770_001+2*round
		other, err := h.pool.Begin(h.ctx)
		require.NoError(t, err)
		_, err = other.Exec(h.ctx, `SELECT pg_advisory_xact_lock($1)`, b)
		require.NoError(t, err)
		tries := 0
		done := make(chan error, 1)
		go func() {
			done <- h.svc.inTx(h.ctx, func(tx pgx.Tx, _ *afterCommit) error {
				tries++
				if _, err := tx.Exec(h.ctx, `SELECT pg_advisory_xact_lock($1)`, a); err != nil {
					return err
				}
				_, err := tx.Exec(h.ctx, `SELECT pg_advisory_xact_lock($1)`, b)
				return err
			})
		}()
		require.Eventually(t, func() bool { return waiters() == 1 }, 10*time.Second, 5*time.Millisecond)
		// The other side closes the cycle.
		_, err = other.Exec(h.ctx, `SELECT pg_advisory_xact_lock($1)`, a)
		if err != nil {
			require.True(t, dbfault.Deadlock(err), "%v", err)
			_ = other.Rollback(h.ctx)
			require.NoError(t, <-done)
			require.Equal(t, 1, tries)
			continue // the other side was the victim: no test of runTx this round
		}
		require.NoError(t, other.Commit(h.ctx))
		require.NoError(t, <-done, "the deadlock's victim ran again and committed")
		require.Equal(t, 2, tries)
		return
	}
	t.Fatal("PostgreSQL never aborted the attempts transaction")
}
