package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/reconcile"
)

// Issue 16 (R19): the engine runs a daily reconciliation job per provider
// with statements; a leader that starts after the day closed (plus the
// settle margin) reconciles it at once, through River.
func TestDailyReconciliationJob_R19(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	day := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	clock := sim.NewManualClock(day.Add(10 * time.Hour))
	srv := sim.NewServer(sim.Config{Clock: clock.Now}).Start()
	t.Cleanup(srv.Close)
	prov := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: 2 * time.Second}))
	e, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{prov}, PayoutProvider: prov.Name(),
		Clock: clock, RunWorkers: true, MaxWorkers: 5, FetchPollInterval: 20 * time.Millisecond,
		Reconcile: reconcile.Config{SettleMargin: time.Hour}})
	require.NoError(t, err)
	require.NotNil(t, e.Reconcile)
	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("100.00", "BRL"),
		Key: "seed", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	p, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount:      money.MustParse("10.00", "BRL"),
		Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "a@example.com"}}})
	require.NoError(t, err)
	r, err := e.Attempts.Execute(ctx, *p.CurrentAttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, r.Attempt.Status)

	clock.Set(day.Add(25*time.Hour + time.Minute)) // the day closed an hour ago
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, e.Stop(stopCtx))
	})
	var status string
	var matched int
	require.Eventually(t, func() bool {
		err := pool.QueryRow(ctx, `SELECT status, matched FROM reconcile_runs WHERE provider = 'sim' AND day = $1`, day).
			Scan(&status, &matched)
		return err == nil && status != "running"
	}, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, "succeeded", status)
	require.Equal(t, 1, matched)

	// River forgets the completed job after CompletedJobsKept; a leader
	// started later that day inserts it again (on start) and it runs, but
	// the day is not reconciled a second time.
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, e.Stop(stopCtx))
	_, err = pool.Exec(ctx, `DELETE FROM river_job WHERE kind = 'reconcile.run'`)
	require.NoError(t, err)
	e2, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{prov}, PayoutProvider: prov.Name(),
		Clock: clock, RunWorkers: true, MaxWorkers: 5, FetchPollInterval: 20 * time.Millisecond,
		Reconcile: reconcile.Config{SettleMargin: time.Hour}})
	require.NoError(t, err)
	require.NoError(t, e2.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, e2.Stop(stopCtx))
	})
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'reconcile.run' AND state = 'completed'`).Scan(&n))
		return n == 1
	}, 20*time.Second, 50*time.Millisecond, "the daily job ran again after a restart")
	var runs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM reconcile_runs WHERE provider = 'sim' AND day = $1`, day).Scan(&runs))
	require.Equal(t, 1, runs, "and did not reconcile the day again")
}

// R19: a leader down for more than a day catches up every day no daily run
// reconciled since the last one (up to reconcile.CatchUpDays), not only
// the last closed day.
func TestDailyReconciliationCatchesUpMissedDays_R19(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	day := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	clock := sim.NewManualClock(day.Add(25*time.Hour + time.Minute)) // the day closed an hour ago
	srv := sim.NewServer(sim.Config{Clock: clock.Now}).Start()
	t.Cleanup(srv.Close)
	prov := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: 2 * time.Second}))
	start := func() func() {
		e, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{prov}, PayoutProvider: prov.Name(),
			Clock: clock, RunWorkers: true, MaxWorkers: 5, FetchPollInterval: 20 * time.Millisecond,
			Reconcile: reconcile.Config{SettleMargin: time.Hour}})
		require.NoError(t, err)
		require.NoError(t, e.Start(ctx))
		stop := func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, e.Stop(stopCtx))
		}
		return stop
	}
	days := func() []string {
		rows, err := pool.Query(ctx, `SELECT to_char(day, 'YYYY-MM-DD') FROM reconcile_runs WHERE provider = 'sim'
			AND status = 'succeeded' ORDER BY day`)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}
	// A fresh install reconciles the last closed day only.
	stop := start()
	require.Eventually(t, func() bool { return len(days()) == 1 }, 20*time.Second, 50*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	stop()
	require.Equal(t, []string{"2026-12-02"}, days())

	// The leader is down three days; the next one reconciles the days it
	// missed as well as the last.
	clock.Set(day.AddDate(0, 0, 3).Add(25*time.Hour + time.Minute))
	t.Cleanup(start())
	require.Eventually(t, func() bool { return len(days()) == 4 }, 20*time.Second, 50*time.Millisecond,
		"the days the leader was down are reconciled")
	require.Equal(t, []string{"2026-12-02", "2026-12-03", "2026-12-04", "2026-12-05"}, days())
}
