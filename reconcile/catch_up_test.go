package reconcile_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/reconcile"
)

// R19: the daily job's catch-up enqueues a day no daily job ever ran or
// enqueued (a leader down), once: a day whose daily job an operator
// cancelled (River UI) is not enqueued again by every later daily job
// while it is among the CatchUpDays, although River's uniqueness does not
// count a cancelled job (and forgets it after a day).
func TestCatchUpDoesNotReenqueueACancelledDay_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	client, err := river.NewClient(riverpgxv5.New(e.pool), &river.Config{})
	require.NoError(t, err)
	// What the daily job of day d does (RunWorker.Work): catch up, then
	// reconcile d.
	work := func(id int64, d time.Time) {
		t.Helper()
		require.NoError(t, e.rec.CatchUp(e.ctx, client, e.prov.Name(), d))
		_, err := e.rec.Run(e.ctx, e.prov.Name(), d, reconcile.RunOptions{TriggeredBy: fmt.Sprintf("job:%d", id)})
		require.NoError(t, err)
	}
	jobsOf := func(d time.Time) (live, cancelled int) {
		t.Helper()
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FILTER (WHERE state <> 'cancelled'),
			count(*) FILTER (WHERE state = 'cancelled') FROM river_job WHERE kind = 'reconcile.run'
			AND args->>'day' = $1`, d.Format(time.DateOnly)).Scan(&live, &cancelled))
		return live, cancelled
	}
	// The first daily run, then the leader is down two days: the next
	// daily job catches up the day it missed.
	e.clock.Set(day.Add(27 * time.Hour))
	work(1, day)
	missed := day.AddDate(0, 0, 1)
	e.clock.Set(day.AddDate(0, 0, 2).Add(27 * time.Hour))
	work(2, day.AddDate(0, 0, 2))
	live, _ := jobsOf(missed)
	require.Equal(t, 1, live, "the missed day is caught up")
	var id int64
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT id FROM river_job WHERE kind = 'reconcile.run' AND args->>'day' = $1`,
		missed.Format(time.DateOnly)).Scan(&id))
	// An operator cancels it; the next daily jobs leave it cancelled.
	_, err = client.JobCancel(e.ctx, id)
	require.NoError(t, err)
	for i := 3; i < 6; i++ {
		e.clock.Set(day.AddDate(0, 0, i).Add(27 * time.Hour))
		work(int64(i), day.AddDate(0, 0, i))
		live, cancelled := jobsOf(missed)
		require.Equal(t, 0, live, "day %d: the cancelled day was enqueued again", i)
		require.Equal(t, 1, cancelled)
	}
}
