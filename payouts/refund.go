package payouts

import (
	"context"
	"errors"
	"fmt"

	"github.com/saldo/saldo/internal/intent"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers"
)

// RefundRequest returns money of a paid charge to its payer, partly or in
// full. The refund is outgoing money like a payout: the amount is reserved
// from the merchant's available balance in the opening transaction (the fee
// of the charge is not given back) and goes to the charge's provider.
type RefundRequest struct {
	MerchantID string
	ClientKey  string
	ChargeID   string
	// Amount to refund; the zero Amount means everything still refundable.
	Amount      money.Amount
	Description string
	Metadata    map[string]string
}

// ErrRefundExceedsCharge: the refund would take the sum of succeeded,
// pending and unknown refunds of the charge (and of failed ones the
// provider later reported paid) past the charged amount. It
// matches ErrInvalid (the field is "amount").
var ErrRefundExceedsCharge = errors.New("payouts: refund exceeds what is still refundable")

// ErrRefundsUnavailable: the Service was built without a charges service.
var ErrRefundsUnavailable = errors.New("payouts: refunds need Config.Charges")

// refundTakesSQL is whether refund p takes from what its charge may still
// refund (refundable, and the audit's refunds check): processing or
// succeeded, or failed with an attempt the provider later reported paid.
const refundTakesSQL = `p.kind = 'refund' AND (p.status IN ('processing', 'succeeded')
	OR EXISTS (SELECT 1 FROM attempts a WHERE a.direction = 'out' AND a.subject_id = p.id AND a.diverged_at IS NOT NULL))`

// refundable is how much of charge c may still be refunded: its amount
// minus every refund that is processing (pending or unknown at the
// provider) or succeeded, or that failed but has an attempt the provider
// reported paid after it was resolved failed (a divergence, settled or not:
// the money left, as Retry holds). Called with the charge row locked, so
// concurrent refunds of one charge serialise on the lock and see each
// other's rows.
func (s *Service) refundable(ctx context.Context, tx pgx.Tx, c charges.Charge) (decimal.Decimal, error) {
	var taken decimal.Decimal
	if err := tx.QueryRow(ctx, `SELECT coalesce(sum(p.amount), 0) FROM payouts p
		WHERE p.charge_id = $1 AND `+refundTakesSQL, c.ID).Scan(&taken); err != nil {
		return decimal.Zero, err
	}
	return c.Amount.Decimal().Sub(taken), nil
}

// CreateRefund validates the request and, in ONE transaction, locks the
// charge, checks the amount against what is still refundable (R21: the sum
// of succeeded, pending and unknown refunds never exceeds the charged
// amount), inserts the refund, opens its attempt at the charge's provider,
// and reserves the amount from the merchant's available balance.
func (s *Service) CreateRefund(ctx context.Context, req RefundRequest) (Payout, error) {
	if s.charges == nil {
		return Payout{}, ErrRefundsUnavailable
	}
	if req.ChargeID == "" {
		return Payout{}, invalid("charge_id", "required")
	}
	full := !req.Amount.IsValid()
	if !full {
		if err := validateCommon(req.Amount, req.Description, req.Metadata); err != nil {
			return Payout{}, err
		}
	} else if err := validateCommon(money.MustParse("1", "BRL"), req.Description, req.Metadata); err != nil {
		return Payout{}, err
	}
	if err := checkClientKey(req.ClientKey); err != nil {
		return Payout{}, err
	}
	amountPart := "full"
	if !full {
		amountPart = req.Amount.String()
	}
	hash := intent.RequestHash("refund", req.ChargeID, amountPart, req.Description, req.Metadata)
	if err := s.prepareRefund(ctx, req, full); err != nil {
		// The balance its own reserve took (on a process whose account
		// cache is empty) or the charge may have changed since.
		return answerFromKey(ctx, s, req.MerchantID, req.ClientKey, hash, "refund", err, s.get)
	}

	var out Payout
	// The refund's id is made once, before the transaction: after an error
	// that may have committed (a lost COMMIT answer) it is looked for.
	id := newPayoutID()
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		p := Payout{ID: id, MerchantID: req.MerchantID, Kind: attempts.KindRefund,
			Operation: providers.OpRefund, ChargeID: req.ChargeID, Description: req.Description,
			Metadata: req.Metadata, Status: StatusProcessing}
		existing, err := s.claimClientKey(ctx, tx, req.MerchantID, req.ClientKey, hash, "refund", p.ID)
		if err != nil || existing != "" {
			if err == nil {
				out, err = s.get(ctx, tx, req.MerchantID, existing)
			}
			return err
		}
		c, err := s.lockCharge(ctx, tx, req.MerchantID, req.ChargeID)
		if err != nil {
			return err
		}
		left, err := s.refundable(ctx, tx, c)
		if err != nil {
			return err
		}
		if full {
			if !left.IsPositive() {
				return fmt.Errorf("%w: %w", &FieldError{Field: "amount", Reason: "nothing left to refund on charge " + c.ID},
					ErrRefundExceedsCharge)
			}
			if p.Amount, err = money.New(left, c.Amount.Currency()); err != nil {
				return err
			}
		} else {
			if req.Amount.Currency().Code() != c.Amount.Currency().Code() {
				return invalid("currency", "%s differs from the charge's %s", req.Amount.Currency().Code(), c.Amount.Currency().Code())
			}
			if req.Amount.Decimal().GreaterThan(left) {
				return fmt.Errorf("%w: %w", &FieldError{Field: "amount",
					Reason: fmt.Sprintf("%s exceeds the %s %s still refundable on charge %s", req.Amount.Format(), left.StringFixed(c.Amount.Currency().MinorUnits()), c.Amount.Currency().Code(), c.ID)},
					ErrRefundExceedsCharge)
			}
			p.Amount = req.Amount
		}
		p.Provider = c.Provider
		in := operationInput(&p)
		in.ChargeProviderID, in.ChargeReference = c.ProviderID, c.Reference
		if err := s.insertWithAttempt(ctx, tx, &p, in); err != nil {
			return err
		}
		out = p
		return nil
	})
	if err != nil {
		if p, ok := s.committedAfterError(ctx, req.MerchantID, id, err); ok {
			return p, nil
		}
	}
	return out, err
}

