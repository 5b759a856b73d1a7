package attempts

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/internal/pgtext"
	"github.com/saldo/saldo/ledger"
)

// Divergence kinds (attempts.divergence_kind, migrations 00107 and 00109): which way a
// provider contradicted a final attempt. Every divergence has one, and it
// never changes once recorded. This is the one list of them (the
// migration's CHECK, api's *.diverged events and the docs follow it).
const (
	// DivergencePaidAfterFailure: the provider reported the operation
	// succeeded after saldo resolved it failed (money moved that the ledger
	// released or never credited). The attempt is failed.
	DivergencePaidAfterFailure = "paid_after_failure"
	// DivergenceReversal: the provider reported the operation failed after
	// it succeeded (a payout returned, a refund failed late, a charge that
	// did not settle). The attempt is succeeded.
	DivergenceReversal = "reversal"
	// DivergenceDispute: the card network took a paid charge's money back
	// from the platform's balance (a chargeback, RecordDispute). The
	// attempt is succeeded; the money may come back if the merchant wins.
	DivergenceDispute = "dispute"
	// DivergenceSecondOperation: the provider reported another operation
	// succeeded under the reference of an attempt that already succeeded
	// as its own (a cob paid twice by the payer, a transfer made twice):
	// money moved twice and the ledger shows it once (secondOperation).
	// The attempt is succeeded.
	DivergenceSecondOperation = "second_operation"
)

// recordDivergence records on a (locked in tx, final) what the provider
// said against it: diverged_at, divergence (why) and its kind, review, a
// review event; it holds the subject's unsent attempts (holdSiblings, and
// again once a SubjectLocker owner locked the subject's row), tells the
// owner (DivergenceOwner, its notification), has a HoldOwner hold the
// merchant's money the divergence puts in doubt and, after commit,
// logs, counts and calls OnReview. An attempt already diverged keeps its
// divergence (the evidence never changes, R9): diverged is false and the
// caller's note is all. said is what the provider reported, for the log.
func (s *Service) recordDivergence(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt, actor Actor,
	kind, why, said string) (_ Attempt, diverged bool, _ error) {
	now := s.clock.Now()
	why = pgtext.Truncate(why, 2000)
	na, err := scanAttempt(tx.QueryRow(ctx, `UPDATE attempts SET diverged_at = $2, divergence = $3, divergence_kind = $5,
		review = true, review_reason = $3, review_at = $2, updated_at = $2
		WHERE id = $1 AND status = $4 AND diverged_at IS NULL RETURNING `+attemptColumns, a.ID, now, why, a.Status, kind))
	switch {
	case errors.Is(err, ErrNotFound):
		// Already diverged: the note is enough.
		return a, false, nil
	case err != nil:
		return a, false, fmt.Errorf("attempts: record divergence of %s: %w", a.ID, err)
	}
	if err := insertEvent(ctx, tx, Event{AttemptID: na.ID, At: now, Type: EventReview, Actor: actor, Reason: why}); err != nil {
		return na, false, err
	}
	// The unsent siblings visible now, locked before the subject (attempt
	// rows, then the subject's row: the order of every transaction that
	// makes an attempt final, so an operator failing an unsent sibling at
	// this moment makes this wait, not deadlock).
	if err := s.holdSiblings(ctx, tx, after, na, actor); err != nil {
		return na, false, err
	}
	if o, ok := s.owner(na.Kind).(SubjectLocker); ok {
		// The subject's row (a payout's), then, in later statements (new
		// snapshots), its siblings again and the owner's hooks: a
		// concurrent transaction that made another attempt final and
		// opened the subject's next attempt (RetryPolicy) or released its
		// reserve committed before this lock, and its next attempt is held
		// here, its release seen by the hold; or it waits for this
		// transaction and then sees the divergence (R6, R9, R22).
		if err := o.LockSubject(ctx, tx, na); err != nil {
			return na, false, fmt.Errorf("attempts: subject of diverged %s: %w", na.ID, err)
		}
		if err := s.holdSiblings(ctx, tx, after, na, actor); err != nil {
			return na, false, err
		}
	}
	if o, ok := s.owner(na.Kind).(DivergenceOwner); ok {
		if err := o.AttemptDiverged(ctx, tx, na); err != nil {
			return na, false, fmt.Errorf("attempts: owner of diverged %s: %w", na.ID, err)
		}
	}
	if o, ok := s.owner(na.Kind).(HoldOwner); ok {
		// The hold of the merchant's money, in this transaction (R9, R19,
		// R22). In a batch before its owners' effects, it goes into their
		// one PostMany (finalTogether): one lock order.
		if after.collectFinals {
			after.holds = append(after.holds, na)
		} else {
			var postings ledger.Deferred
			if err := o.DivergenceHold(ctx, tx, na, &postings); err != nil {
				return na, false, fmt.Errorf("attempts: hold of diverged %s: %w", na.ID, err)
			}
			if err := postings.Post(ctx, tx); err != nil {
				return na, false, fmt.Errorf("attempts: hold of diverged %s: %w", na.ID, err)
			}
		}
	}
	after.add(func() {
		s.log.ErrorContext(ctx, "provider contradicts a final attempt: divergence, review", "attempt_id", na.ID,
			"kind", na.Kind, "provider", na.Provider, "reference", na.Reference, "status", na.Status,
			"resolved_by", na.ResolvedBy, "reported", said, "reported_by", actor, "divergence_kind", kind)
		s.metrics.divergence(na)
		s.metrics.reviewFlagged(na)
		if s.cfg.OnReview != nil {
			s.cfg.OnReview(na, why)
		}
	})
	return na, true, nil
}

// DivergenceKind is the kind (Divergence*) of attempt id's divergence, ""
// when it has none. db may be the transaction that recorded it.
func DivergenceKind(ctx context.Context, db DB, id uuid.UUID) (string, error) {
	var kind *string
	if err := db.QueryRow(ctx, `SELECT divergence_kind FROM attempts WHERE id = $1`, id).Scan(&kind); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return "", ErrNotFound
		}
		return "", fmt.Errorf("attempts: divergence kind of %s: %w", id, err)
	}
	if kind == nil {
		return "", nil
	}
	return *kind, nil
}
