package money

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/shopspring/decimal"
)

// Sentinel errors; every error returned by this package matches one of them
// with errors.Is.
var (
	// ErrInvalidAmount: the input is not a plain decimal number (empty,
	// exponent, NaN/Inf, spaces, thousands separators, a JSON number instead
	// of a string, too long, ...).
	ErrInvalidAmount = errors.New("money: invalid amount")
	// ErrTooPrecise: more decimal places than the currency's minor units.
	ErrTooPrecise = errors.New("money: more decimal places than the currency allows")
	// ErrCurrencyMismatch: arithmetic or comparison between two currencies.
	ErrCurrencyMismatch = errors.New("money: currency mismatch")
)

// MaxInputLength bounds the length of an amount string and MaxIntegerDigits
// the digits before the decimal point. Real amounts are far shorter; the
// bounds keep hostile input from costing anything and keep every accepted
// amount inside PostgreSQL numeric and int64-free arithmetic comfortably.
const (
	MaxInputLength   = 40
	MaxIntegerDigits = 20
)

// ParseError describes input Parse refused. It names the input and the
// currency and wraps the reason (ErrInvalidAmount, ErrTooPrecise or
// ErrUnknownCurrency).
type ParseError struct {
	Input    string
	Currency string
	Err      error
}

func (e *ParseError) Error() string {
	in := e.Input
	if len(in) > MaxInputLength {
		in = in[:MaxInputLength] + "..."
	}
	switch {
	case errors.Is(e.Err, ErrUnknownCurrency):
		return fmt.Sprintf("money: amount %q: unknown currency %q", in, e.Currency)
	case errors.Is(e.Err, ErrTooPrecise):
		return fmt.Sprintf("money: amount %q has more decimal places than %s allows", in, e.Currency)
	}
	return fmt.Sprintf("money: amount %q (%s) is not a plain decimal number", in, e.Currency)
}

// Unwrap returns the reason.
func (e *ParseError) Unwrap() error { return e.Err }

// Amount is an exact amount of money in one currency. The zero Amount has no
// currency and is invalid for everything but IsZero/IsValid; obtain amounts
// from Parse, New, FromMinorUnits or Zero.
//
// JSON form: {"amount":"10.50","currency":"BRL"}; the amount is always a
// string, written with exactly the currency's minor units.
type Amount struct {
	value    decimal.Decimal
	currency Currency
}

// Parse reads s as an amount of the currency with code currencyCode.
//
// Accepted: an optional '-' sign, one or more digits, and optionally a '.'
// followed by one to MinorUnits digits ("10", "10.5", "10.50", "-3.00",
// "0.01"). Refused: anything else, including a leading '+', exponents, "NaN",
// "Infinity", surrounding spaces, ",", "1.", ".5", and more decimal places than
// the currency allows even when they are zeros ("10.500" BRL), so that what a
// client sent is never silently reinterpreted.
func Parse(s, currencyCode string) (Amount, error) {
	cur, err := LookupCurrency(currencyCode)
	if err != nil {
		return Amount{}, &ParseError{Input: s, Currency: currencyCode, Err: err}
	}
	return ParseIn(s, cur)
}

// ParseIn is Parse with an already resolved currency.
func ParseIn(s string, cur Currency) (Amount, error) {
	if cur.IsZero() {
		return Amount{}, &ParseError{Input: s, Currency: "", Err: &CurrencyError{Code: ""}}
	}
	fail := func(err error) (Amount, error) {
		return Amount{}, &ParseError{Input: s, Currency: cur.code, Err: err}
	}
	fracDigits, ok := scanPlain(s)
	if !ok {
		return fail(ErrInvalidAmount)
	}
	if fracDigits > int(cur.minor) {
		return fail(ErrTooPrecise)
	}
	d, err := decimal.NewFromString(s)
	if err != nil { // unreachable after the scan above; kept as a guard
		return fail(ErrInvalidAmount)
	}
	return Amount{value: d, currency: cur}, nil
}

