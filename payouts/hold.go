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
// resolved it failed: once the payout's reserve went back to available
// (released by this attempt or a later one of the payout), the money left
// all the same, and the payout's amount is held from the payout's merchant,
// capped at what is available (package holds decides: holds.Hold; R9, R19,
// R22). While a next attempt still holds the carried reserve (RetryPolicy),
// nothing is free yet: the hold comes with that attempt's release
// (holds.TopUp, from AttemptsFinal). Other divergences hold nothing.
func (s *Service) DivergenceHold(ctx context.Context, tx pgx.Tx, a attempts.Attempt, postings *ledger.Deferred) error {
	if !holds.Holds(a) {
		return nil
	}
	return holds.Hold(ctx, tx, s.log, a, "payout "+a.SubjectID, postings)
}

// topUpHolds adds to postings (after the releases in ins) the further
// holds of the open divergences the releases of as concern (holds.TopUp):
// one statement for the batch, none when nothing is released.
func (s *Service) topUpHolds(ctx context.Context, tx pgx.Tx, as []attempts.Attempt, ins []ledger.TransactionInput,
	final map[string]Payout, postings *ledger.Deferred) error {
	var rs []holds.Release
	for i, a := range as {
		if ins[i].CauseKind != CauseRelease {
			continue
		}
		p := final[a.SubjectID]
		r := holds.Release{AttemptID: a.ID, PayoutID: p.ID}
		if p.Kind == attempts.KindRefund {
			r.ChargeID = p.ChargeID
		}
		rs = append(rs, r)
	}
	if err := holds.TopUp(ctx, tx, s.log, rs, postings); err != nil {
		return fmt.Errorf("payouts: holds topped up by %d releases: %w", len(rs), err)
	}
	return nil
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
