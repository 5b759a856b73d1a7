package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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

// Issue 20, failover: pix_transfer routed pixA|pixB. pixA is down for the
// payout's first attempt (503 before processing). While that attempt is
// unknown it keeps the payout (never failed over on a guess); once the
// lookup proves pixA did nothing past its consistency window, the next
// attempt goes to pixB with a new key and the reserve carried, and pixB's
// clearing account receives the settlement. The two sims together show one
// money-moving operation for the payout.
func TestPayoutFailsOverToTheNextProvider_R16_R22(t *testing.T) {
	t.Parallel()
	w := newTwoPSPs(t, 401, func(c *engine.Config) {
		c.PayoutRetry = payouts.RetryPolicy{MaxAttempts: 3, Backoff: time.Second}
	})
	ctx, pool, clock, a, b, e := w.ctx, w.pool, w.clock, w.a, w.b, w.e
	brl := money.MustParse("10.00", "BRL")
	p := w.pay(t, "10.00")
	first, err := e.Attempts.Get(ctx, pool, *p.CurrentAttemptID)
	require.NoError(t, err)
	require.Equal(t, "pixA", first.Provider)
	require.NoError(t, a.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: first.Reference}))
	r, err := e.Attempts.Execute(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, r.Attempt.Status)

	// Unknown inside the window: no successor anywhere.
	rr, err := e.Attempts.Resolve(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, rr.Attempt.Status)
	all, err := e.Attempts.ForSubject(ctx, pool, p.ID)
	require.NoError(t, err)
	require.Len(t, all, 1, "an unknown attempt is never failed over")

	clock.Advance(time.Hour)
	rr, err = e.Attempts.Resolve(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusFailed, rr.Attempt.Status)
	v, err := e.Payouts.Get(ctx, "m1", p.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.StatusProcessing, v.Status)
	second, err := e.Attempts.Get(ctx, pool, *v.CurrentAttemptID)
	require.NoError(t, err)
	require.Equal(t, "pixB", second.Provider, "the next attempt fails over")
	require.NotEqual(t, first.IdempotencyKey, second.IdempotencyKey)

	clock.Advance(time.Minute)
	r, err = e.Attempts.Execute(ctx, second.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, r.Attempt.Status)
	v, err = e.Payouts.Get(ctx, "m1", p.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.StatusSucceeded, v.Status)

	require.Empty(t, a.Operations(first.Reference))
	require.Len(t, b.Operations(second.Reference), 1, "one money-moving operation, at pixB")
	var toB int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ledger_postings po JOIN ledger_accounts ac ON ac.id = po.account_id
		JOIN ledger_transactions t ON t.id = po.transaction_id
		WHERE t.cause_kind = $1 AND ac.owner_kind = 'provider' AND ac.owner_id LIKE 'pixB%'`, payouts.CauseSettle).Scan(&toB))
	require.Equal(t, 1, toB, "settled to the clearing account of the provider that paid")
	bal, err := ledger.MerchantBalanceIn(ctx, pool, "m1", brl.Currency())
	require.NoError(t, err)
	require.Equal(t, "90.00", bal.Available.StringFixed(2))
	require.Equal(t, "0.00", bal.Reserved.StringFixed(2))
	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
	require.Empty(t, a.Duplicates())
	require.Empty(t, b.Duplicates())
}

// Issue 20, circuit breakers: once pixA's circuit for pix_transfer opens
// (calls without an answer), new payouts go to pixB; the payout already at
// pixA waits (its attempt is unknown, resolved by lookup, never moved).
func TestNewPayoutsRouteAroundAnOpenCircuit(t *testing.T) {
	t.Parallel()
	w := newTwoPSPs(t, 501, func(c *engine.Config) {
		c.Attempts = attempts.Config{Breaker: attempts.BreakerConfig{Window: time.Minute, MinCalls: 2, FailureRate: 1, OpenFor: time.Minute}}
	})
	ctx, pool, a, e := w.ctx, w.pool, w.a, w.e
	pay := func() payouts.Payout { return w.pay(t, "1.00") }
	require.NoError(t, a.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable}))
	for range 2 {
		p := pay()
		require.Equal(t, "pixA", p.Provider)
		r, err := e.Attempts.Execute(ctx, *p.CurrentAttemptID)
		require.NoError(t, err)
		require.Equal(t, attempts.StatusUnknown, r.Attempt.Status)
	}
	require.Equal(t, attempts.CircuitOpen, e.Attempts.Circuit("pixA", "pix_transfer"))
	p := pay()
	require.Equal(t, "pixB", p.Provider, "new payouts route around the open circuit")
	r, err := e.Attempts.Execute(ctx, *p.CurrentAttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, r.Attempt.Status)
	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

// twoPSPs is an engine with two sims, pixA and pixB (seeds apart), routed
// pix_transfer=pixA|pixB, on a manual clock, and merchant m1 funded with
// 100.00 BRL; tune sets the rest of the engine's configuration.
type twoPSPs struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	clock *sim.ManualClock
	a, b  *sim.Server
	e     *engine.Engine
}

func newTwoPSPs(t *testing.T, seed int64, tune func(*engine.Config)) *twoPSPs {
	t.Helper()
	w := &twoPSPs{ctx: context.Background(), pool: testdb.New(t),
		clock: sim.NewManualClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))}
	w.a = sim.NewServer(sim.Config{Seed: seed, Clock: w.clock.Now}).Start()
	t.Cleanup(w.a.Close)
	w.b = sim.NewServer(sim.Config{Seed: seed + 1, Clock: w.clock.Now}).Start()
	t.Cleanup(w.b.Close)
	settings := sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: 5 * time.Second})
	routes, err := providers.ParseRoutes("pix_transfer=pixA|pixB")
	require.NoError(t, err)
	cfg := engine.Config{Pool: w.pool, Routes: routes, Clock: w.clock, Providers: []providers.Provider{
		w.a.NewProvider(sim.WithName("pixA"), settings), w.b.NewProvider(sim.WithName("pixB"), settings)}}
	tune(&cfg)
	w.e, err = engine.New(cfg)
	require.NoError(t, err)
	_, err = merchants.Create(w.ctx, w.pool, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(w.ctx, w.pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("100.00", "BRL"),
		Key: "seed", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	return w
}

// pay creates a Pix transfer of m1.
func (w *twoPSPs) pay(t *testing.T, amount string) payouts.Payout {
	t.Helper()
	p, err := w.e.Payouts.CreatePayout(w.ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: money.MustParse(amount, "BRL"), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}}})
	require.NoError(t, err)
	return p
}