// scanPlain checks that s is a plain decimal as Parse accepts it (an
// optional '-', 1 to MaxIntegerDigits digits, optionally '.' and one or more
// digits) and returns how many decimal places it has.
func scanPlain(s string) (fracDigits int, ok bool) {
	if len(s) == 0 || len(s) > MaxInputLength {
		return 0, false
	}
	i := 0
	if s[0] == '-' {
		i = 1
	}
	intDigits := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
		intDigits++
	}
	if intDigits == 0 || intDigits > MaxIntegerDigits {
		return 0, false
	}
	if i < len(s) {
		if s[i] != '.' {
			return 0, false
		}
		i++
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			fracDigits++
		}
		if fracDigits == 0 || i != len(s) {
			return 0, false
		}
	}
	return fracDigits, true
}

// ParseDecimal reads a plain decimal that is not an amount (a percentage, a
// rate) with exactly the grammar Parse accepts for amounts: no exponent
// ("1e2"), no '+', no surrounding spaces, no "1." or ".5". It returns an
// error matching ErrInvalidAmount otherwise.
func ParseDecimal(s string) (decimal.Decimal, error) {
	if _, ok := scanPlain(s); !ok {
		return decimal.Decimal{}, fmt.Errorf("%w: %q is not a plain decimal such as \"12.5\"", ErrInvalidAmount, s)
	}
	return decimal.NewFromString(s)
}

// ParsePositive is Parse that also refuses zero and negative amounts (with
// ErrInvalidAmount), for places where only a positive amount makes sense
// (a payout, a charge).
func ParsePositive(s, currencyCode string) (Amount, error) {
	a, err := Parse(s, currencyCode)
	if err != nil {
		return Amount{}, err
	}
	if !a.IsPositive() {
		return Amount{}, &ParseError{Input: s, Currency: currencyCode, Err: ErrInvalidAmount}
	}
	return a, nil
}

// New makes an amount from a decimal already in memory (read from the
// database, computed). It refuses a value with more decimal places than the
// currency allows (trailing zeros do not count here: 10.500 is 10.50).
func New(d decimal.Decimal, cur Currency) (Amount, error) {
	if cur.IsZero() {
		return Amount{}, &CurrencyError{Code: ""}
	}
	if !d.Round(cur.minor).Equal(d) {
		return Amount{}, &ParseError{Input: d.String(), Currency: cur.code, Err: ErrTooPrecise}
	}
	return Amount{value: d, currency: cur}, nil
}

// MustParse is Parse for constants in tests and examples; it panics on error.
func MustParse(s, currencyCode string) Amount {
	a, err := Parse(s, currencyCode)
	if err != nil {
		panic(err)
	}
	return a
}

// Zero returns a zero amount of the currency.
func Zero(cur Currency) Amount { return Amount{value: decimal.Zero, currency: cur} }

// FromMinorUnits makes an amount from an integer count of minor units
// (cents): FromMinorUnits(1050, BRL) is 10.50 BRL, FromMinorUnits(5, JPY) is 5 JPY.
func FromMinorUnits(units int64, cur Currency) Amount {
	return Amount{value: decimal.New(units, -cur.minor), currency: cur}
}

// MinorUnits returns the amount as an integer count of minor units (what
// card APIs expect). It fails with ErrInvalidAmount if the count does not fit
// an int64.
func (a Amount) MinorUnits() (int64, error) {
	shifted := a.value.Shift(a.currency.minor)
	bi := shifted.BigInt()
	if !bi.IsInt64() || !decimal.NewFromBigInt(bi, 0).Equal(shifted) {
		return 0, fmt.Errorf("%w: %s does not fit in int64 minor units", ErrInvalidAmount, a)
	}
	return bi.Int64(), nil
}

// Decimal returns the value.
func (a Amount) Decimal() decimal.Decimal { return a.value }

// Currency returns the currency.
func (a Amount) Currency() Currency { return a.currency }

// IsValid reports whether a has a currency (the zero Amount has none).
func (a Amount) IsValid() bool { return !a.currency.IsZero() }

