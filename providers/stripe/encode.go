package stripe

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/shopspring/decimal"
	stripego "github.com/stripe/stripe-go/v85"
	"github.com/stripe/stripe-go/v85/form"

	"github.com/saldo/saldo/providers"
)

// Stripe's currency rules (https://docs.stripe.com/currencies): amounts are
// integers in the currency's minor unit.
var (
	// zeroDecimal currencies are sent as whole units (500 JPY is 500).
	zeroDecimal = set("BIF", "CLP", "DJF", "GNF", "JPY", "KMF", "KRW", "MGA", "PYG", "RWF", "UGX", "VND",
		"VUV", "XAF", "XOF", "XPF")
	// threeDecimal currencies are sent in thousandths whose last digit is 0
	// ("these API calls require the least-significant digit to be 0"):
	// 5.124 KWD is refused, 5.12 KWD is 5120.
	threeDecimal = set("BHD", "JOD", "KWD", "OMR", "TND")
	// wholeUnits are two-decimal in the API but charged in whole units only
	// (amount divisible by 100): ISK everywhere; HUF and TWD for payouts.
	wholeUnitsAlways = set("ISK")
	wholeUnitsPayout = set("HUF", "TWD")
)

// maxChargeMinor: "The amount value supports up to eight digits".
const maxChargeMinor = 99999999

func set(codes ...string) map[string]bool {
	m := make(map[string]bool, len(codes))
	for _, c := range codes {
		m[c] = true
	}
	return m
}

var (
	currencyRe = regexp.MustCompile(`^[A-Z]{3}$`)
	amountRe   = regexp.MustCompile(`^(0|[1-9][0-9]{0,17})(\.[0-9]{1,8})?$`)
	accountRe  = regexp.MustCompile(`^acct_[A-Za-z0-9]{1,250}$`)
	piRe       = regexp.MustCompile(`^pi_[A-Za-z0-9]{1,250}$`)
	// baRe: an external bank account (ba_...) attached to the platform's
	// Stripe account, a payout's destination.
	baRe = regexp.MustCompile(`^ba_[A-Za-z0-9]{1,250}$`)
	// pmRe: a PaymentMethod id (pm_...) or, for saldo's tokenised cards
	// (charges takes "tok_..."), a legacy card token, Card or Source id,
	// which PaymentIntents take in payment_method for backward
	// compatibility (Stripe is ending support for tokens: prefer pm_).
	pmRe = regexp.MustCompile(`^(pm|tok|card|src)_[A-Za-z0-9_]{1,250}$`)
)

// exponent is the number of decimal places Stripe's minor unit stands for.
func exponent(cur string) int32 {
	switch {
	case zeroDecimal[cur]:
		return 0
	case threeDecimal[cur]:
		return 3
	}
	return 2
}

// toMinor turns a major-unit decimal string into Stripe's integer amount,
// refusing what Stripe would refuse for this currency and operation.
func toMinor(amount, cur string, op providers.Operation) (int64, error) {
	if !currencyRe.MatchString(cur) {
		return 0, fmt.Errorf("%w: currency %q: want an upper-case ISO 4217 code", providers.ErrInvalidInput, cur)
	}
	if !amountRe.MatchString(amount) {
		return 0, fmt.Errorf("%w: amount %q: want a plain positive decimal", providers.ErrInvalidInput, amount)
	}
	d, err := decimal.NewFromString(amount)
	if err != nil || !d.IsPositive() {
		return 0, fmt.Errorf("%w: amount %q: must be positive", providers.ErrInvalidInput, amount)
	}
	exp := exponent(cur)
	shifted := d.Shift(exp)
	if !shifted.IsInteger() {
		return 0, fmt.Errorf("%w: amount %s %s: %s takes at most %d decimal places at Stripe", providers.ErrInvalidInput,
			amount, cur, cur, exp)
	}
	if !shifted.LessThanOrEqual(decimal.NewFromInt(1 << 53)) {
		return 0, fmt.Errorf("%w: amount %s %s is too large", providers.ErrInvalidInput, amount, cur)
	}
	minor := shifted.IntPart()
	switch {
	case exp == 3 && minor%10 != 0:
		return 0, fmt.Errorf("%w: amount %s %s: Stripe needs the last of the three decimals to be 0", providers.ErrInvalidInput, amount, cur)
	case (wholeUnitsAlways[cur] || (wholeUnitsPayout[cur] && op == providers.OpBankPayout)) && minor%100 != 0:
		return 0, fmt.Errorf("%w: amount %s %s: Stripe takes whole units of %s here", providers.ErrInvalidInput, amount, cur, cur)
	case op == providers.OpCardCharge && minor > maxChargeMinor:
		return 0, fmt.Errorf("%w: amount %s %s: a Stripe charge takes at most eight digits", providers.ErrInvalidInput, amount, cur)
	}
	return minor, nil
}

