package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// End to end through River: real workers submit and resolve attempts while
// the sim hangs, errors and rate-limits at random. Every payout reaches a
// final status, nobody is paid twice, and the audit is clean.
func TestPayoutsEndToEndThroughRiver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	profile, err := sim.ParseFaultProfile("hang_after=0.1,error_after=0.1,rate_limit=0.1,unavailable=0.05,reset_before=0.05")
	require.NoError(t, err)
	srv := sim.NewServer(sim.Config{Seed: 7, Random: profile, HangFor: 5 * time.Second}).Start()
	t.Cleanup(srv.Close)
	prov := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: readTimeout}))

	e, err := engine.New(engine.Config{
		Pool: pool, Providers: []providers.Provider{prov}, PayoutProvider: prov.Name(),
		RunWorkers: true, MaxWorkers: 20, FetchPollInterval: 20 * time.Millisecond,
		Attempts: attempts.Config{
			SendBackoffBase: 20 * time.Millisecond, SendBackoffMax: 100 * time.Millisecond,
			ResolveSchedule: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond},
			StaleCallAfter:  10 * time.Second,
		},
	})
	require.NoError(t, err)
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, e.Stop(stopCtx))
	})

	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("1000.00", "BRL"),
		Key: "seed", Reason: "test", Actor: "test"})
	require.NoError(t, err)

	var ids []string
	for i := range 30 {
		p, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", ClientKey: fmt.Sprint(i),
			Operation: providers.OpPixTransfer, Amount: money.MustParse("10.00", "BRL"),
			Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "a@example.com"}}})
		require.NoError(t, err)
		ids = append(ids, p.ID)
	}
	require.Eventually(t, func() bool {
		for _, id := range ids {
			v, err := e.Payouts.Get(ctx, "m1", id)
			require.NoError(t, err)
			if v.Status == payouts.StatusProcessing {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "every payout reaches a final status")

	succeeded := 0
	for _, id := range ids {
		v, err := e.Payouts.Get(ctx, "m1", id)
		require.NoError(t, err)
		if v.Status == payouts.StatusSucceeded {
			succeeded++
			require.Len(t, srv.Operations(v.Attempts[len(v.Attempts)-1].Reference), 1)
		}
	}
	require.Positive(t, succeeded)
	require.Empty(t, srv.Duplicates())
	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

// River's cleaner deletes completed jobs older than CompletedJobsKept
// (DefaultCompletedJobsKept, an hour, unless set) and keeps newer ones and
// discarded ones, whatever their age.
func TestCompletedJobsKeptAnHour(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	var old, recent, discarded int64
	insert := func(state string, age time.Duration, id *int64) {
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO river_job (args, kind, max_attempts, state, queue, priority,
				scheduled_at, finalized_at, attempt)
			VALUES ('{}', 'saldo_test_finished', 1, $1::river_job_state, 'default', 1, now() - $2::interval,
				now() - $2::interval, 1) RETURNING id`, state, fmt.Sprintf("%d seconds", int(age.Seconds()))).Scan(id))
	}
	insert("completed", engine.DefaultCompletedJobsKept+10*time.Minute, &old)
	insert("completed", engine.DefaultCompletedJobsKept-10*time.Minute, &recent)
	insert("discarded", 2*engine.DefaultCompletedJobsKept, &discarded)

	srv := sim.NewServer(sim.Config{Seed: 1}).Start()
	t.Cleanup(srv.Close)
	prov := srv.NewProvider()
	e, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{prov}, PayoutProvider: prov.Name(),
		RunWorkers: true, FetchPollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, e.Stop(stopCtx))
	})
	exists := func(id int64) bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE id = $1`, id).Scan(&n))
		return n == 1
	}
	require.Eventually(t, func() bool { return !exists(old) }, 60*time.Second, 100*time.Millisecond,
		"the completed job older than an hour is deleted")
	require.True(t, exists(recent), "a completed job younger than an hour is kept")
	require.True(t, exists(discarded), "a discarded job is kept (River's 7 days)")
}
