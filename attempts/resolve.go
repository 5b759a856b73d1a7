package attempts

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/providers"
)

// report is a provider's statement about one operation, from a lookup, a
// webhook, a statement or an operator.
type report struct {
	State         providers.State
	ProviderID    string
	FailureCode   string
	FailureReason string
	Data          []byte
	Evidence      json.RawMessage
	ActorID       string
}

type lookupClass string

const (
	lookupFound        lookupClass = "found"
	lookupNotFound     lookupClass = "not_found"
	lookupInconclusive lookupClass = "inconclusive"
)

// classifyLookup: found needs a readable answer naming a state; not found
// needs a clean 404 or an empty 2xx search result. Anything else (transport
// error, 5xx, 429, auth errors) proves nothing.
func classifyLookup(lr providers.LookupResult) lookupClass {
	ex := lr.Exchange
	if ex.Err != nil {
		return lookupInconclusive
	}
	if lr.Found {
		switch lr.State {
		case providers.StateSucceeded, providers.StateFailed, providers.StateProcessing:
			return lookupFound
		}
		return lookupInconclusive
	}
	if ex.StatusCode == 404 || (ex.StatusCode >= 200 && ex.StatusCode < 300) {
		return lookupNotFound
	}
	return lookupInconclusive
}

func lookupState(lr providers.LookupResult) report {
	return report{State: lr.State, ProviderID: lr.ProviderID, FailureCode: lr.FailureCode,
		FailureReason: lr.FailureReason, Data: lr.Data}
}

func insertLookupEvent(ctx context.Context, tx pgx.Tx, a Attempt, lr providers.LookupResult, class lookupClass, actor Actor, now time.Time) error {
	ex := lr.Exchange
	outcome := string(class)
	if class == lookupFound {
		outcome = "found_" + string(lr.State)
	}
	errText := ""
	if ex.Err != nil {
		errText = ex.Err.Error()
	}
	return insertEvent(ctx, tx, Event{AttemptID: a.ID, At: now, Type: EventLookup, Actor: actor,
		StartedAt: timePtr(ex.Started), EndedAt: timePtr(ex.Ended), Outcome: outcome, StatusCode: ex.StatusCode,
		ProviderRequestID: ex.ProviderRequestID, WireCalls: ex.WireCalls, Error: errText})
}

// applyProviderState applies what the provider says about the attempt's
// operation: succeeded or failed transition an open attempt (conditionally,
// R10); processing keeps it open; a final attempt never changes (a
// contradiction is noted and logged).
func (s *Service) applyProviderState(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt, actor Actor, r report, reason string) (Attempt, error) {
	a, _, err := s.applyReport(ctx, tx, after, a, actor, r, reason)
	if errors.Is(err, ErrProviderIDMismatch) {
		return a, nil // flagged for review; not an error for jobs
	}
	return a, err
}

func (s *Service) applyReport(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt, actor Actor, r report, reason string) (Attempt, bool, error) {
	switch r.State {
	case providers.StateSucceeded, providers.StateFailed:
		to := StatusSucceeded
		if r.State == providers.StateFailed {
			to = StatusFailed
		}
		if a.Status.Final() {
			if a.Status != to {
				return a, false, s.lateConflict(ctx, tx, after, a, actor, string(r.State))
			}
			return a, false, nil
		}
		tr, err := s.transition(ctx, tx, after, a, change{To: to, Actor: actor, ActorID: r.ActorID, Reason: reason,
			ProviderID: r.ProviderID, FailureCode: r.FailureCode, FailureReason: r.FailureReason, Data: r.Data,
			Evidence: r.Evidence})
		if err != nil {
			return a, false, err
		}
		if tr.Mismatch {
			return tr.Attempt, false, ErrProviderIDMismatch
		}
		return tr.Attempt, tr.Transitioned, nil
	case providers.StateProcessing:
		// "processing" never downgrades anything: a final attempt ignores it.
		na, err := s.markProcessing(ctx, tx, a, actor, r.ProviderID, r.Data)
		if errors.Is(err, ErrProviderIDMismatch) {
			na, err = s.flagReview(ctx, tx, after, a, actor, fmt.Sprintf("%s reported provider id %q, recorded %q",
				actor, r.ProviderID, a.ProviderID))
			if err == nil {
				err = ErrProviderIDMismatch
			}
		}
		return na, false, err
	}
	return a, false, fmt.Errorf("%w: provider state %q", ErrInvalid, r.State)
}

