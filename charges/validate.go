package charges

import (
	"context"
	"fmt"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers"
)

// notARecipient is the one answer for a split recipient that does not
// exist and one that may not receive a split (the charging merchant): a
// merchant key must not learn from it which merchant ids exist.
const notARecipient = "not a merchant this charge can split to"

// requireRecipient checks a split recipient exists, answering as for any
// recipient that is not allowed.
func (s *Service) requireRecipient(ctx context.Context, field, merchantID string) error {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM merchants WHERE id = $1)`, merchantID).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %w", ErrUnknownMerchant, invalid(field, notARecipient))
	}
	return nil
}

// checkEncodable asks the provider to encode the operation the charge's
// attempt will carry (what attempts.Open does inside the transaction), so
// that a refusal comes before anything is written and names the field.
func (s *Service) checkEncodable(req ChargeRequest) error {
	p, ok := s.attempts.Provider(s.providerFor(req.Kind))
	if !ok {
		return invalid("kind", "no provider takes %s charges here", req.Kind)
	}
	in := providers.OperationInput{
		Operation:   req.Kind.operation(),
		Amount:      req.Amount.Format(),
		Currency:    req.Amount.Currency().Code(),
		CardToken:   req.CardToken,
		Description: req.Description,
		Metadata:    map[string]string{"saldo_charge_id": "ch_check", "saldo_merchant_id": req.MerchantID},
	}
	if req.Kind == KindPix {
		in.ExpiresIn, in.PayerName, in.PayerTaxID = req.PixExpiresIn, req.PayerName, req.PayerTaxID
	}
	if _, err := p.EncodePayload(in, attempts.NewReference()); err != nil {
		return providerRefusal(err)
	}
	return nil
}

// providerFields renames a provider's parameter names to the request's.
var providerFields = map[string]string{
	"expires_in_seconds": FieldPixExpiresIn,
	"payer":              FieldPayerName,
	"payer.name":         FieldPayerName,
	"payer.tax_id":       FieldPayerTaxID,
	"reference":          "",
}

// providerRefusal turns a provider's refusal of the input (EncodePayload's
// ErrInvalidInput or ErrUnsupported) into a FieldError naming the request
// field when the provider named its parameter; providers.Refusal words the
// reason.
func providerRefusal(err error) error {
	field, msg := providers.Refusal(err)
	if f, ok := providerFields[field]; ok && field != "" {
		field = f
	}
	return &FieldError{Field: field, Reason: msg}
}
