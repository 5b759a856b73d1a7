package money_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/money"
)

func TestParse(t *testing.T) {
	t.Parallel()

	tests := []struct {
		in, cur string
		want    string // Format() of the result; "" when an error is expected
		err     error
	}{
		{"10.50", "BRL", "10.50", nil},
		{"10.5", "BRL", "10.50", nil},
		{"10", "BRL", "10.00", nil},
		{"0", "BRL", "0.00", nil},
		{"0.01", "USD", "0.01", nil},
		{"-3.00", "EUR", "-3.00", nil},
		{"007.10", "GBP", "7.10", nil},
		{"1500", "JPY", "1500", nil},
		{"1.234", "KWD", "1.234", nil},
		{"99999999999999999999.99", "BRL", "99999999999999999999.99", nil},

		{"10.001", "BRL", "", money.ErrTooPrecise},
		{"10.500", "BRL", "", money.ErrTooPrecise}, // trailing zeros still count as written
		{"1.5", "JPY", "", money.ErrTooPrecise},
		{"1.0", "JPY", "", money.ErrTooPrecise},
		{"1.2345", "KWD", "", money.ErrTooPrecise},

		{"", "BRL", "", money.ErrInvalidAmount},
		{"-", "BRL", "", money.ErrInvalidAmount},
		{"+1", "BRL", "", money.ErrInvalidAmount},
		{"1e3", "BRL", "", money.ErrInvalidAmount},
		{"1E3", "BRL", "", money.ErrInvalidAmount},
		{"NaN", "BRL", "", money.ErrInvalidAmount},
		{"nan", "BRL", "", money.ErrInvalidAmount},
		{"Infinity", "BRL", "", money.ErrInvalidAmount},
		{"-Inf", "BRL", "", money.ErrInvalidAmount},
		{" 1", "BRL", "", money.ErrInvalidAmount},
		{"1 ", "BRL", "", money.ErrInvalidAmount},
		{"1,00", "BRL", "", money.ErrInvalidAmount},
		{"1.000,00", "BRL", "", money.ErrInvalidAmount},
		{"1.", "BRL", "", money.ErrInvalidAmount},
		{".5", "BRL", "", money.ErrInvalidAmount},
		{"1..0", "BRL", "", money.ErrInvalidAmount},
		{"1.0.0", "BRL", "", money.ErrInvalidAmount},
		{"--1", "BRL", "", money.ErrInvalidAmount},
		{"0x10", "BRL", "", money.ErrInvalidAmount},
		{"１", "BRL", "", money.ErrInvalidAmount}, // fullwidth digit
		{"1_000", "BRL", "", money.ErrInvalidAmount},
		{strings.Repeat("9", 41), "BRL", "", money.ErrInvalidAmount},
		{strings.Repeat("9", 21), "BRL", "", money.ErrInvalidAmount},

		{"10.00", "XXX", "", money.ErrUnknownCurrency},
		{"10.00", "brl", "", money.ErrUnknownCurrency},
		{"10.00", "", "", money.ErrUnknownCurrency},
	}
	for _, tt := range tests {
		t.Run(tt.in+"_"+tt.cur, func(t *testing.T) {
			t.Parallel()
			a, err := money.Parse(tt.in, tt.cur)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				var pe *money.ParseError
				require.ErrorAs(t, err, &pe)
				require.Equal(t, tt.in, pe.Input)
				require.Equal(t, tt.cur, pe.Currency)
				require.False(t, a.IsValid())
				// The three reasons are distinct.
				for _, other := range []error{money.ErrInvalidAmount, money.ErrTooPrecise, money.ErrUnknownCurrency} {
					if other != tt.err {
						require.NotErrorIs(t, err, other)
					}
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, a.Format())
			require.Equal(t, tt.cur, a.Currency().Code())
		})
	}
}

func TestParseErrorNamesInput(t *testing.T) {
	t.Parallel()
	_, err := money.Parse("12,50", "BRL")
	require.ErrorContains(t, err, `"12,50"`)
	_, err = money.Parse("1.001", "BRL")
	require.ErrorContains(t, err, `"1.001"`)
	require.ErrorContains(t, err, "BRL")
	_, err = money.Parse("1", "ZZZ")
	require.ErrorContains(t, err, `"ZZZ"`)
	var ce *money.CurrencyError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "ZZZ", ce.Code)
}