// ResolveResult says what a resolution did.
type ResolveResult struct {
	Attempt Attempt
	// Transitioned: this call changed the attempt's status.
	Transitioned bool
	// RetryIn > 0: look again after this delay (resolver jobs snooze for it).
	RetryIn time.Duration
}

// Resolve makes at most one lookup for an attempt awaiting resolution (what
// the ResolveAttempt worker calls; R14-R16, R18, R25). It returns at once
// when the attempt is final, not awaiting resolution, or in review.
//
// Schedule: the lookup happens when next_lookup_at (set when the attempt
// became unknown or processing, then after each lookup from
// Config.ResolveSchedule) has come. Found succeeded/failed resolves the
// attempt; processing keeps it open; not found resolves it failed only when
// the provider's consistency window has passed since the last call ended or
// was given up (R16), and never when the provider already named or
// acknowledged the operation.
// After MaxLookups lookups, or ProcessingReviewAfter of "processing", or
// for a provider that cannot look up, the attempt goes to review with an
// alert, never to automatic failure.
func (s *Service) Resolve(ctx context.Context, id uuid.UUID) (ResolveResult, error) {
	a, err := s.Get(ctx, s.pool, id)
	if err != nil {
		return ResolveResult{}, err
	}
	res := ResolveResult{Attempt: a}
	if !a.AwaitingResolution() || a.Review {
		return res, nil
	}
	prov, ok := s.providers[a.Provider]
	if !ok {
		return res, fmt.Errorf("attempts: attempt %s: provider %q not configured in this process", a.ID, a.Provider)
	}
	caps := prov.Capabilities()
	now := s.clock.Now()
	review := func(reason string) (ResolveResult, error) {
		err := s.inTx(ctx, func(tx pgx.Tx, after *afterCommit) error {
			la, err := lockAttempt(ctx, tx, a.ID)
			if err != nil {
				return err
			}
			res.Attempt, err = s.flagReview(ctx, tx, after, la, ActorResolver, reason)
			return err
		})
		return res, err
	}
	switch {
	case !caps.LookupByReference:
		return review(fmt.Sprintf("provider %s cannot look up by reference: review and reconciliation decide (R25)", a.Provider))
	case a.NextLookupAt != nil && now.Before(*a.NextLookupAt):
		res.RetryIn = a.NextLookupAt.Sub(now)
		return res, nil
	case a.LookupCount >= s.cfg.MaxLookups:
		return review(fmt.Sprintf("%d lookups and the outcome is still unclear (R18)", a.LookupCount))
	case a.ProcessingFrom != nil && now.Sub(*a.ProcessingFrom) >= s.cfg.ProcessingReviewAfter:
		return review(fmt.Sprintf("provider reports processing since %s (R18)", fmtTime(a.ProcessingFrom)))
	}

	lr, lerr := prov.Lookup(ctx, providers.Operation(a.Operation), a.Reference)
	if lerr != nil {
		return review(fmt.Sprintf("lookup by reference refused: %v (R25)", lerr))
	}
	class := classifyLookup(lr)
	rctx := context.WithoutCancel(ctx)
	err = s.inTx(rctx, func(tx pgx.Tx, after *afterCommit) error {
		res.Transitioned, res.RetryIn = false, 0
		la, err := lockAttempt(rctx, tx, a.ID)
		if err != nil {
			return err
		}
		now := s.clock.Now()
		if err := insertLookupEvent(rctx, tx, la, lr, class, ActorResolver, now); err != nil {
			return err
		}
		next := now.Add(s.lookupDelay(la.LookupCount + 1))
		la, err = scanAttempt(tx.QueryRow(rctx, `UPDATE attempts SET lookup_count = lookup_count + 1,
			last_lookup_at = $2, next_lookup_at = $3, updated_at = $2 WHERE id = $1 RETURNING `+attemptColumns,
			a.ID, now, next))
		if err != nil {
			return err
		}
		res.Attempt = la
		if !la.Status.Open() {
			return nil
		}
		switch class {
		case lookupFound:
			before := la.Status
			na, err := s.applyProviderState(rctx, tx, after, la, ActorResolver, lookupState(lr),
				fmt.Sprintf("lookup %d found %s", la.LookupCount, lr.State))
			res.Attempt, res.Transitioned = na, na.Status != before
			return err
		case lookupNotFound:
			if la.Status != StatusUnknown || la.Acknowledged() {
				// The provider already named or acknowledged this operation
				// (a provider id, a 2xx, a 409 "key in use", a processing
				// report): a later "not found" contradicts it and proves
				// nothing. Never failed on it; the lookups go on and, once
				// exhausted, a human decides (R16, R18).
				return nil
			}
			// Counted from the latest moment the request could still have
			// been on its way: the last call's start or recorded end, or when
			// we stopped waiting for it (unknown_at).
			ref := &la.CreatedAt
			for _, t := range []*time.Time{la.CallStartedAt, la.CallEndedAt, la.UnknownAt} {
				if t != nil && t.After(*ref) {
					ref = t
				}
			}
			if now.Sub(*ref) < caps.ConsistencyWindow {
				return nil
			}
			tr, err := s.transition(rctx, tx, after, la, change{To: StatusFailed, Actor: ActorResolver,
				FailureCode: "not_found",
				Reason: fmt.Sprintf("lookup %d: not found %s after the last call (consistency window %s, R16)",
					la.LookupCount, now.Sub(*ref).Round(time.Second), caps.ConsistencyWindow),
				FailureReason: "the provider has no operation with our reference after its consistency window"})
			res.Attempt, res.Transitioned = tr.Attempt, tr.Transitioned
			return err
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	if res.Attempt.AwaitingResolution() && !res.Attempt.Review && res.Attempt.NextLookupAt != nil {
		res.RetryIn = max(res.Attempt.NextLookupAt.Sub(s.clock.Now()), time.Second)
	}
	return res, nil
}

// Source is who reports a resolution through ResolveByReference.
type Source string

// Sources.
const (
	SourceWebhook        Source = "webhook"
	SourceResolver       Source = "resolver"
	SourceReconciliation Source = "reconciliation"
	SourceOperator       Source = "operator"
)

// ResolveInput is a provider's statement about the operation with our
// Reference (from a webhook, a statement, an operator).
type ResolveInput struct {
	Reference     string
	State         providers.State
	ProviderID    string
	FailureCode   string
	FailureReason string
	Data          []byte
	Source        Source
	// Actor identifies the source instance (webhook event id, operator id).
	Actor  string
	Reason string
}

// ResolveByReference applies a provider's statement to the attempt with that
// reference (R17): a conditional transition, so duplicates and out-of-order
// events are harmless, "processing" never downgrades anything and a final
// status never changes. It reports whether this call changed the status.
// ErrNotFound when no attempt has the reference; ErrProviderIDMismatch (the
// attempt is then flagged for review) when the provider id contradicts the
// recorded one.
func (s *Service) ResolveByReference(ctx context.Context, in ResolveInput) (ResolveResult, error) {
	var actor Actor
	switch in.Source {
	case SourceWebhook:
		actor = ActorWebhook
	case SourceResolver:
		actor = ActorResolver
	case SourceReconciliation:
		actor = ActorReconciliation
	case SourceOperator:
		actor = ActorOperator
		if in.Actor == "" || strings.TrimSpace(in.Reason) == "" {
			return ResolveResult{}, fmt.Errorf("%w: an operator resolution needs an operator id and a reason", ErrInvalid)
		}
	default:
		return ResolveResult{}, fmt.Errorf("%w: unknown source %q", ErrInvalid, in.Source)
	}
	switch in.State {
	case providers.StateSucceeded, providers.StateFailed, providers.StateProcessing:
	default:
		return ResolveResult{}, fmt.Errorf("%w: unknown provider state %q", ErrInvalid, in.State)
	}
	if in.Reference == "" {
		return ResolveResult{}, fmt.Errorf("%w: empty reference", ErrInvalid)
	}
	var res ResolveResult
	var mismatch error
	err := s.inTx(ctx, func(tx pgx.Tx, after *afterCommit) error {
		mismatch = nil
		a, err := scanAttempt(tx.QueryRow(ctx, `SELECT `+attemptColumns+` FROM attempts WHERE reference = $1 FOR UPDATE`, in.Reference))
		if err != nil {
			return err
		}
		reason := in.Reason
		if reason == "" {
			reason = fmt.Sprintf("%s reports %s", in.Source, in.State)
		}
		na, tr, err := s.applyReport(ctx, tx, after, a, actor, report{State: in.State, ProviderID: in.ProviderID,
			FailureCode: in.FailureCode, FailureReason: in.FailureReason, Data: in.Data, ActorID: in.Actor}, reason)
		if errors.Is(err, ErrProviderIDMismatch) {
			mismatch, err = err, nil
		}
		res = ResolveResult{Attempt: na, Transitioned: tr}
		return err
	})
	if err != nil {
		return ResolveResult{}, err
	}
	return res, mismatch
}

// ResolveManually is an operator's decision on an open attempt (usually one
// in the review queue): status succeeded or failed, with the operator's id, a
// reason and evidence kept in the transition event. It goes through the same
// conditional transition as everything else; on an attempt that is already
// final it changes nothing (same status: Transitioned false; a different
// status: a TransitionError).
func (s *Service) ResolveManually(ctx context.Context, attemptID uuid.UUID, status Status, operatorID, reason string, evidence json.RawMessage) (ResolveResult, error) {
	if !status.Final() {
		return ResolveResult{}, fmt.Errorf("%w: an operator resolves to succeeded or failed, not %q", ErrInvalid, status)
	}
	if strings.TrimSpace(operatorID) == "" || strings.TrimSpace(reason) == "" {
		return ResolveResult{}, fmt.Errorf("%w: operator id and reason are required", ErrInvalid)
	}
	if len(evidence) > 0 && !json.Valid(evidence) {
		return ResolveResult{}, fmt.Errorf("%w: evidence must be JSON", ErrInvalid)
	}
	var res ResolveResult
	err := s.inTx(ctx, func(tx pgx.Tx, after *afterCommit) error {
		a, err := lockAttempt(ctx, tx, attemptID)
		if err != nil {
			return err
		}
		if a.Status.Final() {
			res = ResolveResult{Attempt: a}
			if a.Status != status {
				return &TransitionError{From: a.Status, To: status}
			}
			return nil
		}
		c := change{To: status, Actor: ActorOperator, ActorID: operatorID, Reason: reason, Evidence: evidence}
		if status == StatusFailed {
			c.FailureCode, c.FailureReason = "operator", reason
		}
		tr, err := s.transition(ctx, tx, after, a, c)
		res = ResolveResult{Attempt: tr.Attempt, Transitioned: tr.Transitioned}
		return err
	})
	return res, err
}

// ReviewQueueParams pages the review queue.
type ReviewQueueParams struct {
	// After is the cursor returned by the previous page ("" for the first).
	After string
	// Limit defaults to 50, at most 500.
	Limit int
}

// ReviewQueue lists open attempts flagged for review, oldest flag first,
// and the cursor of the next page ("" when this is the last).
func (s *Service) ReviewQueue(ctx context.Context, db DB, p ReviewQueueParams) ([]Attempt, string, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	if limit > 500 {
		limit = 500
	}
	afterAt := time.Time{}
	afterID := uuid.Nil
	if p.After != "" {
		var err error
		afterAt, afterID, err = decodeCursor(p.After)
		if err != nil {
			return nil, "", err
		}
	}
	list, err := queryAttempts(ctx, db, `SELECT `+attemptColumns+` FROM attempts
		WHERE review AND status IN ('pending', 'unknown') AND (review_at, id) > ($1, $2)
		ORDER BY review_at, id LIMIT $3`, afterAt, afterID, limit+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(list) > limit {
		list = list[:limit]
		last := list[len(list)-1]
		next = encodeCursor(*last.ReviewAt, last.ID)
	}
	return list, next, nil
}

func encodeCursor(t time.Time, id uuid.UUID) string {
	return base64.RawURLEncoding.EncodeToString([]byte(t.UTC().Format(time.RFC3339Nano) + "|" + id.String()))
}

func decodeCursor(c string) (time.Time, uuid.UUID, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		if ts, ids, ok := strings.Cut(string(b), "|"); ok {
			t, err1 := time.Parse(time.RFC3339Nano, ts)
			id, err2 := uuid.Parse(ids)
			if err1 == nil && err2 == nil {
				return t, id, nil
			}
		}
	}
	return time.Time{}, uuid.Nil, fmt.Errorf("%w: bad review queue cursor", ErrInvalid)
}
