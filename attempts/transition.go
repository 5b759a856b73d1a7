package attempts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/internal/pgtext"
	"github.com/saldo/saldo/internal/sqlcols"
	"github.com/saldo/saldo/providers"
)

// change is one requested status change.
type change struct {
	To            Status
	Actor         Actor
	ActorID       string
	Reason        string
	ProviderID    string
	FailureCode   string
	FailureReason string
	Data          []byte
	Evidence      json.RawMessage
}

// transitioned reports what transition did.
type transitioned struct {
	Attempt      Attempt
	Transitioned bool
	// Mismatch: the change named a provider id different from the recorded
	// one; the attempt was flagged for review instead.
	Mismatch bool
}

// transition applies c to the locked attempt a inside tx: the state machine
// check, the conditional update with its row count checked (R10), the
// transition event, the owner callback for a final status, and the resolver
// job for unknown. A change from a status that does not allow it is not an
// error: the attempt is returned unchanged with Transitioned false (someone
// else resolved it first, or a late event arrived).
func (s *Service) transition(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt, c change) (transitioned, error) {
	if !CanTransition(a.Status, c.To) {
		return transitioned{Attempt: a}, nil
	}
	if c.ProviderID != "" && a.ProviderID == "" {
		if other, err := providerIDHolder(ctx, tx, a, c.ProviderID); err != nil {
			return transitioned{}, err
		} else if other != "" {
			fa, err := s.flagReview(ctx, tx, after, a, c.Actor, providerIDHeldReason(c.Actor, c.ProviderID, a.Reference, other))
			return transitioned{Attempt: fa, Mismatch: true}, err
		}
	}
	if c.ProviderID != "" && a.ProviderID != "" && c.ProviderID != a.ProviderID {
		reason := fmt.Sprintf("%s reported provider id %q for reference %s, recorded %q: possible duplicate operation",
			c.Actor, c.ProviderID, a.Reference, a.ProviderID)
		fa, err := s.flagReview(ctx, tx, after, a, c.Actor, reason)
		return transitioned{Attempt: fa, Mismatch: true}, err
	}
	now := s.clock.Now()
	var resolvedAt, unknownAt, nextLookup *time.Time
	var resolvedBy *string
	if c.To.Final() {
		resolvedAt = &now
		by := string(c.Actor)
		resolvedBy = &by
	}
	if c.To == StatusUnknown {
		unknownAt = &now
		nl := now.Add(s.firstLookupDelay())
		nextLookup = &nl
	}
	var data any
	if len(c.Data) > 0 && json.Valid(c.Data) {
		data = c.Data
	}
	providerState := a.ProviderState
	switch c.To {
	case StatusSucceeded:
		providerState = string(providers.StateSucceeded)
	case StatusFailed:
		if c.Actor != ActorOperator {
			providerState = string(providers.StateFailed)
		}
	}
	row := tx.QueryRow(ctx, `UPDATE attempts SET status = $3,
			provider_id = COALESCE(provider_id, $4), failure_code = COALESCE($5, failure_code),
			failure_reason = COALESCE($6, failure_reason), data = COALESCE($7, data),
			resolved_at = $8, resolved_by = $9, unknown_at = COALESCE($10, unknown_at),
			next_lookup_at = COALESCE($11, next_lookup_at), provider_state = $12, next_send_at = NULL,
			updated_at = $13
		WHERE id = $1 AND status = $2
		RETURNING `+attemptColumns,
		a.ID, a.Status, c.To, sqlcols.Nullable(c.ProviderID), sqlcols.Nullable(c.FailureCode), sqlcols.Nullable(c.FailureReason), data,
		resolvedAt, resolvedBy, unknownAt, nextLookup, sqlcols.Nullable(providerState), now)
	na, err := scanAttempt(row)
	if errors.Is(err, ErrNotFound) {
		// Zero rows: the status moved under us (R10). Normal, not an error.
		return transitioned{Attempt: a}, nil
	}
	if err != nil {
		return transitioned{}, fmt.Errorf("attempts: transition %s %s -> %s: %w", a.ID, a.Status, c.To, err)
	}
	if err := insertEvent(ctx, tx, Event{AttemptID: a.ID, At: now, Type: EventTransition, Actor: c.Actor,
		ActorID: c.ActorID, FromStatus: a.Status, ToStatus: c.To, Reason: c.Reason, Evidence: c.Evidence}); err != nil {
		return transitioned{}, err
	}
	switch {
	case c.To.Final() && after.collectFinals && s.isBatchOwned(na.Kind):
		after.final(na)
	case c.To.Final():
		o := s.owner(na.Kind)
		if o == nil {
			return transitioned{}, fmt.Errorf("%w: %s", ErrNoOwner, na.Kind)
		}
		if err := o.AttemptFinal(ctx, tx, na); err != nil {
			return transitioned{}, fmt.Errorf("attempts: owner of %s refused %s -> %s: %w", na.Kind, a.Status, c.To, err)
		}
		// A chargeback reported while the attempt was open becomes its
		// dispute divergence now that it succeeded and the charge is
		// credited (R9, R19). In an inTxFinals transaction the owner takes
		// it at the end, and disputesAfterSuccess runs after it.
		if na, err = s.disputeAfterSuccess(ctx, tx, after, na); err != nil {
			return transitioned{}, err
		}
		// A second operation reported while the attempt was open becomes
		// its divergence now that it is final (NoteSecondOperation; R9,
		// R19). In an inTxFinals transaction, secondOperationsAfterFinal.
		if na, err = s.secondOperationAfterFinal(ctx, tx, after, na); err != nil {
			return transitioned{}, err
		}
	case c.To == StatusUnknown:
		if err := s.enqueueResolveFor(ctx, tx, na); err != nil {
			return transitioned{}, err
		}
	}
	s.afterTransition(ctx, after, na, a.Status, c.Actor, c.Reason)
	return transitioned{Attempt: na, Transitioned: true}, nil
}

