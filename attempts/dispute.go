package attempts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// WithdrawnDisputeEvidence is the JSON every note RecordDispute writes for a
// report that the money was withdrawn (a chargeback) contains in its
// evidence (evidence @> it): the structured mark that the card network took
// the payment back, whatever the attempt's status or divergence was when
// the report came. It is what keeps the charge unrefundable
// (charges.LockForRefund) and what makes the dispute divergence when the
// attempt succeeds after the report (disputeAfterSuccess).
const WithdrawnDisputeEvidence = `{"dispute_withdrawn": true}`

// DisputeReport is a provider's word about a card dispute of an incoming
// payment (a Stripe charge.dispute.* webhook), for RecordDispute.
type DisputeReport struct {
	// Provider is the provider's name; ProviderID the disputed operation's
	// id at it (a Stripe PaymentIntent), as the attempt holds it.
	Provider, ProviderID string
	// EventID is the provider's event id: the note's actor id, so a
	// redelivery records nothing twice.
	EventID string
	// DisputeID is the provider's dispute id (a Stripe du_...), kept in the
	// note's evidence; optional.
	DisputeID string
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
// (actor webhook, the event id as actor id: a redelivery is a duplicate),
// its evidence the dispute id and whether the money was withdrawn
// (WithdrawnDisputeEvidence), whatever the attempt's status: a withdrawn
// report keeps the charge unrefundable for good (charges.LockForRefund),
// even when the attempt already holds another divergence (a second
// operation) and after the dispute is won. The first report that the money
// was withdrawn, on a succeeded attempt not diverged yet, records a
// divergence of kind dispute exactly as a reversal is recorded (R9, R19):
// the status and the ledger stay, the attempt goes to review, its owner is
// told (charge.diverged), the audit reports it until an operator books what
// the merchant owes and settles it. Nothing moves here: whether the money
// comes back (the dispute won) is the operator's to book. Reports in any
// order are harmless: whichever chargeback report comes first records the
// divergence, the others are notes. A dispute against an attempt that is
// not succeeded (the provider says the payment was taken while saldo does
// not) is a note and an ERROR log: a lookup, reconciliation or review
// settles its status, and when the attempt then succeeds, the transaction
// that makes it succeeded records the dispute divergence from the note
// (disputeAfterSuccess, disputesAfterSuccess).
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
		evidence, err := json.Marshal(map[string]any{"dispute_id": r.DisputeID, "dispute_withdrawn": r.Withdrawn})
		if err != nil {
			return err
		}
		if err := insertEvent(ctx, tx, Event{AttemptID: a.ID, At: s.clock.Now(), Type: EventNote, Actor: ActorWebhook,
			ActorID: r.EventID, Reason: note, Evidence: evidence}); err != nil {
			return err
		}
		if a.Status != StatusSucceeded {
			after.add(func() {
				s.log.ErrorContext(ctx, "provider reports a dispute of a payment saldo does not hold succeeded: noted; a lookup, reconciliation or review settles it, "+
					"and a withdrawn dispute becomes the divergence when the attempt succeeds",
					"attempt_id", a.ID, "kind", a.Kind, "provider", a.Provider, "reference", a.Reference, "status", a.Status,
					"event_id", r.EventID, "withdrawn", r.Withdrawn, "note", note)
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
		why := disputeWhy(note, r.EventID, false)
		res.Attempt, res.Diverged, err = s.recordDivergence(ctx, tx, after, a, ActorWebhook, DivergenceDispute, why, "dispute")
		return err
	})
	return res, err
}

// disputeWhy is the divergence text of a withdrawn dispute reported by
// webhook event eventID (note: what the provider said); early: the report
// came before the attempt succeeded.
func disputeWhy(note, eventID string, early bool) string {
	by := " (reported by webhook " + eventID + ")"
	if early {
		by = " (reported by webhook " + eventID + " before the attempt succeeded)"
	}
	return "divergence (dispute): " + note + by +
		": the merchant was credited with money the card network took back; a human books it and settles it (R19)"
}

// disputeAfterSuccess records the dispute divergence of a, an attempt
// locked in tx that this transaction just made succeeded and whose owner
// has taken it (credited the charge), when a withdrawn dispute was noted
// on it before (RecordDispute, while it was open): the chargeback was
// reported first, the success second, and the divergence is what it would
// have been in the other order (R9, R19). Only incoming attempts not
// diverged yet are looked at: one indexed look-up of a's notes
// (attempt_events by attempt_id), nothing for a payout or a refund. It
// returns a as it now is.
func (s *Service) disputeAfterSuccess(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt) (Attempt, error) {
	if a.Status != StatusSucceeded || a.Kind.direction() != "in" || a.DivergedAt != nil {
		return a, nil
	}
	var note, eventID string
	err := tx.QueryRow(ctx, `SELECT COALESCE(reason, ''), COALESCE(actor_id, '') FROM attempt_events WHERE attempt_id = $1 AND type = 'note'
		AND evidence @> $2::jsonb ORDER BY id LIMIT 1`, a.ID, WithdrawnDisputeEvidence).Scan(&note, &eventID)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, nil
	}
	if err != nil {
		return a, fmt.Errorf("attempts: withdrawn dispute of %s: %w", a.ID, err)
	}
	na, _, err := s.recordDivergence(ctx, tx, after, a, ActorWebhook, DivergenceDispute,
		disputeWhy(note, eventID, true), "dispute")
	return na, err
}

// disputesAfterSuccess is disputeAfterSuccess for the attempts an
// inTxFinals transaction made final (after.finals), once their owners have
// taken them (finalTogether): one look-up for all of the incoming ones that
// succeeded, and, for each with a withdrawn dispute noted, its divergence
// recorded on the attempt as it now is (locked in tx).
func (s *Service) disputesAfterSuccess(ctx context.Context, tx pgx.Tx, after *afterCommit, finals []Attempt) error {
	var ids []uuid.UUID
	for _, a := range finals {
		if a.Status == StatusSucceeded && a.Kind.direction() == "in" && a.DivergedAt == nil {
			ids = append(ids, a.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	type found struct {
		id            uuid.UUID
		note, eventID string
	}
	rows, err := tx.Query(ctx, `SELECT DISTINCT ON (attempt_id) attempt_id, COALESCE(reason, ''), COALESCE(actor_id, '') FROM attempt_events
		WHERE attempt_id = ANY ($1::uuid[]) AND type = 'note' AND evidence @> $2::jsonb
		ORDER BY attempt_id, id`, ids, WithdrawnDisputeEvidence)
	if err != nil {
		return fmt.Errorf("attempts: withdrawn disputes of %d attempts: %w", len(ids), err)
	}
	fs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (found, error) {
		var f found
		return f, r.Scan(&f.id, &f.note, &f.eventID)
	})
	if err != nil {
		return fmt.Errorf("attempts: withdrawn disputes of %d attempts: %w", len(ids), err)
	}
	for _, f := range fs {
		a, err := lockAttempt(ctx, tx, f.id)
		if err != nil {
			return err
		}
		if a.Status != StatusSucceeded || a.DivergedAt != nil {
			continue
		}
		if _, _, err := s.recordDivergence(ctx, tx, after, a, ActorWebhook, DivergenceDispute,
			disputeWhy(f.note, f.eventID, true), "dispute"); err != nil {
			return err
		}
	}
	return nil
}