// toMajor turns Stripe's integer amount back into saldo's decimal string.
func toMajor(minor int64, cur string) string {
	cur = strings.ToUpper(cur)
	exp := exponent(cur)
	return decimal.New(minor, -exp).StringFixed(exp)
}

// metadata is in.Metadata plus the reference, within Stripe's limits (50
// keys, keys of at most 40 characters without square brackets, values of at
// most 500).
func metadata(in map[string]string, reference string, extra map[string]string) (map[string]string, error) {
	m := make(map[string]string, len(in)+1+len(extra))
	for k, v := range in {
		m[k] = v
	}
	for k, v := range extra {
		if _, ok := m[k]; ok {
			return nil, fmt.Errorf("%w: metadata key %q is saldo's", providers.ErrInvalidInput, k)
		}
		m[k] = v
	}
	if _, ok := m[MetadataReference]; ok {
		return nil, fmt.Errorf("%w: metadata key %q is saldo's", providers.ErrInvalidInput, MetadataReference)
	}
	m[MetadataReference] = reference
	if len(m) > 50 {
		return nil, fmt.Errorf("%w: Stripe takes at most 50 metadata keys", providers.ErrInvalidInput)
	}
	for k, v := range m {
		if k == "" || utf8.RuneCountInString(k) > 40 || strings.ContainsAny(k, "[]") {
			return nil, fmt.Errorf("%w: metadata key %q: 1 to 40 characters, no square brackets", providers.ErrInvalidInput, k)
		}
		if utf8.RuneCountInString(v) > 500 {
			return nil, fmt.Errorf("%w: metadata %q: value longer than 500 characters", providers.ErrInvalidInput, k)
		}
	}
	return m, nil
}

