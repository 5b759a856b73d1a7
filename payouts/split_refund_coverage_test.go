package payouts_test

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// splitChargeEnv: env with charges wired in and two split recipients.
func splitChargeEnv(t *testing.T, balance string) (*env, *charges.Service) {
	t.Helper()
	e := setup(t, sim.Config{}, balance)
	ch, err := charges.New(charges.Config{Pool: e.pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock})
	require.NoError(t, err)
	e.svc, err = payouts.New(payouts.Config{Pool: e.pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock, Charges: ch})
	require.NoError(t, err)
	for _, m := range []string{"r1", "r2"} {
		_, err := merchants.Create(e.ctx, e.pool, m, "Recipient "+m)
		require.NoError(t, err)
	}
	return e, ch
}

func paidSplitCharge(t *testing.T, e *env, ch *charges.Service, amt money.Amount, splits []charges.SplitRule) charges.Charge {
	t.Helper()
	c, err := ch.Create(e.ctx, charges.ChargeRequest{MerchantID: merchant, Kind: charges.KindCard, Amount: amt,
		CardToken: "tok_visa", Splits: splits})
	require.NoError(t, err)
	res, err := e.att.Execute(e.ctx, *c.AttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, res.Attempt.Status)
	c, err = ch.Get(e.ctx, merchant, c.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, c.Status)
	return c
}

func availReserved(t *testing.T, e *env, m string, cur money.Currency) string {
	b, err := ledger.MerchantBalanceIn(e.ctx, e.pool, m, cur)
	require.NoError(t, err)
	return b.Available.StringFixed(cur.MinorUnits()) + "/" + b.Reserved.StringFixed(cur.MinorUnits())
}

