package charges

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/holds"
	"github.com/saldo/saldo/ledger"
)

// DivergenceHold implements attempts.HoldOwner: a paid charge whose attempt
// the card network disputed (a chargeback) or the provider reversed put
// shares in merchants' available balances that are in doubt: each share
// its credit gave (creditInput: the merchant's net, each split recipient's
// share; not the platform's fee), scaled down by the refunds that already
// count against the charge, is held, each capped at that merchant's
// available balance (package holds decides the amounts: holds.Hold; R9,
// R19, R21, R22); a refund failing later tops the hold up (holds.TopUp,
// from payouts), and so does any later credit of a merchant it holds from
// while the hold is short (a charge's credit: topUpHolds; a funding). A
// charge not
// credited (not paid) holds nothing, nor do other divergences.
func (s *Service) DivergenceHold(ctx context.Context, tx pgx.Tx, a attempts.Attempt, postings *ledger.Deferred) error {
	if !holds.Holds(a) {
		return nil
	}
	c, err := s.get(ctx, tx, "", a.SubjectID)
	if err != nil {
		return fmt.Errorf("charges: charge %s of diverged attempt %s: %w", a.SubjectID, a.ID, err)
	}
	if c.Status != StatusPaid || c.AttemptID == nil || *c.AttemptID != a.ID {
		s.log.ErrorContext(ctx, "charges: divergence of a charge attempt that did not credit it: nothing to hold",
			"attempt_id", a.ID, "charge_id", c.ID, "status", c.Status, "divergence_kind", a.DivergenceKind)
		return nil
	}
	return holds.Hold(ctx, tx, s.log, a, string(c.Kind)+" charge "+c.ID, postings)
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