// IsZero reports whether the value is zero.
func (a Amount) IsZero() bool { return a.value.IsZero() }

// IsPositive reports whether the value is > 0.
func (a Amount) IsPositive() bool { return a.value.IsPositive() }

// IsNegative reports whether the value is < 0.
func (a Amount) IsNegative() bool { return a.value.IsNegative() }

// Neg returns -a.
func (a Amount) Neg() Amount { return Amount{value: a.value.Neg(), currency: a.currency} }

// Abs returns |a|.
func (a Amount) Abs() Amount { return Amount{value: a.value.Abs(), currency: a.currency} }

func (a Amount) sameCurrency(b Amount) error {
	if a.currency != b.currency {
		return fmt.Errorf("%w: %s and %s", ErrCurrencyMismatch, a.currency.code, b.currency.code)
	}
	if a.currency.IsZero() {
		return &CurrencyError{Code: ""}
	}
	return nil
}

// Add returns a+b, or ErrCurrencyMismatch.
func (a Amount) Add(b Amount) (Amount, error) {
	if err := a.sameCurrency(b); err != nil {
		return Amount{}, err
	}
	return Amount{value: a.value.Add(b.value), currency: a.currency}, nil
}

// Sub returns a-b, or ErrCurrencyMismatch.
func (a Amount) Sub(b Amount) (Amount, error) {
	if err := a.sameCurrency(b); err != nil {
		return Amount{}, err
	}
	return Amount{value: a.value.Sub(b.value), currency: a.currency}, nil
}

// Cmp returns -1, 0 or +1 as a is less than, equal to or greater than b, or
// ErrCurrencyMismatch.
func (a Amount) Cmp(b Amount) (int, error) {
	if err := a.sameCurrency(b); err != nil {
		return 0, err
	}
	return a.value.Cmp(b.value), nil
}

// Equal reports whether a and b have the same currency and value (10.5 and
// 10.50 are equal).
func (a Amount) Equal(b Amount) bool {
	return a.currency == b.currency && a.value.Equal(b.value)
}

// Format returns the value with exactly the currency's minor units, without
// the currency: "10.50", "-3.00", "1500" (JPY). This is the wire form.
func (a Amount) Format() string { return a.value.StringFixed(a.currency.minor) }

// String returns "10.50 BRL".
func (a Amount) String() string {
	if a.currency.IsZero() {
		return "<invalid amount>"
	}
	return a.Format() + " " + a.currency.code
}

type amountJSON struct {
	Amount   *json.RawMessage `json:"amount"`
	Currency *string          `json:"currency"`
}

// MarshalJSON writes {"amount":"10.50","currency":"BRL"}.
func (a Amount) MarshalJSON() ([]byte, error) {
	if a.currency.IsZero() {
		return nil, errors.New("money: cannot encode an amount without currency")
	}
	return json.Marshal(struct {
		Amount   string `json:"amount"`
		Currency string `json:"currency"`
	}{a.Format(), a.currency.code})
}

// UnmarshalJSON reads {"amount":"10.50","currency":"BRL"}. The amount must be
// a JSON string (a JSON number is refused with ErrInvalidAmount: it may have
// passed through a float somewhere), both fields are required, and the same
// rules as Parse apply.
func (a *Amount) UnmarshalJSON(b []byte) error {
	var in amountJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidAmount, err)
	}
	if in.Currency == nil {
		return &ParseError{Input: string(b), Err: &CurrencyError{Code: ""}}
	}
	if in.Amount == nil {
		return &ParseError{Input: string(b), Currency: *in.Currency, Err: ErrInvalidAmount}
	}
	var s string
	if err := json.Unmarshal(*in.Amount, &s); err != nil {
		return &ParseError{Input: string(*in.Amount), Currency: *in.Currency, Err: ErrInvalidAmount}
	}
	v, err := Parse(s, *in.Currency)
	if err != nil {
		return err
	}
	*a = v
	return nil
}
