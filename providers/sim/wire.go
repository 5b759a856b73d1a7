package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/providers"
)

// Magic values that make the sim decline (see the package doc).
const (
	TokenDecline      = "tok_decline"
	TokenInsufficient = "tok_insufficient"
	TokenExpired      = "tok_expired"
	DeclinedPixKey    = "nokey@sim.invalid"
	ClosedAccount     = "99999999"
)

// currencyDecimals are the currencies the sim accepts and their minor units.
var currencyDecimals = map[string]int32{"BRL": 2, "USD": 2, "EUR": 2, "GBP": 2, "JPY": 0}

// maxAmount bounds any single amount (a real PSP has limits too).
var maxAmount = decimal.RequireFromString("1000000000")

var (
	amountRe    = regexp.MustCompile(`^(0|[1-9][0-9]{0,15})(\.[0-9]{1,8})?$`)
	referenceRe = regexp.MustCompile(`^[a-zA-Z0-9]{1,35}$`)
	txidRe      = regexp.MustCompile(`^[a-zA-Z0-9]{26,35}$`)
	digitsRe    = regexp.MustCompile(`^[0-9]+$`)
	evpRe       = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	phoneRe     = regexp.MustCompile(`^\+[1-9][0-9]{7,14}$`)
	panRe       = regexp.MustCompile(`^[0-9 -]{12,23}$`)
)

// wireRequest is the body of POST /v1/operations. Field order is the byte
// order EncodePayload produces.
type wireRequest struct {
	Operation        providers.Operation    `json:"operation"`
	Reference        string                 `json:"reference"`
	Amount           string                 `json:"amount"`
	Currency         string                 `json:"currency"`
	Destination      *providers.Destination `json:"destination,omitempty"`
	Charge           *wireChargeRef         `json:"charge,omitempty"`
	CardToken        string                 `json:"card_token,omitempty"`
	ExpiresInSeconds int64                  `json:"expires_in_seconds,omitempty"`
	Payer            *wirePayer             `json:"payer,omitempty"`
	Description      string                 `json:"description,omitempty"`
	Metadata         map[string]string      `json:"metadata,omitempty"`
}

type wireChargeRef struct {
	ID        string `json:"id,omitempty"`
	Reference string `json:"reference,omitempty"`
}

type wirePayer struct {
	Name  string `json:"name,omitempty"`
	TaxID string `json:"tax_id,omitempty"`
}

// apiError is an error answer: {"error": {...}, "operation": {...}}.
type apiError struct {
	Status  int    `json:"-"`
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
	// DeclineCode refines card declines (Stripe style).
	DeclineCode string `json:"decline_code,omitempty"`
}

// Error types in error bodies.
const (
	errTypeInvalid     = "invalid_request_error"
	errTypeIdempotency = "idempotency_error"
	errTypeCard        = "card_error"
	errTypeDecline     = "decline"
	errTypeAPI         = "api_error"
	errTypeRateLimit   = "rate_limit_error"
)

// Error codes the adapter reads.
const (
	codeKeyInUse      = "idempotency_key_in_use"
	codeKeyMismatch   = "idempotency_key_mismatch"
	codeDuplicate     = "duplicate"
	codeRateLimited   = "rate_limited"
	codeUnavailable   = "service_unavailable"
	codeInternal      = "internal_error"
	codeInsufficient  = "insufficient_funds"
	codeCardDeclined  = "card_declined"
	codeExpiredCard   = "expired_card"
	codePixKeyUnknown = "pix_key_not_found"
	codeClosed        = "account_closed"
	codeTooLarge      = "amount_too_large"
	codeMissing       = "resource_missing"
	codeCobExpired    = "cob_expired"
	codeCobPaid       = "cob_already_paid"
)

func invalid(param, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: errTypeInvalid, Code: "parameter_invalid",
		Param: param, Message: fmt.Sprintf(format, args...)}
}

type errorBody struct {
	Error     *apiError  `json:"error"`
	Operation *Operation `json:"operation,omitempty"`
}

// opRequest is a validated wireRequest.
type opRequest struct {
	wire      wireRequest
	op        providers.Operation
	reference string
	amount    decimal.Decimal
	currency  string
	expiresIn time.Duration
}

