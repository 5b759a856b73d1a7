package payouts

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/holds"
	"github.com/saldo/saldo/ledger"
)

// DivergenceHold implements attempts.HoldOwner: an outgoing attempt (a
// payout, Pix transfer, refund or split leg) the provider paid after saldo
// resolved it failed released its reserve into the merchant's available
// balance while the money left: the payout's amount is held from the
// payout's merchant, in its currency, capped at what is available (package
// holds; R9, R19, R22), when that attempt's reserve was released (not
// carried to a next attempt). Other divergences of outgoing attempts hold
// nothing.
func (s *Service) DivergenceHold(ctx context.Context, tx pgx.Tx, a attempts.Attempt, postings *ledger.Deferred) error {
	if !holds.Holds(a) {
		return nil
	}
	// Only a reserve released into available puts it in doubt. A failed
	// attempt whose reserve was carried to the payout's next attempt
	// (RetryPolicy) freed nothing: that attempt, held in review by the
	// divergence (holdSiblings), still holds the reserve.
	var released bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ledger_transactions WHERE cause_kind = $1 AND cause_id = $2)`,
		CauseRelease, a.ID.String()).Scan(&released); err != nil {
		return fmt.Errorf("payouts: release of diverged attempt %s: %w", a.ID, err)
	}
	if !released {
		return nil
	}
	p, err := s.get(ctx, tx, "", a.SubjectID)
	if err != nil {
		return fmt.Errorf("payouts: payout %s of diverged attempt %s: %w", a.SubjectID, a.ID, err)
	}
	return holds.Hold(ctx, tx, s.log, a, p.Amount.Currency(),
		[]holds.Share{{MerchantID: p.MerchantID, Amount: p.Amount.Decimal()}}, string(p.Kind)+" "+p.ID, postings)
}

// SettleDivergenceHold implements attempts.DivergenceSettleOwner
// (holds.Settle).
func (s *Service) SettleDivergenceHold(ctx context.Context, tx pgx.Tx, a attempts.Attempt, d attempts.HoldDecision) (string, error) {
	return holds.Settle(ctx, tx, s.log, a, d)
}

var (
	_ attempts.HoldOwner             = (*Service)(nil)
	_ attempts.DivergenceSettleOwner = (*Service)(nil)
)
