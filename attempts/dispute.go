package attempts

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

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
