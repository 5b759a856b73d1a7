package payouts

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers"
)

// Validation that must run before anything is written: a refused request
// leaves no row behind (no payout, no attempt, no ledger account).

// MaxDescription is the longest description, in characters (not bytes).
const MaxDescription = 140

// chars counts characters the way the API documents limits (and
// PostgreSQL's length() does): runes, not bytes.
func chars(s string) int { return utf8.RuneCountInString(s) }

// checkCurrency: outgoing operations run on Brazilian rails (Pix, a bank
// account named by its ISPB), which move BRL only.
func checkCurrency(field string, op providers.Operation, cur money.Currency) error {
	switch op {
	case providers.OpPixTransfer, providers.OpBankPayout:
		if cur != money.BRL {
			return invalid(field, "a %s is paid in BRL, not %s", op, cur.Code())
		}
	}
	return nil
}

// checkEncodable asks the provider to encode the operation it would be
// sent (the same call the attempts core makes when it opens the attempt),
// so a refusal comes here, before any write, and names the field.
func (s *Service) checkEncodable(provider string, in providers.OperationInput) error {
	p, ok := s.attempts.Provider(provider)
	if !ok {
		return fmt.Errorf("payouts: provider %q is not registered with attempts", provider)
	}
	if _, err := p.EncodePayload(in, attempts.NewReference()); err != nil {
		return providerRefusal(err, nil)
	}
	return nil
}

var paramPattern = regexp.MustCompile(`^[a-z_]+(\[[0-9]+\])?(\.[a-z_]+(\[[0-9]+\])?)*$`)

// providerRefusal turns a provider's refusal of an input (EncodePayload's
// ErrInvalidInput or ErrUnsupported) into a FieldError: the provider's
// "param: message" names the field when it has one (renamed through
// fields, when given, to the name the request used), and the package
// prefixes of the chain are dropped.
func providerRefusal(err error, fields map[string]string) error {
	msg := err.Error()
	for _, sentinel := range []error{providers.ErrInvalidInput, providers.ErrUnsupported} {
		if errors.Is(err, sentinel) {
			msg = strings.TrimPrefix(strings.TrimPrefix(msg, sentinel.Error()), ": ")
		}
	}
	field := ""
	if p, rest, ok := strings.Cut(msg, ": "); ok && paramPattern.MatchString(p) {
		field, msg = p, rest
		if f, ok := fields[p]; ok {
			field = f
		}
	}
	return &FieldError{Field: field, Reason: msg}
}

// requireFunded refuses, before any write, an outgoing payment of a
// merchant that has no available account in its currency: it has never held
// money there, so the reserve would fail, and creating its accounts on the
// way would list a currency it never used.
func (s *Service) requireFunded(ctx context.Context, merchantID string, amount money.Amount) error {
	spec := ledger.MerchantAvailable(merchantID, amount.Currency())
	if _, ok := s.accounts.ids.Load(spec.Code()); ok {
		return nil
	}
	_, err := ledger.AccountByCode(ctx, s.pool, spec.Code())
	if errors.Is(err, ledger.ErrAccountNotFound) {
		return &InsufficientBalanceError{MerchantID: merchantID, Requested: amount.String(), Err: ledger.ErrInsufficientFunds}
	}
	return err
}

// join prefixes a field name with the path of what holds it ("legs[2]").
func join(prefix, field string) string {
	if field == "" {
		return prefix
	}
	return prefix + "." + field
}