// afterTransition logs and counts the transition of na from status from,
// once the transaction that made it commits.
func (s *Service) afterTransition(ctx context.Context, after *afterCommit, na Attempt, from Status, actor Actor, reason string) {
	after.add(func() {
		s.log.InfoContext(ctx, "attempt transitioned", "attempt_id", na.ID, "kind", na.Kind, "provider", na.Provider,
			"reference", na.Reference, "from", from, "to", na.Status, "actor", actor, "reason", reason)
		s.metrics.transition(na)
	})
}

// enqueueResolveFor inserts the attempt's resolver job in tx. The job is unique
// per attempt among live jobs, so a duplicate insert is skipped.
func (s *Service) enqueueResolveFor(ctx context.Context, tx pgx.Tx, a Attempt) error {
	_, err := s.riverClient(ctx).InsertTx(ctx, tx, ResolveAttemptArgs{AttemptID: a.ID}, s.resolveOptsFor(a))
	if err != nil {
		return fmt.Errorf("attempts: enqueue resolver for %s: %w", a.ID, err)
	}
	return nil
}

// flagReview puts an open attempt in the human review queue with an alert
// (R18, R25). Never a status change: a human or a later provider answer
// resolves it.
func (s *Service) flagReview(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt, actor Actor, reason string) (Attempt, error) {
	if !a.Status.Open() || a.Review {
		return a, nil
	}
	now := s.clock.Now()
	na, err := scanAttempt(tx.QueryRow(ctx, `UPDATE attempts SET review = true, review_reason = $2,
		review_at = $3, updated_at = $3 WHERE id = $1 AND NOT review AND status IN ('pending', 'unknown')
		RETURNING `+attemptColumns, a.ID, pgtext.Truncate(reason, maxErrorText), now))
	if errors.Is(err, ErrNotFound) {
		return a, nil
	}
	if err != nil {
		return a, err
	}
	if err := insertEvent(ctx, tx, Event{AttemptID: a.ID, At: now, Type: EventReview, Actor: actor, Reason: reason}); err != nil {
		return a, err
	}
	after.add(func() {
		s.log.ErrorContext(ctx, "attempt needs human review", "attempt_id", na.ID, "kind", na.Kind,
			"provider", na.Provider, "reference", na.Reference, "status", na.Status, "reason", reason)
		s.metrics.reviewFlagged(na)
		if s.cfg.OnReview != nil {
			s.cfg.OnReview(na, reason)
		}
	})
	return na, nil
}

// providerIDHolder is the id of another attempt at a's provider that holds
// provider id pid ("" when none): a report naming it for a is about another
// operation (a PSP's bug, a forged or misrouted notice), never a's word. Its
// unique index would otherwise refuse the write with an error on every
// redelivery and every lookup, and the attempt would never reach review.
func providerIDHolder(ctx context.Context, tx pgx.Tx, a Attempt, pid string) (string, error) {
	var other string
	err := tx.QueryRow(ctx, `SELECT id::text FROM attempts WHERE provider = $1 AND provider_id = $2 AND id <> $3`,
		a.Provider, pid, a.ID).Scan(&other)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("attempts: who holds provider id %q: %w", pid, err)
	}
	return other, nil
}

// providerIDHeldReason is the review reason for a report naming a provider id that
// another attempt holds.
func providerIDHeldReason(actor Actor, pid, reference, other string) string {
	return fmt.Sprintf("%s reported provider id %q for reference %s, but attempt %s already holds it: "+
		"a report about another operation, nothing moved", actor, pid, reference, other)
}

