package money_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/money"
)

// Edges TestParse does not list: negative zero is zero (never negative, and
// never positive), zeros written past the minor units are still too
// precise, non-ASCII digits and signs are refused, and KWD/JPY round-trip
// through minor units exactly.
func TestParseEdges(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"-0", "-0.00", "-000.0"} {
		a, err := money.Parse(s, "BRL")
		require.NoError(t, err, s)
		require.True(t, a.IsZero(), s)
		require.False(t, a.IsNegative(), s)
		require.Equal(t, "0.00", a.Format(), s)
		_, err = money.ParsePositive(s, "BRL")
		require.ErrorIs(t, err, money.ErrInvalidAmount, s)
	}
	for in, want := range map[[2]string]error{
		{"0.000", "BRL"}:      money.ErrTooPrecise,
		{"0.0", "JPY"}:        money.ErrTooPrecise,
		{"1.2300", "KWD"}:     money.ErrTooPrecise,
		{"٣", "BRL"}:          money.ErrInvalidAmount, // Arabic-Indic digit
		{"1٫5", "BRL"}:        money.ErrInvalidAmount, // Arabic decimal separator
		{"−1", "BRL"}:         money.ErrInvalidAmount, // U+2212 minus
		{"1e-2", "BRL"}:       money.ErrInvalidAmount,
		{"0x1p-2", "BRL"}:     money.ErrInvalidAmount,
		{"1\u00a0000", "BRL"}: money.ErrInvalidAmount,
		{"1.00", "Brl"}:       money.ErrUnknownCurrency,
		{"1.00", " BRL"}:      money.ErrUnknownCurrency,
	} {
		_, err := money.Parse(in[0], in[1])
		require.ErrorIs(t, err, want, "%q %q", in[0], in[1])
	}
	for _, c := range []struct {
		s, cur string
		minor  int64
	}{{"1.230", "KWD", 1230}, {"0.001", "BHD", 1}, {"1500", "JPY", 1500}, {"12345", "CLP", 12345}, {"0.01", "BRL", 1}} {
		a := money.MustParse(c.s, c.cur)
		n, err := a.MinorUnits()
		require.NoError(t, err)
		require.Equal(t, c.minor, n, c.s)
		require.True(t, money.FromMinorUnits(n, a.Currency()).Equal(a), c.s)
	}
}
