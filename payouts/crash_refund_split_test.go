package payouts_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/pgproxy"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// crashWorld: a "first process" (attempts, charges, payouts) whose
// database connections go through a pgproxy, and a "restarted process" on
// a direct pool. Closing the proxy while a call hangs at the provider (after
// the provider recorded the operation) is the first process dying between
// the provider's answer and the recording: nothing of the answer reaches
// the database.
type crashWorld struct {
	*env
	proxy   *pgproxy.Proxy
	first   *attempts.Service
	firstPO *payouts.Service
	charge  charges.Charge
}

func newCrashWorld(t *testing.T, cfg sim.Config) *crashWorld {
	t.Helper()
	ctx := context.Background()
	proxy, direct, proxied := proxiedPools(t)
	var err error
	e := &env{t: t, ctx: ctx, pool: direct, clock: sim.NewManualClock(t0)}
	cfg.Clock = e.clock.Now
	e.srv = sim.NewServer(cfg).Start()
	t.Cleanup(e.srv.Close)
	// The first process waits long for the provider: it dies mid-call.
	firstProv := e.srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 20 * time.Second}))
	e.prov = e.srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: simReadTimeout}))
	w := &crashWorld{env: e, proxy: proxy}
	w.first, err = attempts.New(attempts.Config{Pool: proxied, Clock: e.clock,
		Providers: map[string]providers.Provider{firstProv.Name(): firstProv}})
	require.NoError(t, err)
	firstCh, err := charges.New(charges.Config{Pool: proxied, Attempts: w.first, Provider: firstProv.Name(), Clock: e.clock})
	require.NoError(t, err)
	w.firstPO, err = payouts.New(payouts.Config{Pool: proxied, Attempts: w.first, Provider: firstProv.Name(), Clock: e.clock, Charges: firstCh})
	require.NoError(t, err)
	// The restarted process.
	e.att, err = attempts.New(attempts.Config{Pool: direct, Clock: e.clock,
		Providers: map[string]providers.Provider{e.prov.Name(): e.prov}})
	require.NoError(t, err)
	ch, err := charges.New(charges.Config{Pool: direct, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock})
	require.NoError(t, err)
	e.svc, err = payouts.New(payouts.Config{Pool: direct, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock, Charges: ch})
	require.NoError(t, err)
	_, err = merchants.Create(ctx, direct, merchant, "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, direct, merchants.Funding{MerchantID: merchant, Amount: brl("100.00"), Key: "k", Reason: "r", Actor: "t"})
	require.NoError(t, err)
	c, err := ch.Create(ctx, charges.ChargeRequest{MerchantID: merchant, Kind: charges.KindCard, Amount: brl("80.00"), CardToken: "tok_visa"})
	require.NoError(t, err)
	res, err := e.att.Execute(ctx, *c.AttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, res.Attempt.Status)
	w.charge, err = ch.Get(ctx, merchant, c.ID)
	require.NoError(t, err)
	t.Cleanup(e.auditClean)
	return w
}

// dieMidCall runs the first process's Execute of attempt id, waits until the
// provider recorded its operation, then kills the first
// process's database access before it can record the answer.
func (w *crashWorld) dieMidCall(id attempts.Attempt) {
	t := w.t
	done := make(chan error, 1)
	go func() {
		_, err := w.first.Execute(w.ctx, id.ID)
		done <- err
	}()
	require.Eventually(t, func() bool { return len(w.srv.Operations(id.Reference)) == 1 }, 10*time.Second, 5*time.Millisecond)
	w.proxy.Close()
	select {
	case err := <-done:
		require.Error(t, err, "the first process could not record")
	case <-time.After(30 * time.Second):
		t.Fatal("the first process's Execute never returned")
	}
}

func (w *crashWorld) resolveToFinal(p payouts.Payout) attempts.Attempt {
	a := w.attempt(p)
	require.Equal(w.t, attempts.StatusPending, a.Status)
	require.True(w.t, a.CallInFlight(), "the call left durable evidence")
	a = w.execute(p)
	require.Equal(w.t, attempts.StatusUnknown, a.Status, "a call that may have left is unknown, never re-sent")
	r := w.resolveAfter(p, 31*time.Second)
	for i := 0; i < 10 && r.Attempt.Status == attempts.StatusUnknown; i++ {
		r = w.resolveAfter(p, r.RetryIn+time.Second)
	}
	return r.Attempt
}

