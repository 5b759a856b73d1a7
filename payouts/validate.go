package payouts

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// checkCurrency: Pix transfers and bank payouts to a Brazilian bank account
// run on Brazilian rails (Pix, a bank account named by its ISPB), which
// move BRL only. A bank payout to a bank account attached to the Stripe
// account is paid in that account's currency (the Stripe adapter checks
// the amount's shape; Stripe refuses a currency the account does not pay
// out in).
func checkCurrency(field string, op providers.Operation, dest *providers.Destination, cur money.Currency) error {
	switch {
	case op == providers.OpBankPayout && dest.Kind() == providers.DestStripeBankAccount:
	case op == providers.OpPixTransfer, op == providers.OpBankPayout:
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

// providerRefusal turns a provider's refusal of an input (EncodePayload's
// ErrInvalidInput or ErrUnsupported) into a FieldError: the provider's
// parameter names the field when it has one (renamed through fields, when
// given, to the name the request used); providers.Refusal words the reason.
func providerRefusal(err error, fields map[string]string) error {
	field, msg := providers.Refusal(err)
	if f, ok := fields[field]; ok && field != "" {
		field = f
	}
	return &FieldError{Field: field, Reason: msg}
}

// requireFunded refuses, before any write, an outgoing payment the
// merchant visibly cannot afford, when its accounts would otherwise be made
// for it (prepareAccounts has not yet run for this merchant and currency in
// this process): a merchant that never held money in the currency has no
// available account at all, and creating its accounts on the way to a
// refusal would list a currency it never used. With the accounts already
// known there is nothing to spare: the reserve itself refuses under the
// row lock, without writing. amount nil checks only that the account exists
// (a full refund, whose amount is known under the charge lock).
func (s *Service) requireFunded(ctx context.Context, merchantID string, cur money.Currency, amount *money.Amount) error {
	spec := ledger.MerchantAvailable(merchantID, cur)
	if _, ok := s.accounts.ids.Load(spec.Code()); ok {
		return nil
	}
	a, err := ledger.AccountByCode(ctx, s.pool, spec.Code())
	requested := cur.Code()
	if amount != nil {
		requested = amount.String()
	}
	if errors.Is(err, ledger.ErrAccountNotFound) {
		return &InsufficientBalanceError{MerchantID: merchantID, Requested: requested, Err: ledger.ErrInsufficientFunds}
	}
	if err != nil {
		return err
	}
	if amount != nil && a.Balance.LessThan(amount.Decimal()) {
		return &InsufficientBalanceError{MerchantID: merchantID, Requested: requested, Err: ledger.ErrInsufficientFunds}
	}
	return nil
}

// join prefixes a field name with the path of what holds it ("legs[2]").
func join(prefix, field string) string {
	if field == "" {
		return prefix
	}
	return prefix + "." + field
}

// payoutOperations are the operations a payout or split leg may carry:
// account_transfer pays an account held at the provider (a Stripe
// connected account, issue 14).
var payoutOperations = []providers.Operation{providers.OpPixTransfer, providers.OpBankPayout, providers.OpAccountTransfer}

// payoutOperation reports whether op is one of payoutOperations.
func payoutOperation(op providers.Operation) bool { return slices.Contains(payoutOperations, op) }

// ErrUnroutable matches every UnroutableError.
var ErrUnroutable = errors.New("payouts: no provider routed for the operation pays this kind of destination")

// UnroutableError refuses a valid request whose destination no provider
// routed for its operation pays (a stripe_bank_account while bank_payout
// is routed to a Pix PSP only). It comes before anything is written; the
// API answers 422 naming Field.
type UnroutableError struct {
	Field     string // "destination", "legs[1].destination"
	Operation providers.Operation
	Kind      providers.DestinationKind
	Providers []string                    // the providers op is routed to
	Takes     []providers.DestinationKind // the kinds they pay
}

func (e *UnroutableError) Error() string {
	takes := make([]string, len(e.Takes))
	for i, k := range e.Takes {
		takes[i] = string(k)
	}
	what := "none"
	if len(takes) > 0 {
		what = strings.Join(takes, " or ")
	}
	return fmt.Sprintf("payouts: no provider here pays a %s to a %s: %s goes to %s, which pay %s", e.Operation, e.Kind,
		e.Operation, strings.Join(e.Providers, ", "), what)
}

// Is makes every UnroutableError match ErrUnroutable.
func (e *UnroutableError) Is(target error) bool { return target == ErrUnroutable }

// providerFor is the provider that takes a new op to dest: the first of
// op's route that pays dest's kind of destination and whose circuit is not
// open (every such one open: the first, whose calls wait for it), else the
// default provider. A route none of whose providers pays dest's kind
// (likewise a default provider that supports op but not dest's kind) is
// an UnroutableError naming prefix's destination; no route and no default
// provider, a FieldError naming prefix's operation. prefix is "" for a
// payout, "legs[i]" for a split leg.
func (s *Service) providerFor(prefix string, op providers.Operation, dest *providers.Destination) (string, error) {
	kind := dest.Kind()
	at := func(field string) string {
		if prefix == "" {
			return field
		}
		return join(prefix, field)
	}
	if list := s.routes[op]; len(list) > 0 {
		takers := s.routes.Takers(op, kind, s.attempts.Provider)
		if len(takers) == 0 {
			return "", &UnroutableError{Field: at("destination"), Operation: op, Kind: kind, Providers: list,
				Takes: s.routes.Kinds(op, s.attempts.Provider)}
		}
		for _, p := range takers {
			if !s.attempts.CircuitOpen(p, string(op)) {
				return p, nil
			}
		}
		return takers[0], nil
	}
	if s.provider != "" {
		if p, ok := s.attempts.Provider(s.provider); ok && !p.Capabilities().Supports(op) {
			// Refused here, naming the field: the provider's own refusal
			// (ErrUnsupported) reached the client as a detail holding only
			// the operation's name, with no field (found by review).
			return "", invalid(at("operation"), "no provider takes %s here", op)
		}
		if p, ok := s.attempts.Provider(s.provider); ok && op.HasDestination() {
			if c := p.Capabilities(); c.Supports(op) && !c.Takes(op, kind) {
				return "", &UnroutableError{Field: at("destination"), Operation: op, Kind: kind,
					Providers: []string{s.provider}, Takes: c.Destinations[op]}
			}
		}
		return s.provider, nil
	}
	return "", invalid(at("operation"), "no provider takes %s here", op)
}

func providerFor(routes providers.Routes, fallback string, op providers.Operation) string {
	if p, ok := routes.Provider(op); ok {
		return p
	}
	return fallback
}
