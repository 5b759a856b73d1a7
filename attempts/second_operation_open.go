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
	"github.com/saldo/saldo/providers"
)

// SecondOperationBeforeFinalEvidence is the JSON every note
// NoteSecondOperation writes on an open attempt contains in its evidence
// (evidence @> it): a second operation reported while the attempt was
// open, which the transaction that makes it final turns into its
// divergence (secondOperationAfterFinal).
const SecondOperationBeforeFinalEvidence = `{"second_operation_before_final": true}`

// SecondOperationInput is a report, for NoteSecondOperation, that the
// provider moved money under the attempt's reference as another operation
// (ResolveInput.ProviderID, State succeeded) than its own.
type SecondOperationInput struct {
	ResolveInput
	// Besides is the provider id of the operation the reporter took for the
	// attempt's own ("" when it names none): when the attempt is made final
	// as ProviderID after all, Besides is the second operation.
	Besides string
}

// NoteSecondOperation records a second operation the provider reports under
// the reference of the attempt (in.Reference at in.Provider): another
// provider operation than the one in.Besides names, succeeded, whose
// report is no word about the attempt's own (a reconciliation statement
// listing a copy under the reference of an attempt its own line could not
// resolve: the amount differs, the line is processing). R9, R19:
//   - the attempt final: exactly ResolveByReference (a succeeded attempt
//     records the second_operation divergence, secondOperation; a failed
//     one the late conflict);
//   - the attempt open: a note (actor and evidence as the report's, the
//     evidence holding second_provider_id, besides and
//     SecondOperationBeforeFinalEvidence), once per second provider id,
//     and an ERROR log. Nothing moves and the status stays; the
//     transaction that makes the attempt final records the divergence the
//     report would have been in the other order (secondOperationAfterFinal):
//     succeeded, the second_operation divergence; failed, a
//     paid_after_failure one (money left, or arrived, under a reference
//     saldo resolved failed). A report naming the attempt's own recorded
//     provider id notes nothing.
//
// It returns what ResolveByReference returns for a final attempt
// (ErrProviderIDMismatch for a second operation seen for the first time),
// and the attempt with nil for an open one.
func (s *Service) NoteSecondOperation(ctx context.Context, in SecondOperationInput) (ResolveResult, error) {
	actor, err := sourceActor(in.ResolveInput)
	if err != nil {
		return ResolveResult{}, err
	}
	if in.Reference == "" || in.ProviderID == "" || in.State != providers.StateSucceeded {
		return ResolveResult{}, fmt.Errorf("%w: a second operation needs a reference, a provider id and state succeeded", ErrInvalid)
	}
	var res ResolveResult
	var mismatch error
	err = s.inTx(ctx, func(tx pgx.Tx, after *afterCommit) error {
		mismatch = nil
		a, err := scanAttempt(tx.QueryRow(ctx, `SELECT `+attemptColumns+` FROM attempts WHERE reference = $1 FOR UPDATE`, in.Reference))
		if err != nil {
			return err
		}
		res = ResolveResult{Attempt: a}
		reason := in.Reason
		if reason == "" {
			reason = fmt.Sprintf("%s reports a second operation %s", in.Source, in.ProviderID)
		}
		if a.Status.Final() {
			na, tr, err := s.applyReport(ctx, tx, after, a, actor, report{Provider: in.Provider, Operation: in.Operation,
				Direction: in.Direction, Amount: in.Amount, Currency: in.Currency, State: in.State, ProviderID: in.ProviderID,
				ActorID: in.Actor, Evidence: in.Evidence}, reason)
			if errors.Is(err, ErrProviderIDMismatch) || errors.Is(err, ErrReportMismatch) {
				mismatch, err = err, nil
			}
			res = ResolveResult{Attempt: na, Transitioned: tr}
			return err
		}
		if in.Provider != "" && in.Provider != a.Provider {
			return fmt.Errorf("%w: reference %s is an attempt of %s, not %s", ErrInvalid, a.Reference, a.Provider, in.Provider)
		}
		if in.ProviderID == a.ProviderID {
			return nil // its own operation: not a second one
		}
		var seen bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM attempt_events WHERE attempt_id = $1 AND type = 'note'
			AND evidence->>'second_provider_id' = $2 AND evidence @> $3::jsonb)`, a.ID, in.ProviderID,
			SecondOperationBeforeFinalEvidence).Scan(&seen); err != nil {
			return fmt.Errorf("attempts: second operation %q of %s: %w", in.ProviderID, a.ID, err)
		}
		if seen {
			return nil
		}
		evidence, err := json.Marshal(map[string]any{"second_operation_before_final": true, "second_provider_id": in.ProviderID,
			"state": in.State, "besides": in.Besides, "recorded_provider_id": a.ProviderID, "operation": in.Operation,
			"amount": in.Amount, "currency": in.Currency, "report": in.Evidence})
		if err != nil {
			return err
		}
		what := fmt.Sprintf("%s reported provider operation %q succeeded under reference %s of this %s attempt", actor,
			in.ProviderID, a.Reference, a.Status)
		if in.Besides != "" {
			what += fmt.Sprintf(", besides %q (taken for its own)", in.Besides)
		}
		if err := insertEvent(ctx, tx, Event{AttemptID: a.ID, At: s.clock.Now(), Type: EventNote, Actor: actor,
			ActorID: in.Actor, Reason: pgtext.Truncate(what+": a second operation; nothing moved. When the attempt is made final, "+
				"it is its divergence (R9, R19): "+reason, maxErrorText), Evidence: evidence}); err != nil {
			return err
		}
		after.add(func() {
			s.log.ErrorContext(ctx, "provider reports a second operation under an open attempt's reference: noted; "+
				"its divergence is recorded when the attempt is made final", "attempt_id", a.ID, "kind", a.Kind,
				"provider", a.Provider, "reference", a.Reference, "status", a.Status, "review", a.Review,
				"provider_id", a.ProviderID, "second_provider_id", in.ProviderID, "besides", in.Besides, "actor", actor)
		})
		return nil
	})
	if err != nil {
		return ResolveResult{}, err
	}
	return res, mismatch
}

// sourceActor is the actor of a report from in.Source (ResolveByReference's
// rules: an operator's report needs an operator id and a reason).
func sourceActor(in ResolveInput) (Actor, error) {
	switch in.Source {
	case SourceWebhook:
		return ActorWebhook, nil
	case SourceResolver:
		return ActorResolver, nil
	case SourceReconciliation:
		return ActorReconciliation, nil
	case SourceOperator:
		if in.Actor == "" || strings.TrimSpace(in.Reason) == "" {
			return "", fmt.Errorf("%w: an operator resolution needs an operator id and a reason", ErrInvalid)
		}
		return ActorOperator, nil
	}
	return "", fmt.Errorf("%w: unknown source %q", ErrInvalid, in.Source)
}

// earlySecondOperation is a note NoteSecondOperation wrote.
type earlySecondOperation struct {
	attemptID         uuid.UUID
	secondID, besides string
	actor             Actor
	actorID           string
	evidence          json.RawMessage
}

const earlySecondOperationsSQL = `SELECT attempt_id, COALESCE(evidence->>'second_provider_id', ''),
	COALESCE(evidence->>'besides', ''), actor, COALESCE(actor_id, ''), evidence
	FROM attempt_events WHERE attempt_id = ANY ($1::uuid[]) AND type = 'note' AND evidence @> $2::jsonb
	ORDER BY attempt_id, id`

func earlySecondOperations(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) ([]earlySecondOperation, error) {
	rows, err := tx.Query(ctx, earlySecondOperationsSQL, ids, SecondOperationBeforeFinalEvidence)
	if err != nil {
		return nil, fmt.Errorf("attempts: second operations noted on %d attempts: %w", len(ids), err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (earlySecondOperation, error) {
		var e earlySecondOperation
		return e, r.Scan(&e.attemptID, &e.secondID, &e.besides, &e.actor, &e.actorID, &e.evidence)
	})
	if err != nil {
		return nil, fmt.Errorf("attempts: second operations noted on %d attempts: %w", len(ids), err)
	}
	return out, nil
}

// secondOperationAfterFinal records, on a (locked in tx) that this
// transaction just made final and whose owner has taken it, the divergence
// of each second operation noted on it while it was open
// (NoteSecondOperation): the report came first, the final status second,
// and the divergence is what it would have been in the other order (R9,
// R19). The second operation is the noted one, or, when a was made final
// as that very operation, the one the report took for its own (besides).
// Succeeded: secondOperation, as a report after success records it (the
// second_operation divergence; a note and an alert for another one).
// Failed: a paid_after_failure divergence (money moved under a reference
// whose reserve was released, or that was never credited). One indexed
// look-up of a's notes (attempt_events by attempt_id). It returns a as it
// now is.
func (s *Service) secondOperationAfterFinal(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt) (Attempt, error) {
	if !a.Status.Final() {
		return a, nil
	}
	notes, err := earlySecondOperations(ctx, tx, []uuid.UUID{a.ID})
	if err != nil || len(notes) == 0 {
		return a, err
	}
	return s.applyEarlySecondOperations(ctx, tx, after, a, notes)
}

// secondOperationsAfterFinal is secondOperationAfterFinal for the attempts
// an inTxFinals transaction made final (after.finals), once their owners
// have taken them: one look-up for all of them.
func (s *Service) secondOperationsAfterFinal(ctx context.Context, tx pgx.Tx, after *afterCommit, finals []Attempt) error {
	if len(finals) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, 0, len(finals))
	for _, a := range finals {
		ids = append(ids, a.ID)
	}
	notes, err := earlySecondOperations(ctx, tx, ids)
	if err != nil || len(notes) == 0 {
		return err
	}
	by := map[uuid.UUID][]earlySecondOperation{}
	var order []uuid.UUID
	for _, n := range notes {
		if by[n.attemptID] == nil {
			order = append(order, n.attemptID)
		}
		by[n.attemptID] = append(by[n.attemptID], n)
	}
	for _, id := range order {
		a, err := lockAttempt(ctx, tx, id)
		if err != nil {
			return err
		}
		if _, err := s.applyEarlySecondOperations(ctx, tx, after, a, by[id]); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) applyEarlySecondOperations(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt, notes []earlySecondOperation) (Attempt, error) {
	if !a.Status.Final() {
		return a, nil
	}
	done := map[string]bool{}
	for _, n := range notes {
		second := n.secondID
		if a.ProviderID != "" && second == a.ProviderID {
			second = n.besides
		}
		if second == "" || second == a.ProviderID || done[second] {
			continue
		}
		done[second] = true
		switch a.Status {
		case StatusSucceeded:
			na, err := s.secondOperation(ctx, tx, after, a, n.actor, report{ProviderID: second, State: providers.StateSucceeded,
				ActorID: n.actorID, Evidence: n.evidence})
			if err != nil && !errors.Is(err, ErrProviderIDMismatch) {
				return na, err
			}
			a = na
		case StatusFailed:
			na, err := s.paidBeforeFailure(ctx, tx, after, a, n, second)
			if err != nil {
				return na, err
			}
			a = na
		}
	}
	return a, nil
}

// paidBeforeFailure records on a, failed in this transaction, that the
// provider reported operation second succeeded under its reference while
// it was open (note n): a paid_after_failure divergence, or a note when a
// has diverged already.
func (s *Service) paidBeforeFailure(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt, n earlySecondOperation, second string) (Attempt, error) {
	what := fmt.Sprintf("%s reported provider operation %q succeeded under reference %s while the attempt was open; "+
		"it was then resolved failed by %s", n.actor, second, a.Reference, a.ResolvedBy)
	why := "divergence: " + what + " (the reserve was released): money left that the ledger does not show; a human settles it (R9, R19)"
	if a.Kind.direction() == "in" {
		why = "divergence: " + what + " (nothing was credited): money arrived that the ledger does not show; a human settles it (R9, R19)"
	}
	evidence, err := json.Marshal(map[string]any{"second_provider_id": second, "state": providers.StateSucceeded,
		"recorded_provider_id": a.ProviderID, "report": n.evidence})
	if err != nil {
		return a, err
	}
	if err := insertEvent(ctx, tx, Event{AttemptID: a.ID, At: s.clock.Now(), Type: EventNote, Actor: n.actor,
		ActorID: n.actorID, Reason: pgtext.Truncate(what+": final status kept, nothing moved", maxErrorText), Evidence: evidence}); err != nil {
		return a, err
	}
	na, _, err := s.recordDivergence(ctx, tx, after, a, n.actor, DivergencePaidAfterFailure, why, "succeeded as "+second)
	if err != nil {
		return na, err
	}
	after.add(func() {
		s.log.ErrorContext(ctx, "a second operation reported while the attempt was open: the attempt failed, the money moved",
			"attempt_id", a.ID, "kind", a.Kind, "provider", a.Provider, "reference", a.Reference,
			"second_provider_id", second, "actor", n.actor)
	})
	return na, nil
}