// A refund whose process dies after the provider recorded the refund and
// before the answer is recorded is never re-sent on restart (R11; with or
// without provider idempotency keys): its reserve is held while unknown
// (R22), it resolves by lookup, and there is one refund at the provider, the
// reserve settled, the audit clean. Before, the crash tests covered only
// payouts and left refunds unchecked (found by review).
func TestRefundProcessDiesBeforeRecording_R11_R22(t *testing.T) {
	t.Parallel()
	for _, noKeys := range []bool{false, true} {
		t.Run(fmt.Sprintf("noIdempotency=%v", noKeys), func(t *testing.T) {
			t.Parallel()
			w := newCrashWorld(t, sim.Config{NoIdempotency: noKeys, HangFor: 3 * time.Second})
			require.NoError(t, w.srv.AddFault(sim.FaultRule{Kind: sim.FaultHangAfter, Operation: providers.OpRefund, Times: 1}))
			r, err := w.firstPO.CreateRefund(w.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: w.charge.ID, Amount: brl("30.00")})
			require.NoError(t, err)
			w.dieMidCall(w.attempt(r))
			av, res := w.balances()
			require.Equal(t, "30.00", res, "the refund's reserve is held while its fate is unknown (R22)")
			// A second refund of the rest cannot over-refund meanwhile.
			_, err = w.svc.CreateRefund(w.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: w.charge.ID, Amount: brl("50.01")})
			require.ErrorIs(t, err, payouts.ErrRefundExceedsCharge)
			a := w.resolveToFinal(r)
			require.Equal(t, attempts.StatusSucceeded, a.Status)
			require.Equal(t, 1, w.opsFor(a), "exactly one refund at the provider")
			av2, res2 := w.balances()
			require.Equal(t, "0.00", res2)
			require.Equal(t, av, av2, "settled from the reserve, not from available again")
			require.Equal(t, payouts.StatusSucceeded, w.get(r).Status)
		})
	}
}

// A split with one leg declined, one leg whose process dies mid-call (the
// provider paid it) and one leg succeeding: the declined leg releases only
// its own reserve; the unknown leg keeps its own (R22) and is never re-sent
// (R11); after resolution the paid legs are settled, the split is
// partially_failed, Retry refuses the succeeded legs (no second payment),
// and Retry of the failed leg pays only that leg. Before, no crash test
// covered a split leg dying beside final legs (found by review).
func TestSplitLegProcessDiesBeforeRecordingOthersFinal_R11_R22(t *testing.T) {
	t.Parallel()
	for _, noKeys := range []bool{false, true} {
		t.Run(fmt.Sprintf("noIdempotency=%v", noKeys), func(t *testing.T) {
			t.Parallel()
			w := newCrashWorld(t, sim.Config{NoIdempotency: noKeys, HangFor: 3 * time.Second})
			sp, err := w.firstPO.CreateSplit(w.ctx, payouts.SplitRequest{MerchantID: merchant, Legs: []payouts.SplitLeg{
				{Operation: providers.OpPixTransfer, Amount: brl("10.00"), Destination: pixTo("a@example.com")},
				{Operation: providers.OpPixTransfer, Amount: brl("20.00"), Destination: pixTo(sim.DeclinedPixKey)},
				{Operation: providers.OpPixTransfer, Amount: brl("30.00"), Destination: pixTo("c@example.com")},
			}})
			require.NoError(t, err)
			av0, res0 := w.balances()
			require.Equal(t, "60.00", res0)
			// Leg 0 succeeds, leg 1 is declined (restarted process).
			require.Equal(t, attempts.StatusSucceeded, w.execute(sp.Legs[0]).Status)
			require.Equal(t, attempts.StatusFailed, w.execute(sp.Legs[1]).Status)
			_, res := w.balances()
			require.Equal(t, "30.00", res, "each final leg moved only its own reserve")
			// Leg 2 dies mid-call on the first process.
			require.NoError(t, w.srv.AddFault(sim.FaultRule{Kind: sim.FaultHangAfter, Reference: w.attempt(sp.Legs[2]).Reference, Times: 1}))
			w.dieMidCall(w.attempt(sp.Legs[2]))
			_, res = w.balances()
			require.Equal(t, "30.00", res, "the unknown leg holds its reserve (R22)")
			got, err := w.svc.GetSplit(w.ctx, merchant, sp.ID)
			require.NoError(t, err)
			require.Equal(t, payouts.SplitProcessing, got.Status)
			// A retry of a succeeded or processing leg is refused.
			_, err = w.svc.Retry(w.ctx, merchant, sp.Legs[0].ID)
			require.ErrorIs(t, err, payouts.ErrNotRetryable)
			_, err = w.svc.Retry(w.ctx, merchant, sp.Legs[2].ID)
			require.ErrorIs(t, err, payouts.ErrNotRetryable)

			a := w.resolveToFinal(sp.Legs[2])
			require.Equal(t, attempts.StatusSucceeded, a.Status)
			require.Equal(t, 1, w.opsFor(a), "one operation for the leg that died mid-call")
			got, err = w.svc.GetSplit(w.ctx, merchant, sp.ID)
			require.NoError(t, err)
			require.Equal(t, payouts.SplitPartiallyFailed, got.Status)
			av, res := w.balances()
			require.Equal(t, "0.00", res)
			require.Equal(t, decimal.RequireFromString(av0).Add(decimal.NewFromInt(20)).StringFixed(2), av, "only the declined leg's 20.00 came back")

			_, err = w.svc.Retry(w.ctx, merchant, sp.Legs[2].ID)
			require.ErrorIs(t, err, payouts.ErrNotRetryable, "a leg paid after a crash is never paid again")
			for i, l := range sp.Legs {
				n := 1
				if i == 1 {
					n = w.opsFor(w.attempt(l))
					require.LessOrEqual(t, n, 1)
				}
				require.Equal(t, n, w.opsFor(w.attempt(l)), "leg %d", i)
			}
		})
	}
}
