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
// the payout's own, a refunded charge's, and any other open divergence
// short of the releasing merchant's money in that currency (R9, R22). One
// statement for the batch, none when nothing is released.
func (s *Service) topUpHolds(ctx context.Context, tx pgx.Tx, as []attempts.Attempt, ins []ledger.TransactionInput,
	final map[string]Payout, postings *ledger.Deferred) error {
	var rs []holds.Credit
	for i, a := range as {
		if ins[i].CauseKind != CauseRelease {
			continue
		}
		p := final[a.SubjectID]
		r := holds.Credit{Cause: holds.CreditRelease, By: a.ID.String(), PayoutID: p.ID, MerchantID: p.MerchantID,
			Currency: p.Amount.Currency()}
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
// (holds.Settle). The payout's row is locked first (a locked before it:
// the divergence's order), so the settlement reads what the hold holds
// after a concurrent release of another attempt of the payout committed
// its top-up (holds.TopUp), or that release waits and sees the divergence
// settled (R9, R22).
func (s *Service) SettleDivergenceHold(ctx context.Context, tx pgx.Tx, a attempts.Attempt, d attempts.HoldDecision) (string, error) {
	if err := s.LockSubject(ctx, tx, a); err != nil {
		return "", err
	}
	return holds.Settle(ctx, tx, s.log, a, d)
}

// LockSubject implements attempts.SubjectLocker: a's payout row, FOR
// UPDATE, in the transaction that records a's divergence (a locked
// first). The payout's row is where a divergence and the outcome of the
// payout's other attempts meet: AttemptsFinal moves it (attemptsFinalSQL)
// before it decides, from the payout's other attempts, whether to open
// the next attempt (anyDiverged) or release the reserve and top up the
// holds (holds.TopUp); Retry locks it before anyDiverged. Whichever takes
// the row second sees what the first committed (R6, R9, R22). Lock order
// everywhere: attempt rows, then the payout's row (docs/pitfalls.md).
func (s *Service) LockSubject(ctx context.Context, tx pgx.Tx, a attempts.Attempt) error {
	var one int
	if err := tx.QueryRow(ctx, `SELECT 1 FROM payouts WHERE id = $1 FOR UPDATE`, a.SubjectID).Scan(&one); err != nil {
		return fmt.Errorf("payouts: lock payout %s of attempt %s: %w", a.SubjectID, a.ID, err)
	}
	return nil
}

var (
	_ attempts.HoldOwner             = (*Service)(nil)
	_ attempts.DivergenceSettleOwner = (*Service)(nil)
	_ attempts.SubjectLocker         = (*Service)(nil)
)
