package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// R11, R16: two `saldo serve` processes share one database
// (docs/scale-out.md: "any worker can work any job") with different
// timeouts, each accepted by serve's own check (staleCallProblem):
//
//   - A (serve's defaults): connect 3s, read 30s, --stale-call-after 5m. Its
//     calls last up to connect + TLS 5s + read = 38s.
//   - B (a tighter deploy, e.g. the next version during a rolling deploy):
//     connect 1s, read 3s, --stale-call-after 10s (the least serve allows).
//
// Each call carries call_deadline_at, stamped by the process that makes it
// from its own StaleCallAfter; the sweeper, a resolver's "not found" and an
// operator's manual failure wait for the later of that and their own
// StaleCallAfter. So B, 10.5s into A's call (a slow PSP, 20s), neither
// fails it nor opens the payout's next attempt, and the payout is paid
// once. Before, B's sweeper and resolver used B's 10s alone, failed A's
// call still on its way, the next attempt went out with a new key, and the
// payout was paid twice (found by review).
func TestFleetWithDifferentStaleCallAfterPaysOnce_R11_R16(t *testing.T) {
	t.Parallel()
	// Both configurations are accepted by serve, on their own.
	require.Empty(t, staleCallProblem(5*time.Minute, 3*time.Second, 30*time.Second, 68*time.Second, false, ""))
	require.Empty(t, staleCallProblem(10*time.Second, time.Second, 3*time.Second, 39*time.Second, false, ""))

	ctx := context.Background()
	pool := testdb.New(t)
	srv := sim.NewServer(sim.Config{Seed: 3}).Start()
	t.Cleanup(srv.Close)
	// The PSP is slow to take the first payout: 20s before it executes it
	// (well within A's 38s bound).
	require.NoError(t, srv.AddFault(sim.FaultRule{Kind: sim.FaultSlow, Times: 1, Delay: sim.Duration(20 * time.Second)}))

	log := slog.New(slog.DiscardHandler)
	retry := payouts.RetryPolicy{MaxAttempts: 3, Within: 24 * time.Hour, Backoff: time.Second}
	provA := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ConnectTimeout: 3 * time.Second, ReadTimeout: 30 * time.Second}))
	a, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{provA}, PayoutProvider: provA.Name(),
		PayoutRetry: retry, Logger: log,
		Attempts: attempts.Config{StaleCallAfter: 5 * time.Minute, JobTimeout: 68 * time.Second}})
	require.NoError(t, err)
	provB := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 3 * time.Second}))
	b, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{provB}, PayoutProvider: provB.Name(),
		PayoutRetry: retry, Logger: log,
		Attempts: attempts.Config{StaleCallAfter: 10 * time.Second, JobTimeout: 39 * time.Second,
			ResolveSchedule: []time.Duration{time.Second}}})
	require.NoError(t, err)

	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("100.00", "BRL"),
		Key: "f", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	p, err := a.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", ClientKey: "k1",
		Operation: providers.OpPixTransfer, Amount: money.MustParse("10.00", "BRL"),
		Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "a@example.com"}}})
	require.NoError(t, err)
	first := *p.CurrentAttemptID

	// A's worker makes the call (its submit job); the PSP takes 20s.
	done := make(chan attempts.ExecuteResult, 1)
	go func() {
		r, err := a.Attempts.Execute(ctx, first)
		if err != nil {
			t.Errorf("A's Execute: %v", err)
		}
		done <- r
	}()
	require.Eventually(t, func() bool {
		at, err := a.Attempts.Get(ctx, pool, first)
		return err == nil && at.CallCount == 1
	}, 30*time.Second, 10*time.Millisecond)

	// B runs the periodic sweep (any worker may) and then the resolver.
	time.Sleep(10500 * time.Millisecond)
	sw, err := b.Attempts.Sweep(ctx)
	require.NoError(t, err)
	t.Logf("B's sweep: %+v", sw)
	var failedWhileInFlight bool
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		rr, err := b.Attempts.Resolve(ctx, first)
		require.NoError(t, err)
		if rr.Attempt.Status == attempts.StatusFailed {
			failedWhileInFlight = true
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	at, err := b.Attempts.Get(ctx, pool, first)
	require.NoError(t, err)
	t.Logf("first attempt after B's lookups (A's call still on the wire): %s %s", at.Status, at.FailureCode)

	// Had B failed the attempt, the payout's next attempt (new key) would go
	// out here.
	v, err := b.Payouts.Get(ctx, "m1", p.ID)
	require.NoError(t, err)
	if v.CurrentAttemptID != nil && *v.CurrentAttemptID != first {
		time.Sleep(1500 * time.Millisecond) // its backoff
		r2, err := b.Attempts.Execute(ctx, *v.CurrentAttemptID)
		require.NoError(t, err)
		t.Logf("second attempt: %s", r2.Attempt.Status)
	}

	// A's call ends: the PSP executes the first payout.
	r1 := <-done
	t.Logf("A's call: outcome %s", r1.Outcome)

	v, err = b.Payouts.Get(ctx, "m1", p.ID)
	require.NoError(t, err)
	paid := 0
	for _, av := range v.Attempts {
		for _, op := range srv.Operations(av.Reference) {
			t.Logf("attempt %s (%s): PSP operation %s %s", av.ID, av.Status, op.ID, op.State)
			if op.State == "succeeded" {
				paid++
			}
		}
	}
	require.LessOrEqual(t, paid, 1, "one payout of 10.00 is paid once, not %d times (B failed it while A's call was on the wire: %v)",
		paid, failedWhileInFlight)
	require.False(t, failedWhileInFlight,
		"B leaves the attempt open while A's call (bounded at 38s) is on the wire, 10.5s in")
}