// A JPY charge with a fee and uneven splits is credited exactly (fee, merchant
// net and each share sum to the gross), a refund is reserved from the
// charging merchant's available balance only (the fee is not given back, the
// split recipients keep their shares, as documented), and a full refund the
// merchant cannot afford because recipients took part of the charge is
// refused with insufficient balance and writes nothing (R21, R23).
func TestJPYSplitChargeRefundComesFromTheMerchantOnly_R21(t *testing.T) {
	t.Parallel()
	e, ch := splitChargeEnv(t, "10.00")
	d := decimal.RequireFromString
	require.NoError(t, ch.SetFeeRule(e.ctx, "", money.JPY, charges.FeeRule{Percent: d("3.6"), Fixed: d("40")}))
	c := paidSplitCharge(t, e, ch, money.MustParse("1001", "JPY"), []charges.SplitRule{
		{RecipientID: "r1", Percent: d("33.3333")}, {RecipientID: "r2", Amount: d("111")}})
	// fee round_half_up(36.036) + 40 = 76; net 925; r1 floor(308.33) = 308;
	// r2 111; merchant 925 - 419 = 506.
	require.Equal(t, "76 JPY", c.Fee.String())
	require.Equal(t, "506 JPY", c.MerchantNet.String())
	require.Equal(t, "506/0", availReserved(t, e, merchant, money.JPY))
	require.Equal(t, "308/0", availReserved(t, e, "r1", money.JPY))
	require.Equal(t, "111/0", availReserved(t, e, "r2", money.JPY))

	r, err := e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, Amount: money.MustParse("1", "JPY")})
	require.NoError(t, err)
	require.Equal(t, "505/1", availReserved(t, e, merchant, money.JPY))
	require.Equal(t, attempts.StatusSucceeded, e.execute(r).Status)
	require.Equal(t, "505/0", availReserved(t, e, merchant, money.JPY))
	require.Equal(t, "308/0", availReserved(t, e, "r1", money.JPY), "a recipient's share is not clawed back")

	count := func() int {
		var n int
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT (SELECT count(*) FROM payouts) + (SELECT count(*) FROM attempts)
			+ (SELECT count(*) FROM ledger_transactions) + (SELECT count(*) FROM river_job)
			+ (SELECT count(*) FROM payout_requests)`).Scan(&n))
		return n
	}
	before := count()
	// Everything still refundable is 1000, more than the merchant's 505.
	_, err = e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, ClientKey: "all"})
	require.ErrorIs(t, err, payouts.ErrInsufficientBalance)
	require.Equal(t, before, count(), "a refused refund writes nothing")
	require.Equal(t, "505/0", availReserved(t, e, merchant, money.JPY))

	// What the merchant holds can still go back.
	r, err = e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, Amount: money.MustParse("505", "JPY")})
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, e.execute(r).Status)
	require.Equal(t, "0/0", availReserved(t, e, merchant, money.JPY))
	clearing, err := payouts.ClearingBalance(e.ctx, e.pool, e.prov.Name(), money.JPY)
	require.NoError(t, err)
	require.Equal(t, "-495", clearing.String(), "-1001 credited, +506 refunded")
}

// A split leg that failed is retried alone with a new key; it reserves its
// own amount again, the split ends succeeded, each leg paid once, and a
// succeeded leg cannot be retried (R6, R21, R22).
func TestSplitLegRetriedAlone_R6(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{Faults: []sim.FaultRule{{Kind: sim.FaultUnavailable, Operation: providers.OpPixTransfer, Times: 1}}}, "100.00")
	legs := []payouts.SplitLeg{
		{Operation: providers.OpPixTransfer, Amount: brl("20.00"), Destination: pixTo("a@example.com")},
		{Operation: providers.OpPixTransfer, Amount: brl("30.01"), Destination: pixTo("b@example.com")},
	}
	sp, err := e.svc.CreateSplit(e.ctx, payouts.SplitRequest{MerchantID: merchant, Legs: legs})
	require.NoError(t, err)
	av, res := e.balances()
	require.Equal(t, "49.99/50.01", av+"/"+res)
	require.Equal(t, attempts.StatusUnknown, e.execute(sp.Legs[0]).Status) // 503, never processed
	require.Equal(t, attempts.StatusSucceeded, e.execute(sp.Legs[1]).Status)
	_, err = e.svc.Retry(e.ctx, merchant, sp.Legs[0].ID)
	require.ErrorIs(t, err, payouts.ErrNotRetryable, "an unknown leg is not retried")
	leg := sp.Legs[0]
	r := e.resolveAfter(leg, 31*time.Second)
	for i := 0; i < 10 && r.Attempt.Status == attempts.StatusUnknown; i++ {
		r = e.resolveAfter(leg, r.RetryIn+time.Second)
	}
	require.Equal(t, attempts.StatusFailed, r.Attempt.Status)
	got, err := e.svc.GetSplit(e.ctx, merchant, sp.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.SplitPartiallyFailed, got.Status)
	av, res = e.balances()
	require.Equal(t, "69.99/0.00", av+"/"+res, "only the failed leg came back")

	first := e.attempt(leg)
	retried, err := e.svc.Retry(e.ctx, merchant, leg.ID)
	require.NoError(t, err)
	require.NotEqual(t, first.IdempotencyKey, e.attempt(retried).IdempotencyKey)
	av, res = e.balances()
	require.Equal(t, "49.99/20.00", av+"/"+res)
	got, err = e.svc.GetSplit(e.ctx, merchant, sp.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.SplitProcessing, got.Status)
	require.Equal(t, attempts.StatusSucceeded, e.execute(retried).Status)
	got, err = e.svc.GetSplit(e.ctx, merchant, sp.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.SplitSucceeded, got.Status)
	av, res = e.balances()
	require.Equal(t, "49.99/0.00", av+"/"+res)
	_, err = e.svc.Retry(e.ctx, merchant, sp.Legs[1].ID)
	require.ErrorIs(t, err, payouts.ErrNotRetryable)
	require.Equal(t, 0, e.opsFor(first), "the failed attempt moved no money")
	require.Equal(t, 1, e.opsFor(e.attempt(retried)))
	clearing, err := payouts.ClearingBalance(e.ctx, e.pool, e.prov.Name(), money.BRL)
	require.NoError(t, err)
	require.Equal(t, "50.01", clearing.StringFixed(2))
}