// acknowledge keeps on the open attempt a what the provider acknowledged
// (R16; issue 13 finding 2): the first acknowledgement's time and words,
// and the provider id when it names one and none is recorded. A provider id
// other than the recorded one is a contradiction: the attempt is flagged
// for review and the recorded id kept. A final attempt is left alone.
func (s *Service) acknowledge(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt, actor Actor, providerID, what string) (Attempt, error) {
	if !a.Status.Open() {
		return a, nil
	}
	if providerID != "" && a.ProviderID != "" && providerID != a.ProviderID {
		fa, err := s.flagReview(ctx, tx, after, a, actor, fmt.Sprintf("%s: provider id %q, recorded %q: possible duplicate operation",
			what, providerID, a.ProviderID))
		if err != nil {
			return a, err
		}
		a, providerID = fa, ""
	}
	if providerID != "" && a.ProviderID == "" {
		other, err := providerIDHolder(ctx, tx, a, providerID)
		if err != nil {
			return a, err
		}
		if other != "" {
			fa, err := s.flagReview(ctx, tx, after, a, actor, what+": "+providerIDHeldReason(actor, providerID, a.Reference, other))
			if err != nil {
				return a, err
			}
			a, providerID = fa, ""
		}
	}
	if a.AcknowledgedAt != nil && (providerID == "" || a.ProviderID != "") {
		return a, nil // nothing new to keep
	}
	now := s.clock.Now()
	na, err := scanAttempt(tx.QueryRow(ctx, `UPDATE attempts SET provider_id = COALESCE(provider_id, $2),
		acknowledged_at = COALESCE(acknowledged_at, $3), acknowledgement = COALESCE(acknowledgement, $4), updated_at = $3
		WHERE id = $1 RETURNING `+attemptColumns, a.ID, sqlcols.Nullable(providerID), now, pgtext.Truncate(what, maxErrorText)))
	if err != nil {
		return a, fmt.Errorf("attempts: keep acknowledgement of %s: %w", a.ID, err)
	}
	return na, nil
}

// markProcessing records that the provider accepted the operation and has not
// finished it: the attempt stays open (pending stays pending, unknown stays
// unknown) and a resolver job follows it up. expectedBy, when not zero, is
// when the provider says it expects the operation to end: kept (the latest
// statement replaces an earlier one; a report without one keeps it) and
// capped at MaxProcessingExpectedAfter after processing began
// (capExpectedBy), the review's deadline (ProcessingReviewAt, R18).
func (s *Service) markProcessing(ctx context.Context, tx pgx.Tx, a Attempt, actor Actor, providerID string, data []byte,
	expectedBy time.Time) (Attempt, error) {
	if !a.Status.Open() {
		return a, nil
	}
	if providerID != "" && a.ProviderID != "" && providerID != a.ProviderID {
		return a, ErrProviderIDMismatch
	}
	if providerID != "" && a.ProviderID == "" {
		if other, err := providerIDHolder(ctx, tx, a, providerID); err != nil {
			return a, err
		} else if other != "" {
			return a, ErrProviderIDMismatch
		}
	}
	now := s.clock.Now()
	var d any
	if len(data) > 0 && json.Valid(data) {
		d = data
	}
	first := a.ProviderState != string(providers.StateProcessing)
	var nextLookup *time.Time
	if first && a.NextLookupAt == nil {
		nl := now.Add(s.firstLookupDelay())
		nextLookup = &nl
	}
	since := now
	if a.ProcessingFrom != nil {
		since = *a.ProcessingFrom
	}
	expected, capped := capExpectedBy(since, expectedBy)
	na, err := scanAttempt(tx.QueryRow(ctx, `UPDATE attempts SET provider_state = 'processing',
		processing_since = COALESCE(processing_since, $2), provider_id = COALESCE(provider_id, $3),
		data = COALESCE($4, data), next_lookup_at = COALESCE(next_lookup_at, $5), next_send_at = NULL, updated_at = $2,
		processing_expected_by = COALESCE($7, processing_expected_by)
		WHERE id = $1 AND status = $6 RETURNING `+attemptColumns, a.ID, now, sqlcols.Nullable(providerID), d, nextLookup, a.Status,
		expected))
	if errors.Is(err, ErrNotFound) {
		return a, nil
	}
	if err != nil {
		return a, err
	}
	if first {
		reason := "provider reports processing"
		if expected != nil {
			reason += ", expected to end by " + fmtTime(expected)
		}
		if err := insertEvent(ctx, tx, Event{AttemptID: a.ID, At: now, Type: EventProcessing, Actor: actor,
			Reason: reason}); err != nil {
			return a, err
		}
	}
	if capped && (a.ProcessingExpectedBy == nil || !a.ProcessingExpectedBy.Equal(*expected)) {
		// Once per attempt, not at every lookup repeating the date.
		s.log.WarnContext(ctx, "provider expects a processing operation to end beyond the cap; the review deadline is capped",
			"attempt_id", a.ID, "kind", a.Kind, "provider", a.Provider, "reference", a.Reference,
			"expected_by", expectedBy, "capped_at", *expected, "actor", actor)
	}
	if !na.Review {
		if err := s.enqueueResolveFor(ctx, tx, na); err != nil {
			return a, err
		}
	}
	return na, nil
}

// capExpectedBy is the end date a provider stated for a processing
// operation (zero: none, nil) as the attempts core keeps it: at most
// MaxProcessingExpectedAfter after since (when the attempt was first
// reported processing), so that a bogus far-future date cannot keep a
// stuck attempt, and its reserve, out of review for ever (R18). capped
// reports that the date was cut.
func capExpectedBy(since, expectedBy time.Time) (*time.Time, bool) {
	if expectedBy.IsZero() {
		return nil, false
	}
	limit := since.Add(MaxProcessingExpectedAfter)
	if expectedBy.After(limit) {
		return &limit, true
	}
	e := expectedBy.UTC()
	return &e, false
}
