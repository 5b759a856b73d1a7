package payouts

import (
	"context"
	"fmt"

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

var _ attempts.AmountOwner = (*Service)(nil)