const maxBodyBytes = 1 << 20

// decodeStrict decodes one JSON value, refusing unknown fields and trailing data.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// parseAmount validates a decimal string with at most the currency's decimals.
func parseAmount(param, amount, currency string) (decimal.Decimal, *apiError) {
	decs, ok := currencyDecimals[currency]
	if !ok {
		return decimal.Decimal{}, invalid("currency", "unsupported currency %q", currency)
	}
	if !amountRe.MatchString(amount) {
		return decimal.Decimal{}, invalid(param, "amount must be a positive decimal string like \"10.50\", got %q", amount)
	}
	if _, frac, ok := strings.Cut(amount, "."); ok && int32(len(frac)) > decs {
		return decimal.Decimal{}, invalid(param, "%s takes at most %d decimal places, got %q", currency, decs, amount)
	}
	d, err := decimal.NewFromString(amount)
	if err != nil {
		return decimal.Decimal{}, invalid(param, "amount %q: %v", amount, err)
	}
	if !d.IsPositive() {
		return decimal.Decimal{}, invalid(param, "amount must be greater than zero")
	}
	if d.GreaterThan(maxAmount) {
		return decimal.Decimal{}, invalid(param, "amount exceeds the maximum of %s", maxAmount)
	}
	return d, nil
}

func formatAmount(d decimal.Decimal, currency string) string {
	return d.StringFixed(currencyDecimals[currency])
}

// validate turns a decoded body into an opRequest, or the 400 a PSP gives.
func validate(w wireRequest) (opRequest, *apiError) {
	r := opRequest{wire: w, op: w.Operation, reference: w.Reference, currency: w.Currency}
	if !w.Operation.Valid() {
		return r, invalid("operation", "unknown operation %q", w.Operation)
	}
	if w.Operation == providers.OpPixCharge {
		if !txidRe.MatchString(w.Reference) {
			return r, invalid("reference", "a cob txid must be 26-35 letters or digits, got %q", w.Reference)
		}
	} else if !referenceRe.MatchString(w.Reference) {
		return r, invalid("reference", "reference must be 1-35 letters or digits, got %q", w.Reference)
	}
	amt, aerr := parseAmount("amount", w.Amount, w.Currency)
	if aerr != nil {
		return r, aerr
	}
	r.amount = amt
	if utf8.RuneCountInString(w.Description) > 140 { // characters, not bytes
		return r, invalid("description", "description is limited to 140 characters")
	}
	if len(w.Metadata) > 20 {
		return r, invalid("metadata", "at most 20 metadata keys")
	}
	for k, v := range w.Metadata {
		if k == "" || utf8.RuneCountInString(k) > 40 || utf8.RuneCountInString(v) > 500 {
			return r, invalid("metadata", "metadata keys are 1-40 characters and values at most 500")
		}
	}
	brlOnly := func() *apiError {
		if w.Currency != "BRL" {
			return invalid("currency", "%s is only available in BRL", w.Operation)
		}
		return nil
	}
	noExtras := func(card, charge, expiry bool) *apiError {
		switch {
		case !card && w.CardToken != "":
			return invalid("card_token", "card_token is not allowed for %s", w.Operation)
		case !charge && w.Charge != nil:
			return invalid("charge", "charge is not allowed for %s", w.Operation)
		case !expiry && w.ExpiresInSeconds != 0:
			return invalid("expires_in_seconds", "expires_in_seconds is not allowed for %s", w.Operation)
		case !expiry && w.Payer != nil:
			return invalid("payer", "payer is not allowed for %s", w.Operation)
		}
		return nil
	}
	switch w.Operation {
	case providers.OpPixTransfer, providers.OpBankPayout:
		if e := brlOnly(); e != nil {
			return r, e
		}
		if e := noExtras(false, false, false); e != nil {
			return r, e
		}
		if e := validateDestination(w.Operation, w.Destination); e != nil {
			return r, e
		}
	case providers.OpCardCharge:
		if e := noExtras(true, false, false); e != nil {
			return r, e
		}
		if w.Destination != nil {
			return r, invalid("destination", "destination is not allowed for card_charge")
		}
		switch {
		case w.CardToken == "":
			return r, invalid("card_token", "card_token is required")
		case panRe.MatchString(w.CardToken):
			return r, invalid("card_token", "raw card numbers are not accepted; send a token")
		case !strings.HasPrefix(w.CardToken, "tok_") || len(w.CardToken) > 128:
			return r, invalid("card_token", "no such token %q", w.CardToken)
		}
	case providers.OpRefund:
		if e := noExtras(false, true, false); e != nil {
			return r, e
		}
		if w.Destination != nil {
			return r, invalid("destination", "destination is not allowed for refund")
		}
		if w.Charge == nil || (w.Charge.ID == "" && w.Charge.Reference == "") {
			return r, invalid("charge", "a refund names the charge: charge.id or charge.reference")
		}
	case providers.OpPixCharge:
		if e := brlOnly(); e != nil {
			return r, e
		}
		if e := noExtras(false, false, true); e != nil {
			return r, e
		}
		if w.Destination != nil {
			return r, invalid("destination", "destination is not allowed for pix_charge")
		}
		if w.ExpiresInSeconds < 0 || w.ExpiresInSeconds > 30*24*3600 {
			return r, invalid("expires_in_seconds", "expires_in_seconds must be between 1 and 2592000")
		}
		r.expiresIn = time.Duration(w.ExpiresInSeconds) * time.Second
		if w.Payer != nil && w.Payer.TaxID != "" && !(digitsRe.MatchString(w.Payer.TaxID) &&
			(len(w.Payer.TaxID) == 11 || len(w.Payer.TaxID) == 14)) {
			return r, invalid("payer.tax_id", "payer tax id must be a CPF (11 digits) or CNPJ (14 digits)")
		}
	}
	return r, nil
}

