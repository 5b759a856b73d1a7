package attempts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/internal/pgtext"
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
	// SecondOperation: the disputed payment is not Attempt's own but the
	// second operation recorded on it (a payment charged twice under its
	// reference, secondOperation): the report is a note on Attempt, with
	// no dispute marker and no divergence (Attempt's payment is not
	// disputed).
	SecondOperation bool
}

// secondOperationHolderSQL finds the incoming attempt at provider $1 whose
// note records $2 as a second operation under its reference (evidence
// second_provider_id, secondOperation); the first so noted when several
// are. Served by attempt_events_second_provider_id (migration 00112), a
// partial index of those notes only: its predicate is implied by this
// query's type and equality conditions.
const secondOperationHolderSQL = `SELECT e.attempt_id FROM attempt_events e JOIN attempts a ON a.id = e.attempt_id
	WHERE e.type = 'note' AND (e.evidence->>'second_provider_id') = $2 AND a.provider = $1 AND a.direction = 'in'
	ORDER BY e.id LIMIT 1`

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
//
// A dispute of a payment no incoming attempt holds may be of the second
// operation recorded on one (a card charged twice under our reference, the
// second payment intent known only from the note secondOperation wrote):
// the cardholder disputing the duplicate payment is news for the operator
// handling that second_operation divergence. It is noted on that attempt
// (deduplicated by event id the same way), its evidence naming the second
// operation and the dispute (second_operation_dispute, dispute_id,
// withdrawn), never the dispute_withdrawn marker: the attempt's own payment
// is not disputed, so its charge stays refundable and no dispute
// divergence is recorded. It is logged at ERROR (money moves on a double
// charge; the log says when the divergence was already settled: what the
// operator booked for the second payment may now be returned twice).
func (s *Service) RecordDispute(ctx context.Context, r DisputeReport) (DisputeResult, error) {
	if r.Provider == "" || r.ProviderID == "" || r.EventID == "" || strings.TrimSpace(r.Note) == "" {
		return DisputeResult{}, fmt.Errorf("%w: a dispute report needs a provider, a provider id, an event id and a note", ErrInvalid)
	}
	var res DisputeResult
	err := s.inTx(ctx, func(tx pgx.Tx, after *afterCommit) error {
		res = DisputeResult{}
		a, err := scanAttempt(tx.QueryRow(ctx, `SELECT `+attemptColumns+` FROM attempts
			WHERE provider = $1 AND provider_id = $2 AND direction = 'in' FOR UPDATE`, r.Provider, r.ProviderID))
		if errors.Is(err, ErrNotFound) {
			res.SecondOperation = true
			a, err = s.secondOperationHolder(ctx, tx, r)
		}
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
		note := pgtext.Truncate(r.Note, 2000)
		if res.SecondOperation {
			return s.noteSecondOperationDispute(ctx, tx, after, a, r, note)
		}
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

// secondOperationHolder is the incoming attempt, locked in tx, whose note
// records r.ProviderID at r.Provider as a second operation under its
// reference (secondOperationHolderSQL); ErrNotFound when none does.
func (s *Service) secondOperationHolder(ctx context.Context, tx pgx.Tx, r DisputeReport) (Attempt, error) {
	var id uuid.UUID
	err := tx.QueryRow(ctx, secondOperationHolderSQL, r.Provider, r.ProviderID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Attempt{}, ErrNotFound
	}
	if err != nil {
		return Attempt{}, fmt.Errorf("attempts: second operation %q at %s: %w", r.ProviderID, r.Provider, err)
	}
	return lockAttempt(ctx, tx, id)
}

// noteSecondOperationDispute notes on a (locked in tx) the dispute r of the
// second operation recorded on it (RecordDispute): evidence naming the
// second operation and the dispute, without the dispute_withdrawn marker
// (a's own payment is not disputed), and after commit an ERROR log and
// an alert (saldo_attempts_final_conflicts_total, OnReview), once per
// dispute event (a redelivery is a duplicate and alerts nobody).
func (s *Service) noteSecondOperationDispute(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt, r DisputeReport, note string) error {
	evidence, err := json.Marshal(map[string]any{"second_operation_dispute": true, "second_provider_id": r.ProviderID,
		"dispute_id": r.DisputeID, "withdrawn": r.Withdrawn})
	if err != nil {
		return err
	}
	reason := pgtext.Truncate("dispute of the second operation "+r.ProviderID+" under this attempt's reference (not of "+
		a.ProviderID+", this attempt's own payment): "+note, 2000)
	if err := insertEvent(ctx, tx, Event{AttemptID: a.ID, At: s.clock.Now(), Type: EventNote, Actor: ActorWebhook,
		ActorID: r.EventID, Reason: reason, Evidence: evidence}); err != nil {
		return err
	}
	settled, kind := a.DivergenceSettledAt != nil, a.DivergenceKind
	msg := "provider reports a dispute of a second operation (a payment charged twice under the attempt's reference): noted on the attempt; " +
		"the operator handling the second operation books it"
	if settled {
		msg = "provider reports a dispute of a second operation whose divergence was already settled: noted on the attempt; " +
			"check what was booked for the second payment (a refund of it and this chargeback would return it twice)"
	}
	after.add(func() {
		s.log.ErrorContext(ctx, msg, "attempt_id", a.ID, "kind", a.Kind, "provider", a.Provider, "reference", a.Reference,
			"provider_id", a.ProviderID, "second_provider_id", r.ProviderID, "dispute", r.DisputeID, "event_id", r.EventID,
			"withdrawn", r.Withdrawn, "divergence_kind", kind, "divergence_settled", settled, "note", note)
		// Money moves on a double charge: alerted as a further second
		// operation is (the conflicts counter and the review hook), not
		// only logged.
		s.metrics.conflict(a)
		if s.cfg.OnReview != nil {
			s.cfg.OnReview(a, reason)
		}
	})
	return nil
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