// EncodePayload builds the form-encoded body of the create request for
// in.Operation (stripe-go's params types, encoded by its form package:
// struct field order, metadata keys sorted, so the bytes are a pure
// function of in and reference, R5). It refuses, before anything is stored
// or sent, what Stripe would refuse: unknown currencies' shapes, more
// decimals than Stripe's minor unit, a three-decimal amount not ending in
// 0, fractional ISK, a charge over eight digits, a refund of anything but
// a PaymentIntent, a transfer to anything but acct_..., a payout to
// anything but a bank account attached to the Stripe account (ba_...).
func (p *Provider) EncodePayload(in providers.OperationInput, reference string) ([]byte, error) {
	if !in.Operation.Valid() || !p.caps.Supports(in.Operation) {
		return nil, fmt.Errorf("%w: %s at stripe", providers.ErrUnsupported, in.Operation)
	}
	if reference == "" || utf8.RuneCountInString(reference) > 500 || strings.ContainsAny(reference, "'\\") {
		return nil, fmt.Errorf("%w: reference %q", providers.ErrInvalidInput, reference)
	}
	if in.ExpiresIn != 0 || in.PayerName != "" || in.PayerTaxID != "" {
		return nil, fmt.Errorf("%w: expiry and payer only apply to pix_charge", providers.ErrInvalidInput)
	}
	if utf8.RuneCountInString(in.Description) > 1000 {
		return nil, fmt.Errorf("%w: description longer than 1000 characters", providers.ErrInvalidInput)
	}
	minor, err := toMinor(in.Amount, in.Currency, in.Operation)
	if err != nil {
		return nil, err
	}
	cur := strings.ToLower(in.Currency)
	desc := optional(in.Description)
	var params any
	switch in.Operation {
	case providers.OpCardCharge:
		if in.Destination != nil || in.ChargeProviderID != "" || in.ChargeReference != "" {
			return nil, fmt.Errorf("%w: a card charge has no destination or charge", providers.ErrInvalidInput)
		}
		if !pmRe.MatchString(in.CardToken) {
			return nil, fmt.Errorf("%w: card_token: want a Stripe PaymentMethod id (pm_...) or card token (tok_...)", providers.ErrInvalidInput)
		}
		md, err := metadata(in.Metadata, reference, nil)
		if err != nil {
			return nil, err
		}
		params = &stripego.PaymentIntentParams{
			Amount:        stripego.Int64(minor),
			Currency:      stripego.String(cur),
			PaymentMethod: stripego.String(in.CardToken),
			// Card only: with automatic payment methods a redirect-based
			// method would need a return_url.
			PaymentMethodTypes: []*string{stripego.String("card")},
			Confirm:            stripego.Bool(true),
			CaptureMethod:      stripego.String(string(stripego.PaymentIntentCaptureMethodAutomatic)),
			// Nobody is present to authenticate: a card that asks for 3DS
			// is a decline (402), not a PaymentIntent waiting forever.
			ErrorOnRequiresAction: stripego.Bool(true),
			Description:           desc,
			Metadata:              md,
		}
	case providers.OpRefund:
		if in.Destination != nil || in.CardToken != "" {
			return nil, fmt.Errorf("%w: a refund has no destination or card", providers.ErrInvalidInput)
		}
		if !piRe.MatchString(in.ChargeProviderID) {
			return nil, fmt.Errorf("%w: charge_provider_id: want the PaymentIntent id (pi_...) of a Stripe card charge", providers.ErrInvalidInput)
		}
		extra := map[string]string{}
		if in.Description != "" {
			extra["saldo_description"] = in.Description // a Refund has no description
		}
		if in.ChargeReference != "" {
			extra["saldo_charge_reference"] = in.ChargeReference
		}
		md, err := metadata(in.Metadata, reference, extra)
		if err != nil {
			return nil, err
		}
		params = &stripego.RefundParams{
			PaymentIntent: stripego.String(in.ChargeProviderID),
			Amount:        stripego.Int64(minor),
			Metadata:      md,
		}
	case providers.OpAccountTransfer:
		d := in.Destination
		if d == nil || d.PixKey != nil || d.BankAccount != nil || !accountRe.MatchString(d.StripeAccount) {
			return nil, fmt.Errorf("%w: destination: a transfer goes to a Stripe connected account (stripe_account acct_...)", providers.ErrInvalidInput)
		}
		if in.CardToken != "" || in.ChargeProviderID != "" || in.ChargeReference != "" {
			return nil, fmt.Errorf("%w: a transfer has no card or charge", providers.ErrInvalidInput)
		}
		md, err := metadata(in.Metadata, reference, nil)
		if err != nil {
			return nil, err
		}
		params = &stripego.TransferParams{
			Amount:      stripego.Int64(minor),
			Currency:    stripego.String(cur),
			Destination: stripego.String(d.StripeAccount),
			// One group per transfer, named by our reference: Lookup lists
			// GET /v1/transfers?transfer_group=<reference>, exact and not
			// eventually consistent (transfers are not searchable).
			TransferGroup: stripego.String(reference),
			Description:   desc,
			Metadata:      md,
		}
	case providers.OpBankPayout:
		d := in.Destination
		if d == nil || d.PixKey != nil || d.BankAccount != nil || d.StripeAccount != "" || !baRe.MatchString(d.StripeBankAccount) {
			return nil, fmt.Errorf("%w: destination: a Stripe payout goes to a bank account attached to the platform's Stripe account (stripe_bank_account ba_...); it cannot pay a Pix key, another bank account or a connected account (use account_transfer)", providers.ErrInvalidInput)
		}
		if in.CardToken != "" || in.ChargeProviderID != "" || in.ChargeReference != "" {
			return nil, fmt.Errorf("%w: a payout has no card or charge", providers.ErrInvalidInput)
		}
		md, err := metadata(in.Metadata, reference, nil)
		if err != nil {
			return nil, err
		}
		params = &stripego.PayoutParams{
			Amount:   stripego.Int64(minor),
			Currency: stripego.String(cur),
			// The external account to pay; it must be in the currency
			// (Stripe refuses a mismatch with a definitive 400).
			Destination: stripego.String(d.StripeBankAccount),
			Description: desc,
			Metadata:    md,
		}
	default:
		return nil, fmt.Errorf("%w: %s at stripe", providers.ErrUnsupported, in.Operation)
	}
	var v form.Values
	form.AppendTo(&v, params)
	return []byte(v.Encode()), nil
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return stripego.String(s)
}
