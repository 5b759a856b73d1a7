package attempts

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Divergence kinds (attempts.divergence_kind, migration 00107): which way a
// provider contradicted a final attempt. Every divergence has one, and it
// never changes once recorded.
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
)

// recordDivergence records on a (locked in tx, final) what the provider
// said against it: diverged_at, divergence (why) and its kind, review, a
// review event; it holds the subject's unsent attempts (holdSiblings),
// tells the owner (DivergenceOwner, its notification) and, after commit,
// logs, counts and calls OnReview. An attempt already diverged keeps its
// divergence (the evidence never changes, R9): diverged is false and the
// caller's note is all. said is what the provider reported, for the log.
func (s *Service) recordDivergence(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt, actor Actor,
	kind, why, said string) (_ Attempt, diverged bool, _ error) {
	now := s.clock.Now()
	why = truncate(why, 2000)
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
	if err := s.holdSiblings(ctx, tx, after, na, actor); err != nil {
		return na, false, err
	}
	if o, ok := s.owner(na.Kind).(DivergenceOwner); ok {
		if err := o.AttemptDiverged(ctx, tx, na); err != nil {
			return na, false, fmt.Errorf("attempts: owner of diverged %s: %w", na.ID, err)
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

// DisputeReport is a provider's word about a card dispute of an incoming
// payment (a Stripe charge.dispute.* webhook), for RecordDispute.
type DisputeReport struct {
	// Provider is the provider's name; ProviderID the disputed operation's
	// id at it (a Stripe PaymentIntent), as the attempt holds it.
	Provider, ProviderID string
	// EventID is the provider's event id: the note's actor id, so a
	// redelivery records nothing twice.
	EventID string
	// Withdrawn: the provider took, or has taken, the disputed money from
	// the platform's balance (a chargeback, whatever became of it since),
	// not an inquiry that takes nothing.
	Withdrawn bool
	// Note is what the provider said (dispute id, status, amount, reason)
	// and what it means for the operator; the note's and the divergence's
	// text.
	Note string
}

// DisputeResult says what RecordDispute did.
type DisputeResult struct {
	Attempt Attempt
	// Diverged: this report recorded the dispute divergence.
	Diverged bool
	// Duplicate: this event was recorded before; nothing was written.
	Duplicate bool
}

// RecordDispute records a card dispute the provider reports against the
// incoming attempt (direction in) that holds r.ProviderID at r.Provider
// (ErrNotFound when none does). Every report is a note on the attempt
// (actor webhook, the event id as actor id: a redelivery is a duplicate).
// The first report that the money was withdrawn, on a succeeded attempt
// not diverged yet, records a divergence of kind dispute exactly as a
// reversal is recorded (R9, R19): the status and the ledger stay, the
// attempt goes to review, its owner is told (charge.diverged), the audit
// reports it until an operator books what the merchant owes and settles
// it. Nothing moves here: whether the money comes back (the dispute won)
// is the operator's to book. Reports in any order are harmless: whichever
// chargeback report comes first records the divergence, the others are
// notes. A dispute against an attempt that is not succeeded (the provider
// says the payment was taken while saldo does not) is a note and an
// ERROR log: a lookup, reconciliation or review settles its status.
func (s *Service) RecordDispute(ctx context.Context, r DisputeReport) (DisputeResult, error) {
	if r.Provider == "" || r.ProviderID == "" || r.EventID == "" || strings.TrimSpace(r.Note) == "" {
		return DisputeResult{}, fmt.Errorf("%w: a dispute report needs a provider, a provider id, an event id and a note", ErrInvalid)
	}
	var res DisputeResult
	err := s.inTx(ctx, func(tx pgx.Tx, after *afterCommit) error {
		res = DisputeResult{}
		a, err := scanAttempt(tx.QueryRow(ctx, `SELECT `+attemptColumns+` FROM attempts
			WHERE provider = $1 AND provider_id = $2 AND direction = 'in' FOR UPDATE`, r.Provider, r.ProviderID))
		if err != nil {
			return err
		}
		res.Attempt = a
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM attempt_events WHERE attempt_id = $1 AND type = 'note'
			AND actor = 'webhook' AND actor_id = $2)`, a.ID, r.EventID).Scan(&res.Duplicate); err != nil {
			return fmt.Errorf("attempts: dispute event %s on %s: %w", r.EventID, a.ID, err)
		}
		if res.Duplicate {
			return nil
		}
		note := truncate(r.Note, 2000)
		if err := insertEvent(ctx, tx, Event{AttemptID: a.ID, At: s.clock.Now(), Type: EventNote, Actor: ActorWebhook,
			ActorID: r.EventID, Reason: note}); err != nil {
			return err
		}
		if a.Status != StatusSucceeded {
			after.add(func() {
				s.log.ErrorContext(ctx, "provider reports a dispute of a payment saldo does not hold succeeded: noted; a lookup, reconciliation or review settles it",
					"attempt_id", a.ID, "kind", a.Kind, "provider", a.Provider, "reference", a.Reference, "status", a.Status,
					"event_id", r.EventID, "note", note)
			})
			return nil
		}
		if !r.Withdrawn || a.DivergedAt != nil {
			after.add(func() {
				s.log.WarnContext(ctx, "dispute noted on an attempt", "attempt_id", a.ID, "provider", a.Provider,
					"reference", a.Reference, "event_id", r.EventID, "diverged", a.DivergedAt != nil, "note", note)
			})
			return nil
		}
		why := "divergence (dispute): " + note + " (reported by webhook " + r.EventID +
			"): the merchant was credited with money the card network took back; a human books it and settles it (R19)"
		res.Attempt, res.Diverged, err = s.recordDivergence(ctx, tx, after, a, ActorWebhook, DivergenceDispute, why, "dispute")
		return err
	})
	return res, err
}