func TestParsePositive(t *testing.T) {
	t.Parallel()
	a, err := money.ParsePositive("0.01", "BRL")
	require.NoError(t, err)
	require.Equal(t, "0.01 BRL", a.String())
	for _, in := range []string{"0", "0.00", "-1.00"} {
		_, err := money.ParsePositive(in, "BRL")
		require.ErrorIs(t, err, money.ErrInvalidAmount, in)
	}
	_, err = money.ParsePositive("1.001", "BRL")
	require.ErrorIs(t, err, money.ErrTooPrecise)
}

func TestCurrencies(t *testing.T) {
	t.Parallel()
	for code, minor := range map[string]int32{"BRL": 2, "USD": 2, "EUR": 2, "GBP": 2, "JPY": 0, "KWD": 3} {
		c, err := money.LookupCurrency(code)
		require.NoError(t, err)
		require.Equal(t, minor, c.MinorUnits(), code)
		require.Equal(t, code, c.Code())
	}
	require.Equal(t, money.BRL, must(money.LookupCurrency("BRL")))
	all := money.Currencies()
	require.GreaterOrEqual(t, len(all), 5)
	for i := 1; i < len(all); i++ {
		require.Less(t, all[i-1].Code(), all[i].Code())
	}
	var c money.Currency
	require.True(t, c.IsZero())
	require.ErrorIs(t, c.UnmarshalText([]byte("EUR?")), money.ErrUnknownCurrency)
	require.NoError(t, c.UnmarshalText([]byte("EUR")))
	require.Equal(t, money.EUR, c)
}

func TestArithmetic(t *testing.T) {
	t.Parallel()
	a := money.MustParse("10.50", "BRL")
	b := money.MustParse("0.75", "BRL")
	usd := money.MustParse("1.00", "USD")

	sum, err := a.Add(b)
	require.NoError(t, err)
	require.Equal(t, "11.25 BRL", sum.String())

	diff, err := b.Sub(a)
	require.NoError(t, err)
	require.Equal(t, "-9.75", diff.Format())
	require.True(t, diff.IsNegative())
	require.Equal(t, "9.75", diff.Abs().Format())
	require.Equal(t, "9.75", diff.Neg().Format())

	c, err := a.Cmp(b)
	require.NoError(t, err)
	require.Equal(t, 1, c)
	c, err = b.Cmp(a)
	require.NoError(t, err)
	require.Equal(t, -1, c)

	_, err = a.Add(usd)
	require.ErrorIs(t, err, money.ErrCurrencyMismatch)
	_, err = a.Sub(usd)
	require.ErrorIs(t, err, money.ErrCurrencyMismatch)
	_, err = a.Cmp(usd)
	require.ErrorIs(t, err, money.ErrCurrencyMismatch)
	_, err = money.Amount{}.Add(money.Amount{})
	require.ErrorIs(t, err, money.ErrUnknownCurrency)

	require.True(t, money.MustParse("10.5", "BRL").Equal(a))
	require.False(t, money.MustParse("10.50", "USD").Equal(a))
	require.True(t, money.Zero(money.BRL).IsZero())
	require.True(t, a.IsPositive())
}

func TestNewAndMinorUnits(t *testing.T) {
	t.Parallel()
	a, err := money.New(decimal.RequireFromString("10.500"), money.BRL)
	require.NoError(t, err)
	require.Equal(t, "10.50", a.Format())
	_, err = money.New(decimal.RequireFromString("10.505"), money.BRL)
	require.ErrorIs(t, err, money.ErrTooPrecise)
	_, err = money.New(decimal.RequireFromString("1.5"), money.JPY)
	require.ErrorIs(t, err, money.ErrTooPrecise)
	_, err = money.New(decimal.NewFromInt(1), money.Currency{})
	require.ErrorIs(t, err, money.ErrUnknownCurrency)

	require.Equal(t, "10.50 BRL", money.FromMinorUnits(1050, money.BRL).String())
	require.Equal(t, "-0.01 BRL", money.FromMinorUnits(-1, money.BRL).String())
	require.Equal(t, "5 JPY", money.FromMinorUnits(5, money.JPY).String())
	require.Equal(t, "1.005 KWD", money.FromMinorUnits(1005, money.KWD).String())

	n, err := money.MustParse("10.5", "BRL").MinorUnits()
	require.NoError(t, err)
	require.EqualValues(t, 1050, n)
	n, err = money.MustParse("-1500", "JPY").MinorUnits()
	require.NoError(t, err)
	require.EqualValues(t, -1500, n)
	_, err = money.MustParse("99999999999999999999.99", "BRL").MinorUnits()
	require.ErrorIs(t, err, money.ErrInvalidAmount)
}

