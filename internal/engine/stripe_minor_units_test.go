package engine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
)

// Minor units hold end to end through the engine, the Stripe adapter and
// the Stripe fake for zero- and three-decimal currencies: a JPY and a KWD
// Connect transfer and a KWD card charge with a partial refund, each made
// under a hang after commit and resolved by a lookup whose amount (Stripe's
// integer turned back into major units, "5.120") matches the attempt's
// (5.12), so the money moves. Stripe receives 500 (not 50000) for 500 JPY
// and 5120 for 5.12 KWD; an amount Stripe refuses (5.125 KWD, last digit
// not 0) is refused before anything is written or reserved; balances and
// the audit are exact. Nothing went wrong here before: review found no
// end-to-end test using such a currency, and this test covers them.
func TestStripeZeroAndThreeDecimalCurrenciesEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	se := newStripeEngine(t)
	e, fake, pool, hangThenExecute, resolve := se.e, se.fake, se.pool, se.hangExec, se.resolve
	for _, f := range []money.Amount{money.MustParse("10.000", "KWD"), money.MustParse("1000", "JPY")} {
		_, err := merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: f, Key: "seed-" + f.Currency().Code(),
			Reason: "test", Actor: "test"})
		require.NoError(t, err)
	}
	avail := func(cur money.Currency) string {
		t.Helper()
		b, err := ledger.MerchantBalanceIn(ctx, pool, "m1", cur)
		require.NoError(t, err)
		return b.Available.StringFixed(cur.MinorUnits()) + "/" + b.Reserved.StringFixed(cur.MinorUnits())
	}

	// Refused up front: Stripe needs the last of KWD's three decimals to be 0.
	_, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpAccountTransfer,
		Amount: money.MustParse("5.125", "KWD"), Destination: &providers.Destination{StripeAccount: "acct_1SellerK"}})
	var fe *payouts.FieldError
	require.True(t, errors.As(err, &fe), "want a FieldError, got %v", err)
	require.Equal(t, "10.000/0.000", avail(money.KWD), "nothing reserved for a refused amount")

	for _, tc := range []struct {
		amount money.Amount
		minor  float64
	}{{money.MustParse("500", "JPY"), 500}, {money.MustParse("5.12", "KWD"), 5120}} {
		po, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpAccountTransfer,
			Amount: tc.amount, Destination: &providers.Destination{StripeAccount: "acct_1SellerK"}})
		require.NoError(t, err)
		pa := resolve(hangThenExecute(po.CurrentAttemptID))
		obj := fake.Object(pa.ProviderID)
		require.EqualValues(t, tc.minor, obj["amount"], "%s sent as Stripe's minor units", tc.amount)
		require.Equal(t, lower(tc.amount.Currency().Code()), obj["currency"])
		v, err := e.Payouts.Get(ctx, "m1", po.ID)
		require.NoError(t, err)
		require.Equal(t, payouts.StatusSucceeded, v.Status)
	}
	require.Equal(t, "500/0", avail(money.JPY))
	require.Equal(t, "4.880/0.000", avail(money.KWD))

	// A card charge of 10.12 KWD and a partial refund of 5.00 KWD.
	ch, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindCard,
		Amount: money.MustParse("10.12", "KWD"), CardToken: "pm_card_visa"})
	require.NoError(t, err)
	ca := resolve(hangThenExecute(ch.AttemptID))
	require.EqualValues(t, 10120, fake.Object(ca.ProviderID)["amount"])
	c, err := e.Charges.Get(ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, c.Status)
	rf, err := e.Payouts.CreateRefund(ctx, payouts.RefundRequest{MerchantID: "m1", ChargeID: ch.ID,
		Amount: money.MustParse("5", "KWD")})
	require.NoError(t, err)
	ra := resolve(hangThenExecute(rf.CurrentAttemptID))
	require.EqualValues(t, 5000, fake.Object(ra.ProviderID)["amount"])

	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}
