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
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// Issue 20 end to end through River: payouts created during a PSP outage
// (every first call answered 503 before processing) succeed after it
// without any client action: each attempt caught in the outage goes
// unknown, its lookup proves past the consistency window that nothing was
// done, the payout's next attempt (new key) takes over the reserve and
// succeeds. Each payout has exactly one provider-side operation and one
// reserve movement per attempt; reserves end at zero; audit clean.
func TestPayoutsRideOutAnOutageThroughRiver_R16_R22(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	srv := sim.NewServer(sim.Config{Seed: 601}).Start()
	t.Cleanup(srv.Close)
	const n = 8
	require.NoError(t, srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Times: n})) // the outage
	prov := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: 2 * time.Second}))
	e, err := engine.New(engine.Config{
		Pool: pool, Providers: []providers.Provider{prov}, PayoutProvider: prov.Name(),
		RunWorkers: true, MaxWorkers: 20, FetchPollInterval: 20 * time.Millisecond,
		PayoutRetry: payouts.RetryPolicy{MaxAttempts: 3, Within: time.Hour, Backoff: 100 * time.Millisecond},
		Attempts: attempts.Config{SendBackoffBase: 20 * time.Millisecond, SendBackoffMax: 100 * time.Millisecond,
			ResolveSchedule: []time.Duration{300 * time.Millisecond, 500 * time.Millisecond}, StaleCallAfter: 10 * time.Second},
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
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("100.00", "BRL"),
		Key: "seed", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	var ps []payouts.Payout
	for i := range n {
		p, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", ClientKey: fmt.Sprint(i),
			Operation: providers.OpPixTransfer, Amount: money.MustParse("2.00", "BRL"),
			Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: fmt.Sprintf("p%d@example.com", i)}}})
		require.NoError(t, err)
		ps = append(ps, p)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		left := 0
		for _, p := range ps {
			v, err := e.Payouts.Get(ctx, "m1", p.ID)
			require.NoError(t, err)
			require.NotEqual(t, payouts.StatusFailed, v.Status, "payout %s failed: %s %s", p.ID, v.FailureCode, v.FailureReason)
			if v.Status != payouts.StatusSucceeded {
				left++
			}
		}
		if left == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d payouts still processing", left)
		time.Sleep(50 * time.Millisecond)
	}
	retried := 0
	for _, p := range ps {
		v, err := e.Payouts.Get(ctx, "m1", p.ID)
		require.NoError(t, err)
		moving := 0
		for _, a := range v.Attempts {
			moving += len(srv.Operations(a.Reference))
		}
		require.Equal(t, 1, moving, "payout %s: one provider-side operation", p.ID)
		if v.AttemptCount > 1 {
			retried++
		}
	}
	require.Equal(t, n, retried, "every payout caught in the outage got its next attempt by itself")
	var carries int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ledger_transactions WHERE cause_kind = $1`,
		payouts.CauseReserveCarry).Scan(&carries))
	require.Equal(t, n, carries)
	bal, err := ledger.MerchantBalanceIn(ctx, pool, "m1", money.BRL)
	require.NoError(t, err)
	require.Equal(t, "84.00", bal.Available.StringFixed(2))
	require.Equal(t, "0.00", bal.Reserved.StringFixed(2))
	require.Empty(t, srv.Duplicates())
	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}