func validateDestination(op providers.Operation, d *providers.Destination) *apiError {
	if d == nil {
		return invalid("destination", "destination is required for %s", op)
	}
	if (d.PixKey == nil) == (d.BankAccount == nil) || d.StripeAccount != "" || d.StripeBankAccount != "" {
		return invalid("destination", "destination needs exactly one of pix_key and bank_account")
	}
	if op == providers.OpBankPayout && d.BankAccount == nil {
		return invalid("destination.bank_account", "bank_payout needs a bank_account")
	}
	if k := d.PixKey; k != nil {
		ok := false
		switch k.Type {
		case "cpf":
			ok = digitsRe.MatchString(k.Value) && len(k.Value) == 11
		case "cnpj":
			ok = digitsRe.MatchString(k.Value) && len(k.Value) == 14
		case "email":
			ok = len(k.Value) <= 77 && strings.Count(k.Value, "@") == 1 && !strings.HasPrefix(k.Value, "@") &&
				!strings.HasSuffix(k.Value, "@")
		case "phone":
			ok = phoneRe.MatchString(k.Value)
		case "evp":
			ok = evpRe.MatchString(k.Value)
		default:
			return invalid("destination.pix_key.type", "pix key type must be cpf, cnpj, email, phone or evp, got %q", k.Type)
		}
		if !ok {
			return invalid("destination.pix_key.value", "malformed %s pix key", k.Type)
		}
	}
	if a := d.BankAccount; a != nil {
		switch {
		case !digitsRe.MatchString(a.ISPB) || len(a.ISPB) != 8:
			return invalid("destination.bank_account.ispb", "ispb must be 8 digits")
		case !digitsRe.MatchString(a.Branch) || len(a.Branch) > 4:
			return invalid("destination.bank_account.branch", "branch must be 1-4 digits")
		case !digitsRe.MatchString(strings.ReplaceAll(a.Account, "-", "")) || len(a.Account) > 20:
			return invalid("destination.bank_account.account", "account must be 1-20 digits (a dash allowed)")
		}
		switch a.Type {
		case "checking", "savings", "payment", "salary":
		default:
			return invalid("destination.bank_account.type", "account type must be checking, savings, payment or salary")
		}
	}
	return nil
}

// sortedCurrencies lists supported currencies in a stable order.
func sortedCurrencies() []string {
	out := make([]string, 0, len(currencyDecimals))
	for c := range currencyDecimals {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}
