package charges_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/money"
)

// Property: for any amount (including ones that do not divide evenly), any
// fee rule and any split rules that fit, the parts of a charge sum EXACTLY
// to the charged amount, every part has the currency's minor units, nothing
// is negative, the fee never exceeds the amount and every percentage split
// is floored (never more than its exact share). Splits that do not fit are
// refused with a field error, never silently trimmed. BRL (2 decimals), JPY
// (0) and KWD (3).
func TestBreakdownSumsExactly(t *testing.T) {
	t.Parallel()
	currencies := []money.Currency{money.BRL, money.JPY, money.KWD}
	var fitted, refused atomic.Int64
	t.Cleanup(func() {
		// The generator must exercise both sides: breakdowns that fit and
		// splits refused for not fitting.
		require.Greater(t, fitted.Load(), int64(20))
		require.Greater(t, refused.Load(), int64(0))
	})
	rapid.Check(t, func(rt *rapid.T) {
		cur := rapid.SampledFrom(currencies).Draw(rt, "currency")
		minor := cur.MinorUnits()
		units := rapid.Int64Range(1, 10_000_000_000).Draw(rt, "units")
		gross := decimal.New(units, -minor)
		fee := charges.FeeRule{
			Percent: decimal.New(rapid.Int64Range(0, 1_000_000).Draw(rt, "fee_pct_e4"), -4),
			Fixed:   decimal.New(rapid.Int64Range(0, 100_000).Draw(rt, "fee_fixed_units"), -minor),
		}
		n := rapid.IntRange(0, 5).Draw(rt, "splits")
		var rules []charges.SplitRule
		for i := range n {
			r := charges.SplitRule{RecipientID: "r" + string(rune('a'+i))}
			if rapid.Bool().Draw(rt, "percent?") {
				r.Percent = decimal.New(rapid.Int64Range(1, 400_000).Draw(rt, "pct_e4"), -4)
			} else {
				r.Amount = decimal.New(rapid.Int64Range(1, max(1, units/8)).Draw(rt, "fixed_units"), -minor)
			}
			rules = append(rules, r)
		}
		b, err := charges.Compute(gross, cur, fee, rules)
		if err != nil {
			var fe *charges.FieldError
			require.True(rt, errors.As(err, &fe), "%v", err)
			require.Regexp(rt, `^splits\[\d\]\.(percent|amount)$`, fe.Field)
			refused.Add(1)
			return
		}
		fitted.Add(1)
		sum := b.Fee.Add(b.MerchantNet)
		for i, s := range b.Splits {
			sum = sum.Add(s.Amount)
			require.False(rt, s.Amount.IsNegative())
			require.True(rt, s.Amount.Equal(s.Amount.Round(minor)), "split %d %s", i, s.Amount)
			if s.Rule.Percent.IsPositive() {
				exact := b.Net.Mul(s.Rule.Percent).Div(decimal.NewFromInt(100))
				require.True(rt, s.Amount.LessThanOrEqual(exact), "floored: %s <= %s", s.Amount, exact)
				require.True(rt, exact.Sub(s.Amount).LessThan(decimal.New(1, -minor)))
			} else {
				require.True(rt, s.Amount.Equal(s.Rule.Amount))
			}
		}
		require.True(rt, sum.Equal(gross), "parts %s != gross %s", sum, gross)
		require.True(rt, b.Fee.Add(b.Net).Equal(gross))
		require.False(rt, b.Fee.IsNegative())
		require.True(rt, b.Fee.LessThanOrEqual(gross))
		require.False(rt, b.MerchantNet.IsNegative())
		require.True(rt, b.Fee.Equal(b.Fee.Round(minor)))
		require.True(rt, b.MerchantNet.Equal(b.MerchantNet.Round(minor)))
		for _, m := range []money.Currency{cur} {
			_, err := money.New(b.MerchantNet, m)
			require.NoError(rt, err)
		}
	})
}

// The rounding rule on fixed examples: half-up fee, floored percentage
// splits, remainder to the merchant.
func TestComputeExamples(t *testing.T) {
	t.Parallel()
	d := decimal.RequireFromString
	b, err := charges.Compute(d("10.01"), money.BRL, charges.FeeRule{Percent: d("2.5")}, nil)
	require.NoError(t, err)
	require.Equal(t, "0.25", b.Fee.StringFixed(2), "0.25025 rounds half-up to 0.25")
	b, err = charges.Compute(d("10.02"), money.BRL, charges.FeeRule{Percent: d("2.5")}, nil)
	require.NoError(t, err)
	require.Equal(t, "0.25", b.Fee.StringFixed(2), "0.2505 -> 0.25")
	b, err = charges.Compute(d("10.20"), money.BRL, charges.FeeRule{Percent: d("2.5")}, nil)
	require.NoError(t, err)
	require.Equal(t, "0.26", b.Fee.StringFixed(2), "0.255 rounds half-up to 0.26")
	b, err = charges.Compute(d("1.00"), money.BRL, charges.FeeRule{Fixed: d("5.00")}, nil)
	require.NoError(t, err)
	require.Equal(t, "1.00", b.Fee.StringFixed(2), "a fee never exceeds the amount")
	require.True(t, b.MerchantNet.IsZero())
	b, err = charges.Compute(d("100"), money.JPY, charges.FeeRule{}, []charges.SplitRule{
		{RecipientID: "a", Percent: d("33.3333")}, {RecipientID: "b", Percent: d("33.3333")}, {RecipientID: "c", Percent: d("33.3333")}})
	require.NoError(t, err)
	require.Equal(t, "33", b.Splits[0].Amount.String())
	require.Equal(t, "1", b.MerchantNet.String(), "the remainder goes to the merchant")
}
