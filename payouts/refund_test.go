package payouts_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// refundEnv is env with charges wired in and one paid card charge of 100.00.
func refundEnv(t *testing.T) (*env, charges.Charge) {
	t.Helper()
	e := setup(t, sim.Config{}, "500.00")
	ch, err := charges.New(charges.Config{Pool: e.pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock})
	require.NoError(t, err)
	e.svc, err = payouts.New(payouts.Config{Pool: e.pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock, Charges: ch})
	require.NoError(t, err)
	c, err := ch.Create(e.ctx, charges.ChargeRequest{MerchantID: merchant, Kind: charges.KindCard,
		Amount: brl("100.00"), CardToken: "tok_visa"})
	require.NoError(t, err)
	res, err := e.att.Execute(e.ctx, *c.AttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, res.Attempt.Status)
	c, err = ch.Get(e.ctx, merchant, c.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, c.Status)
	return e, c
}

func TestRefundPartialAndFull(t *testing.T) {
	t.Parallel()
	e, c := refundEnv(t)
	av0, _ := e.balances()

	r1, err := e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, Amount: brl("30.00")})
	require.NoError(t, err)
	require.Equal(t, attempts.KindRefund, r1.Kind)
	require.Equal(t, c.Provider, r1.Provider)
	av, res := e.balances()
	require.Equal(t, "30.00", res, "the refund reserves from available (R22)")
	_ = av

	_, err = e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, Amount: brl("70.01")})
	require.ErrorIs(t, err, payouts.ErrRefundExceedsCharge, "a processing refund counts against the charge")
	var fe *payouts.FieldError
	require.True(t, errors.As(err, &fe))
	require.Equal(t, "amount", fe.Field)

	require.Equal(t, attempts.StatusSucceeded, e.execute(r1).Status)
	ops := e.srv.Operations(e.attempt(r1).Reference)
	require.Len(t, ops, 1)
	require.Equal(t, providers.OpRefund, ops[0].Operation)

	// The zero amount refunds everything still refundable: 70.00.
	r2, err := e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, ClientKey: "rest"})
	require.NoError(t, err)
	require.Equal(t, "70.00 BRL", r2.Amount.String())
	require.Equal(t, attempts.StatusSucceeded, e.execute(r2).Status)
	again, err := e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, ClientKey: "rest"})
	require.NoError(t, err)
	require.Equal(t, r2.ID, again.ID, "same client key, same refund")

	_, err = e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, Amount: brl("0.01")})
	require.ErrorIs(t, err, payouts.ErrRefundExceedsCharge)
	av, res = e.balances()
	require.Equal(t, "0.00", res)
	require.Equal(t, mustSub(t, av0, "100.00"), av, "the merchant paid back the whole charge once")
}

// Concurrent refunds of one charge cannot over-refund: the charge row lock
// in the opening transaction serialises them.
func TestConcurrentRefundsNeverExceedCharge(t *testing.T) {
	t.Parallel()
	e, c := refundEnv(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused := 0, 0
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, Amount: brl("15.00")})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, payouts.ErrRefundExceedsCharge):
				refused++
			default:
				t.Errorf("unexpected: %v", err)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 6, ok, "6 x 15.00 fit in 100.00")
	require.Equal(t, 4, refused)
	list, _, err := e.svc.List(e.ctx, payouts.ListParams{MerchantID: merchant, Kind: attempts.KindRefund})
	require.NoError(t, err)
	for _, p := range list {
		require.Equal(t, attempts.StatusSucceeded, e.execute(p).Status)
	}
}

// A failed refund releases its reserve and no longer counts; a retry
// re-checks the bound under the lock.
func TestRefundDeclinedThenRetried(t *testing.T) {
	t.Parallel()
	e, c := refundEnv(t)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Operation: providers.OpRefund, Times: 1}))
	r, err := e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, Amount: brl("60.00")})
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, e.execute(r).Status)
	res := e.resolveAfter(r, 31*time.Second)
	for i := 0; i < 10 && res.Attempt.Status == attempts.StatusUnknown; i++ {
		res = e.resolveAfter(r, res.RetryIn+time.Second)
	}
	require.Equal(t, attempts.StatusFailed, res.Attempt.Status)
	_, reserved := e.balances()
	require.Equal(t, "0.00", reserved)

	// While the failed one is out of the count, another takes 50.00; the
	// retry of 60.00 would now exceed and is refused.
	other, err := e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, Amount: brl("50.00")})
	require.NoError(t, err)
	_, err = e.svc.Retry(e.ctx, merchant, r.ID)
	require.ErrorIs(t, err, payouts.ErrRefundExceedsCharge)
	require.Equal(t, attempts.StatusSucceeded, e.execute(other).Status)

	_, err = e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: "m2", ChargeID: c.ID, Amount: brl("1.00")})
	require.ErrorIs(t, err, payouts.ErrUnknownMerchant)
}

func mustSub(t *testing.T, a, b string) string {
	t.Helper()
	x, y := brl(a), brl(b)
	d, err := x.Sub(y)
	require.NoError(t, err)
	return d.Format()
}
