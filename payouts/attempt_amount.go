package payouts

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/attempts"
)

// AttemptAmount implements attempts.AmountOwner: the amount and currency of
// the payout (bank payout, Pix transfer, refund or split leg) the attempt a
// realises. The attempts core checks every provider report naming an
// amount or a currency (webhook, lookup, resolver) against them before the
// report may settle or release anything (issue 13 finding 4, R17).
func (s *Service) AttemptAmount(ctx context.Context, db attempts.DB, a attempts.Attempt) (decimal.Decimal, string, error) {
	var amount decimal.Decimal
	var currency string
	if err := db.QueryRow(ctx, `SELECT amount, currency FROM payouts WHERE id = $1`, a.SubjectID).Scan(&amount, &currency); err != nil {
		return decimal.Decimal{}, "", fmt.Errorf("payouts: amount of payout %s (attempt %s): %w", a.SubjectID, a.ID, err)
	}
	return amount, currency, nil
}

// AttemptAmounts implements attempts.AmountsOwner: AttemptAmount for many
// attempts, in one statement.
func (s *Service) AttemptAmounts(ctx context.Context, db attempts.DB, as []attempts.Attempt) (map[uuid.UUID]attempts.OwnedAmount, error) {
	m, err := attempts.AmountsBySubject(ctx, db, `SELECT id, amount, currency FROM payouts WHERE id = ANY ($1::text[])`, as)
	if err != nil {
		return nil, fmt.Errorf("payouts: amounts of %d payouts: %w", len(as), err)
	}
	return m, nil
}

var _ attempts.AmountsOwner = (*Service)(nil)