// prepareRefund checks, before its transaction, everything a validated
// refund request can be refused for without the charge lock (the merchant,
// the charge's state and currency, the provider's encoding, the balance on
// a process that never reserved in the currency) and makes the accounts
// the refund touches. Nothing it refuses leaves a row behind. The charge's
// currency and provider are read without the lock here and checked again
// under it.
func (s *Service) prepareRefund(ctx context.Context, req RefundRequest, full bool) error {
	if err := s.requireMerchant(ctx, req.MerchantID); err != nil {
		return err
	}
	c0, err := s.charges.Get(ctx, req.MerchantID, req.ChargeID)
	if errors.Is(err, charges.ErrNotFound) {
		return fmt.Errorf("%w: charge %s", ErrNotFound, req.ChargeID)
	}
	if err != nil {
		return err
	}
	if c0.Status != charges.StatusPaid {
		return fmt.Errorf("%w: %w", &FieldError{Field: "charge_id", Reason: fmt.Sprintf("charge %s is %s, only a paid charge can be refunded", c0.ID, c0.Status)},
			&charges.NotRefundableError{ChargeID: c0.ID, Status: c0.Status})
	}
	amount := c0.Amount
	if !full {
		if req.Amount.Currency() != c0.Amount.Currency() {
			return invalid("currency", "%s differs from the charge's %s", req.Amount.Currency().Code(), c0.Amount.Currency().Code())
		}
		amount = req.Amount
	}
	in := operationInput(&Payout{ID: "po_check", MerchantID: req.MerchantID, Operation: providers.OpRefund, Amount: amount,
		Description: req.Description})
	in.ChargeProviderID, in.ChargeReference = c0.ProviderID, c0.Reference
	if err := s.checkEncodable(c0.Provider, in); err != nil {
		return err
	}
	var partial *money.Amount
	if !full {
		partial = &amount
	}
	if err := s.requireFunded(ctx, req.MerchantID, amount.Currency(), partial); err != nil {
		return err
	}
	return s.prepareAccounts(ctx, req.MerchantID, c0.Provider, c0.Amount.Currency())
}

// lockCharge locks the charge for a refund and maps charges' errors.
func (s *Service) lockCharge(ctx context.Context, tx pgx.Tx, merchantID, chargeID string) (charges.Charge, error) {
	c, err := s.charges.LockForRefund(ctx, tx, merchantID, chargeID)
	switch {
	case errors.Is(err, charges.ErrNotFound):
		return c, fmt.Errorf("%w: charge %s", ErrNotFound, chargeID)
	case errors.Is(err, charges.ErrNotRefundable):
		reason := fmt.Sprintf("charge %s is %s, only a paid charge can be refunded", chargeID, c.Status)
		if nr, ok := errors.AsType[*charges.NotRefundableError](err); ok && nr.Reason != "" {
			reason = fmt.Sprintf("charge %s is not refundable: %s", chargeID, nr.Reason)
		}
		return c, fmt.Errorf("%w: %w", &FieldError{Field: "charge_id", Reason: reason}, err)
	}
	return c, err
}

// retryRefundInput re-checks, under the charge lock, that a failed refund
// still fits in what is refundable, and names the charge for the provider.
func (s *Service) retryRefundInput(ctx context.Context, tx pgx.Tx, p *Payout) (providers.OperationInput, error) {
	in := operationInput(p)
	c, err := s.lockCharge(ctx, tx, p.MerchantID, p.ChargeID)
	if err != nil {
		return in, err
	}
	left, err := s.refundable(ctx, tx, c)
	if err != nil {
		return in, err
	}
	if p.Amount.Decimal().GreaterThan(left) {
		return in, fmt.Errorf("%w: %w", &FieldError{Field: "amount",
			Reason: fmt.Sprintf("%s exceeds what is still refundable on charge %s", p.Amount, c.ID)}, ErrRefundExceedsCharge)
	}
	in.ChargeProviderID, in.ChargeReference = c.ProviderID, c.Reference
	return in, nil
}