func TestJSON(t *testing.T) {
	t.Parallel()
	type payout struct {
		Amount money.Amount `json:"amount"`
	}
	b, err := json.Marshal(payout{money.MustParse("10.5", "BRL")})
	require.NoError(t, err)
	require.JSONEq(t, `{"amount":{"amount":"10.50","currency":"BRL"}}`, string(b))

	b, err = json.Marshal(money.MustParse("1500", "JPY"))
	require.NoError(t, err)
	require.Equal(t, `{"amount":"1500","currency":"JPY"}`, string(b))

	var p payout
	require.NoError(t, json.Unmarshal([]byte(`{"amount":{"amount":"0.99","currency":"USD"}}`), &p))
	require.Equal(t, "0.99 USD", p.Amount.String())

	bad := []struct {
		in  string
		err error
	}{
		{`{"amount":10.5,"currency":"BRL"}`, money.ErrInvalidAmount}, // number, not string
		{`{"amount":"1e3","currency":"BRL"}`, money.ErrInvalidAmount},
		{`{"amount":"10.001","currency":"BRL"}`, money.ErrTooPrecise},
		{`{"amount":"10.00","currency":"XBT"}`, money.ErrUnknownCurrency},
		{`{"amount":"10.00"}`, money.ErrUnknownCurrency},
		{`{"currency":"BRL"}`, money.ErrInvalidAmount},
		{`{"amount":null,"currency":"BRL"}`, money.ErrInvalidAmount},
		{`"10.00"`, money.ErrInvalidAmount},
		{`[]`, money.ErrInvalidAmount},
	}
	for _, tt := range bad {
		var a money.Amount
		err := json.Unmarshal([]byte(tt.in), &a)
		require.ErrorIs(t, err, tt.err, tt.in)
		require.False(t, a.IsValid(), tt.in)
	}

	_, err = json.Marshal(money.Amount{})
	require.Error(t, err)
}

// FuzzParse checks that Parse never panics, that whatever it accepts
// round-trips through Format and JSON unchanged in value, and that it never
// accepts more decimal places than the currency allows.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"10.50", "0", "-1.5", "1e3", "NaN", ".5", "1.", "007", "1.001", " 1", "１", "9999999999999999999999999.99"} {
		f.Add(s, "BRL")
		f.Add(s, "JPY")
	}
	f.Fuzz(func(t *testing.T, s, cur string) {
		a, err := money.Parse(s, cur)
		if err != nil {
			if !errors.Is(err, money.ErrInvalidAmount) && !errors.Is(err, money.ErrTooPrecise) && !errors.Is(err, money.ErrUnknownCurrency) {
				t.Fatalf("Parse(%q,%q): untyped error %v", s, cur, err)
			}
			return
		}
		d, derr := decimal.NewFromString(s)
		if derr != nil || !d.Equal(a.Decimal()) {
			t.Fatalf("Parse(%q) = %s, decimal says %v %v", s, a.Decimal(), d, derr)
		}
		if !a.Decimal().Round(a.Currency().MinorUnits()).Equal(a.Decimal()) {
			t.Fatalf("Parse(%q,%q) accepted too many places", s, cur)
		}
		back, err := money.Parse(a.Format(), cur)
		if err != nil || !back.Equal(a) {
			t.Fatalf("round trip of %q via %q: %v %v", s, a.Format(), back, err)
		}
		js, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		var fromJSON money.Amount
		if err := json.Unmarshal(js, &fromJSON); err != nil || !fromJSON.Equal(a) {
			t.Fatalf("json round trip of %q: %s %v", s, js, err)
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A decimal that is not an amount (a split percentage) follows the amount
// grammar: "1e2" was read as 100 while amounts refuse exponents (issue 13).
func TestParseDecimal(t *testing.T) {
	for _, s := range []string{"0", "10", "12.5", "99.9999", "-1.5"} {
		d, err := money.ParseDecimal(s)
		require.NoError(t, err, s)
		require.True(t, d.Equal(decimal.RequireFromString(s)), s)
	}
	for _, s := range []string{"", "1e2", "1E2", "+10", " 10", "10 ", "10.", ".5", "1,5", "NaN", "Infinity", "0x10", strings.Repeat("9", 100)} {
		_, err := money.ParseDecimal(s)
		require.ErrorIs(t, err, money.ErrInvalidAmount, "%q", s)
	}
}
