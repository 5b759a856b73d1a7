// Package money is saldo's representation of an amount of money: an exact
// decimal (shopspring/decimal, never a float) together with its ISO 4217
// currency, whose minor units bound how many decimal places an amount may
// carry.
//
// Amounts enter the system only through strings (Parse, or JSON where the
// amount is a string), so no float ever touches a value. Input that is not a
// plain decimal ("1e3", "NaN", " 1", "1,00", ".5"), that has more decimal
// places than the currency allows ("10.001" BRL, "1.5" JPY), or that names a
// currency saldo does not know is refused with a typed error that names the
// input. Arithmetic between amounts of different currencies is refused with
// ErrCurrencyMismatch rather than silently converted.
package money

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Currency is an ISO 4217 currency known to saldo. The zero Currency is not a
// valid currency; obtain one from LookupCurrency or the package variables
// (BRL, USD, ...). Currencies are comparable with ==.
type Currency struct {
	code  string
	minor int32
}

// Code returns the ISO 4217 alphabetic code, e.g. "BRL".
func (c Currency) Code() string { return c.code }

// MinorUnits returns the number of decimal places the currency uses: 2 for
// BRL, 0 for JPY, 3 for KWD.
func (c Currency) MinorUnits() int32 { return c.minor }

// String returns the code, or "" for the zero Currency.
func (c Currency) String() string { return c.code }

// IsZero reports whether c is the zero (invalid) Currency.
func (c Currency) IsZero() bool { return c.code == "" }

// The currencies saldo knows. Add a currency here (and only here) to accept
// it everywhere.
var (
	BRL = Currency{"BRL", 2}
	USD = Currency{"USD", 2}
	EUR = Currency{"EUR", 2}
	GBP = Currency{"GBP", 2}
	JPY = Currency{"JPY", 0}
	CHF = Currency{"CHF", 2}
	CAD = Currency{"CAD", 2}
	AUD = Currency{"AUD", 2}
	MXN = Currency{"MXN", 2}
	ARS = Currency{"ARS", 2}
	CLP = Currency{"CLP", 0}
	COP = Currency{"COP", 2}
	KRW = Currency{"KRW", 0}
	KWD = Currency{"KWD", 3}
	BHD = Currency{"BHD", 3}
)

var currencies = func() map[string]Currency {
	m := map[string]Currency{}
	for _, c := range []Currency{BRL, USD, EUR, GBP, JPY, CHF, CAD, AUD, MXN, ARS, CLP, COP, KRW, KWD, BHD} {
		m[c.code] = c
	}
	return m
}()

// ErrUnknownCurrency is returned (wrapped) for a currency code saldo does not
// know. Codes are case-sensitive: "brl" is unknown.
var ErrUnknownCurrency = errors.New("money: unknown currency")

// CurrencyError names the offending currency code; it matches
// ErrUnknownCurrency with errors.Is.
type CurrencyError struct {
	Code string
}

func (e *CurrencyError) Error() string {
	return fmt.Sprintf("money: unknown currency %q", e.Code)
}

// Unwrap makes errors.Is(err, ErrUnknownCurrency) true.
func (e *CurrencyError) Unwrap() error { return ErrUnknownCurrency }

// LookupCurrency returns the currency with the given ISO 4217 code, or a
// *CurrencyError (errors.Is ErrUnknownCurrency).
func LookupCurrency(code string) (Currency, error) {
	c, ok := currencies[code]
	if !ok {
		return Currency{}, &CurrencyError{Code: code}
	}
	return c, nil
}

// Currencies returns every known currency, sorted by code.
func Currencies() []Currency {
	out := make([]Currency, 0, len(currencies))
	for _, c := range currencies {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].code < out[j].code })
	return out
}

// MarshalText encodes the currency as its code.
func (c Currency) MarshalText() ([]byte, error) {
	if c.IsZero() {
		return nil, errors.New("money: cannot encode the zero Currency")
	}
	return []byte(c.code), nil
}

// UnmarshalText accepts a known code only.
func (c *Currency) UnmarshalText(b []byte) error {
	cur, err := LookupCurrency(strings.Clone(string(b)))
	if err != nil {
		return err
	}
	*c = cur
	return nil
}
