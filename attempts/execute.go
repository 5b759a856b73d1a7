package attempts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/internal/sqlcols"
	"github.com/saldo/saldo/providers"
)

// ExecuteResult says what one Execute did.
type ExecuteResult struct {
	// Attempt as it is after Execute.
	Attempt Attempt
	// Sent: a Submit call was made (Outcome is its class).
	Sent    bool
	Outcome Outcome
	// RetryIn > 0: the attempt is still pending and may be sent (or checked)
	// again after this delay; the SubmitAttempt worker snoozes for it.
	RetryIn time.Duration
}

// Execute makes at most one provider call for a pending attempt (R11, R12).
//
// Before calling it checks what is safe:
//   - not pending, or pending and reported processing: nothing to send;
//   - a call started and recorded nothing (a crash, or a call still running
//     elsewhere): the request may have left, so the attempt becomes unknown
//     and is resolved by lookup, never re-sent blind;
//   - the re-send backoff has not elapsed: RetryIn;
//   - MaxSends reached (calls whose credentials were refused not
//     counted), or the provider's key has expired since the attempt
//     opened (R14): unknown, resolved by lookup;
//   - a provider without idempotency keys (R20): before any re-send, a
//     lookup by reference once the consistency window since the last call
//     has passed; re-send only if nothing is found.
//
// Then phase 2 durably increments the call count in its own short
// transaction, the call is made with no transaction open, and phase 3
// records the classified result (event, conditional transition, owner
// callback) in one short transaction. Phases 2 and 3 (and the read before
// them) are shared with the attempts other workers execute at the same
// time (group commit, batch.go); a first send, which needs none of the
// checks above, is read and marked by one statement.
func (s *Service) Execute(ctx context.Context, id uuid.UUID) (ExecuteResult, error) {
	// A first send needs none of the checks below: one statement, shared
	// with the other first sends starting now, reads the attempt and marks
	// its first call in flight (firstSendSQL). While a provider's circuit
	// is open, every send takes the checked path, which holds it back.
	if s.breakers.allClosed() {
		if a, err := s.firstSender.Do(ctx, id); err != nil {
			return ExecuteResult{}, err
		} else if a.ID != uuid.Nil {
			return s.call(ctx, s.providers[a.Provider], a, 1)
		}
	}
	a, err := s.getter.Do(ctx, id)
	if err != nil {
		return ExecuteResult{}, err
	}
	res := ExecuteResult{Attempt: a}
	if a.Status != StatusPending || a.ProviderState == string(providers.StateProcessing) {
		return res, nil
	}
	prov, ok := s.providers[a.Provider]
	if !ok {
		return res, fmt.Errorf("attempts: attempt %s: provider %q not configured in this process", a.ID, a.Provider)
	}
	caps := prov.Capabilities()
	now := s.clock.Now()
	maxed := false
	if a.CallCount >= s.cfg.MaxSends && !a.CallInFlight() {
		if maxed, err = s.maxedSends(ctx, s.pool, a); err != nil {
			return res, err
		}
	}

	switch {
	case a.CallInFlight():
		return s.executeToUnknown(ctx, a, fmt.Sprintf("call %d started at %s and recorded nothing: it may have left; resolve by lookup",
			a.CallCount, fmtTime(a.CallStartedAt)))
	case a.NextSendAt != nil && now.Before(*a.NextSendAt):
		res.RetryIn = a.NextSendAt.Sub(now)
		return res, nil
	case maxed:
		return s.executeToUnknown(ctx, a, fmt.Sprintf("%d calls made without a definitive answer; resolve by lookup", a.CallCount))
	case a.CallCount > 0 && a.KeyExpiresAt != nil && !now.Before(*a.KeyExpiresAt):
		return s.executeToUnknown(ctx, a, fmt.Sprintf("provider key expired at %s: a re-send could create a second operation (R14)",
			fmtTime(a.KeyExpiresAt)))
	}

	if !caps.IdempotencyKeys && a.CallCount > 0 {
		done, r, err := s.lookupBeforeResend(ctx, prov, caps, a)
		if done || err != nil {
			return r, err
		}
	}

	if sum := sha256.Sum256(a.Payload); !bytes.Equal(sum[:], a.PayloadSHA256) {
		return res, fmt.Errorf("%w: attempt %s", ErrPayloadTampered, a.ID)
	}
	// The provider's circuit is open: wait (snooze), never fail.
	if ok, wait := s.breakers.allow(a.Provider, a.Operation); !ok {
		res.RetryIn = wait
		return res, nil
	}

	// Phase 2: durably mark the call in flight, conditional on nobody else
	// having started one since we read the attempt.
	callNo := a.CallCount + 1
	started := s.clock.Now()
	marked, err := s.starter.Do(ctx, startReq{id: a.ID, callNo: callNo, started: started})
	if err != nil {
		return res, err
	}
	if !marked {
		// Someone else moved the attempt; re-read and let the caller decide.
		a, err = s.Get(ctx, s.pool, id)
		return ExecuteResult{Attempt: a}, err
	}
	a.CallCount, a.CallStartedAt = callNo, &started
	return s.call(ctx, prov, a, callNo)
}

// call makes call callNo of a (marked in flight) and records its result.
func (s *Service) call(ctx context.Context, prov providers.Provider, a Attempt, callNo int) (ExecuteResult, error) {
	res := ExecuteResult{Attempt: a}
	// The call: no transaction open, exactly one exchange.
	sr := prov.Submit(ctx, providers.SubmitRequest{Operation: providers.Operation(a.Operation),
		IdempotencyKey: a.IdempotencyKey, Reference: a.Reference, Payload: a.Payload})
	outcome := Classify(sr)
	s.breakers.record(a.Provider, a.Operation, outcome)
	if outcome == OutcomeSucceeded && providers.Operation(a.Operation) == providers.OpPixCharge {
		// For a Pix cob, Submit "succeeded" means the cob was created, not
		// paid (providers contract): the attempt stays open until a lookup
		// or webhook says paid (succeeded) or expired (failed). Marking it
		// succeeded here would credit a merchant for money never received.
		outcome = OutcomeProcessing
	}
	res.Sent, res.Outcome = true, outcome
	if s.hookAfterCall != nil {
		if err := s.hookAfterCall(a); err != nil {
			return res, err
		}
	}

	// Phase 3: record. context.WithoutCancel: the answer is worth keeping
	// even when the job's context was cancelled during the call.
	rctx := context.WithoutCancel(ctx)
	na, retryIn, err := s.recordCall(rctx, a, callNo, sr, outcome)
	if err != nil {
		return res, err
	}
	res.Attempt, res.RetryIn = na, retryIn
	return res, nil
}

func (s *Service) executeToUnknown(ctx context.Context, a Attempt, reason string) (ExecuteResult, error) {
	var out transitioned
	err := s.inTx(ctx, func(tx pgx.Tx, after *afterCommit) error {
		la, err := lockAttempt(ctx, tx, a.ID)
		if err != nil {
			return err
		}
		out, err = s.transition(ctx, tx, after, la, change{To: StatusUnknown, Actor: ActorWorker, Reason: reason})
		return err
	})
	return ExecuteResult{Attempt: out.Attempt}, err
}

// lookupBeforeResend is R20 for providers without idempotency keys: before a
// re-send, wait until the consistency window since the last call has passed,
// then look the reference up; re-send only when nothing is found. done means
// Execute must not send now (r says what happened instead).
func (s *Service) lookupBeforeResend(ctx context.Context, prov providers.Provider, caps providers.Capabilities, a Attempt) (bool, ExecuteResult, error) {
	res := ExecuteResult{Attempt: a}
	if !caps.LookupByReference {
		r, err := s.executeToUnknown(ctx, a, "provider has no idempotency keys and no lookup: a re-send could pay twice (R20, R25)")
		return true, r, err
	}
	now := s.clock.Now()
	if since := lastCallAt(a); since != nil {
		if ready := since.Add(caps.ConsistencyWindow); now.Before(ready) {
			res.RetryIn = ready.Sub(now)
			return true, res, nil
		}
	}
	lr, lerr := lookup(ctx, prov, a)
	if lerr != nil {
		r, err := s.executeToUnknown(ctx, a, "lookup before re-send failed: "+lerr.Error())
		return true, r, err
	}
	class := classifyLookup(lr)
	var out Attempt
	err := s.inTx(ctx, func(tx pgx.Tx, after *afterCommit) error {
		la, err := lockAttempt(ctx, tx, a.ID)
		if err != nil {
			return err
		}
		if err := insertLookupEvent(ctx, tx, la, lr, class, ActorWorker, s.clock.Now()); err != nil {
			return err
		}
		out = la
		if class == lookupFound {
			out, err = s.applyProviderState(ctx, tx, after, la, ActorWorker, lookupState(lr), "lookup before re-send")
			return err
		}
		return nil
	})
	if err != nil {
		return true, res, err
	}
	res.Attempt = out
	switch class {
	case lookupFound:
		return true, res, nil
	case lookupNotFound:
		if out.Status == StatusPending && out.Acknowledged() {
			// The provider acknowledged an earlier call: "not found" is its
			// search lagging, not absence (R16). Never re-send on it.
			r, err := s.executeToUnknown(ctx, out, "lookup before re-send found nothing, but the provider acknowledged an earlier call ("+
				out.Acknowledgement+"): resolve by lookup, never re-send (R16, R20)")
			return true, r, err
		}
		if out.Status == StatusPending && out.CallCount == a.CallCount && !out.CallInFlight() {
			return false, res, nil // proven absent after the window: safe to send
		}
		return true, res, nil
	}
	res.RetryIn = backoff(s.cfg.SendBackoffBase, s.cfg.SendBackoffMax, a.CallCount)
	return true, res, nil
}

func lastCallAt(a Attempt) *time.Time {
	if a.CallEndedAt != nil && (a.CallStartedAt == nil || a.CallEndedAt.After(*a.CallStartedAt)) {
		return a.CallEndedAt
	}
	return a.CallStartedAt
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// recordReq is one call's result to record (phase 3).
type recordReq struct {
	a       Attempt
	callNo  int
	sr      providers.SubmitResult
	outcome Outcome
}

// recorded is what recording did: the attempt as it now stands, and when
// to send again (not sent, rate limited).
type recorded struct {
	a       Attempt
	retryIn time.Duration
}

// errText is what the attempt keeps as its last error.
func (r recordReq) errText() string {
	ex := r.sr.Exchange
	if ex.Err != nil {
		return ex.Err.Error()
	}
	if r.outcome != OutcomeSucceeded && r.outcome != OutcomeProcessing {
		return fmt.Sprintf("HTTP %d %s %s", ex.StatusCode, r.sr.FailureCode, r.sr.FailureReason)
	}
	return ""
}

// unknownReason is the reason of the transition to unknown the call's
// answer makes.
func (r recordReq) unknownReason() string {
	return fmt.Sprintf("call %d: %s (HTTP %d) %s", r.callNo, r.outcome, r.sr.Exchange.StatusCode, truncate(r.errText(), 300))
}

// callEvent is the event that records the call.
func (r recordReq) callEvent(now time.Time) Event {
	ex := r.sr.Exchange
	return Event{AttemptID: r.a.ID, At: now, Type: EventCall, Actor: ActorWorker,
		CallNumber: r.callNo, StartedAt: timePtr(ex.Started), EndedAt: timePtr(ex.Ended), Outcome: string(r.outcome),
		StatusCode: ex.StatusCode, ProviderRequestID: ex.ProviderRequestID, WireCalls: ex.WireCalls,
		Error: r.errText()}
}

// recordCall is phase 3, group-committed with the other calls being
// recorded (recordMany); the answer is the one recordOne would give.
func (s *Service) recordCall(ctx context.Context, a Attempt, callNo int, sr providers.SubmitResult, outcome Outcome) (Attempt, time.Duration, error) {
	r, err := s.results.Do(ctx, resultReq{rec: &recordReq{a: a, callNo: callNo, sr: sr, outcome: outcome}})
	return r.rec.a, r.rec.retryIn, err
}

// recordOne records one call in its own transaction.
func (s *Service) recordOne(ctx context.Context, r recordReq) (recorded, error) {
	var out recorded
	errText := r.errText()
	err := s.inTx(ctx, func(tx pgx.Tx, after *afterCommit) error {
		now := s.clock.Now()
		// The UPDATE locks the attempt row for the rest of the transaction
		// (and waits for a concurrent transition to commit first), so no
		// separate SELECT ... FOR UPDATE is needed.
		la, err := scanAttempt(tx.QueryRow(ctx, `UPDATE attempts SET calls_recorded = GREATEST(calls_recorded, $2),
			call_ended_at = $3, last_error = $4, updated_at = $3 WHERE id = $1 RETURNING `+attemptColumns,
			r.a.ID, r.callNo, now, sqlcols.Nullable(truncate(errText, maxErrorText))))
		if err != nil {
			return err
		}
		if err := insertEvent(ctx, tx, r.callEvent(now)); err != nil {
			return err
		}
		s.afterCall(ctx, after, r)
		out, err = s.applyOutcome(ctx, tx, after, la, r)
		return err
	})
	return out, err
}

// afterCall logs the call and counts it, once its record commits.
func (s *Service) afterCall(ctx context.Context, after *afterCommit, r recordReq) {
	a, ex := r.a, r.sr.Exchange
	after.add(func() {
		s.metrics.call(a, r.outcome)
		if r.outcome == OutcomeAuthRefused {
			// The alert: every call of this provider (and operation) will be
			// refused until an operator fixes its credentials. The adapter
			// redacts its key from what it reports (errText).
			s.metrics.authRefused(a)
			s.log.ErrorContext(ctx, "provider refused saldo's credentials: nothing was processed; the attempt waits "+
				"until an operator fixes the provider's API key or its permissions", "attempt_id", a.ID, "kind", a.Kind,
				"provider", a.Provider, "operation", a.Operation, "reference", a.Reference, "call", r.callNo,
				"status_code", ex.StatusCode, "provider_request_id", ex.ProviderRequestID, "error", truncate(r.errText(), 300))
		}
		s.log.InfoContext(ctx, "attempt call", "attempt_id", a.ID, "kind", a.Kind, "provider", a.Provider,
			"reference", a.Reference, "call", r.callNo, "outcome", r.outcome, "status_code", ex.StatusCode,
			"wire_calls", ex.WireCalls, "duration", ex.Ended.Sub(ex.Started), "error", truncate(r.errText(), 300))
	})
}

// applyOutcome moves the attempt la (locked in tx, its call recorded) as
// the call's outcome says.
func (s *Service) applyOutcome(ctx context.Context, tx pgx.Tx, after *afterCommit, la Attempt, r recordReq) (recorded, error) {
	callNo, sr, outcome, ex := r.callNo, r.sr, r.outcome, r.sr.Exchange
	out := recorded{a: la}
	var err error
	if outcome != OutcomeSucceeded && outcome != OutcomeFailed {
		// Whatever the answer leads to, keep what it acknowledged (the
		// provider id, a 2xx, a 409 "key in use"): after it a lookup's
		// "not found" proves nothing (R16; issue 13 finding 2).
		if ack := acknowledgement(sr); ack != "" {
			la, err = s.acknowledge(ctx, tx, after, la, ActorWorker, sr.ProviderID, fmt.Sprintf("call %d: %s", callNo, ack))
			if err != nil {
				return out, err
			}
			out.a = la
		}
	}
	switch outcome {
	case OutcomeSucceeded, OutcomeFailed:
		if la.Status.Final() && la.Status != outcome.Status() {
			return out, s.lateConflict(ctx, tx, after, la, ActorWorker, string(outcome))
		}
		tr, err := s.transition(ctx, tx, after, la, change{To: outcome.Status(), Actor: ActorWorker,
			Reason: callReason(callNo, ex.StatusCode, outcome), ProviderID: sr.ProviderID,
			FailureCode: sr.FailureCode, FailureReason: sr.FailureReason, Data: sr.Data})
		out.a = tr.Attempt
		return out, err
	case OutcomeProcessing:
		out.a, err = s.markProcessing(ctx, tx, la, ActorWorker, sr.ProviderID, sr.Data)
		if errors.Is(err, ErrProviderIDMismatch) {
			out.a, err = s.flagReview(ctx, tx, after, la, ActorWorker, fmt.Sprintf(
				"call %d reported provider id %q, recorded %q", callNo, sr.ProviderID, la.ProviderID))
		}
		return out, err
	case OutcomeUnknown, OutcomeInFlight, OutcomeKeyMisuse:
		tr, err := s.transition(ctx, tx, after, la, change{To: StatusUnknown, Actor: ActorWorker,
			Reason: r.unknownReason()})
		if err != nil {
			return out, err
		}
		out.a = tr.Attempt
		if outcome == OutcomeKeyMisuse {
			out.a, err = s.flagReview(ctx, tx, after, out.a, ActorWorker,
				"provider reports the idempotency key reused with a different payload: a bug on our side")
		}
		return out, err
	default: // not sent, rate limited: same key and bytes, later
		if la.Status != StatusPending || la.CallCount != callNo {
			return out, nil
		}
		if outcome != OutcomeAuthRefused && la.CallCount >= s.cfg.MaxSends {
			maxed, err := s.maxedSends(ctx, tx, la)
			if err != nil {
				return out, err
			}
			if maxed {
				tr, err := s.transition(ctx, tx, after, la, change{To: StatusUnknown, Actor: ActorWorker,
					Reason: fmt.Sprintf("%d calls made without a definitive answer; resolve by lookup", la.CallCount)})
				out.a = tr.Attempt
				return out, err
			}
		}
		out.retryIn = s.resendDelay(r)
		now := s.clock.Now()
		out.a, err = scanAttempt(tx.QueryRow(ctx, `UPDATE attempts SET next_send_at = $2, updated_at = $3
			WHERE id = $1 RETURNING `+attemptColumns, la.ID, now.Add(out.retryIn), now))
		return out, err
	}
}

// resendDelay is how long the attempt of r, whose call may go out again
// (not sent, rate limited, credentials refused), waits before its next
// call: the backoff for its call number, a rate limit's Retry-After, or
// for refused credentials the long wait for an operator.
func (s *Service) resendDelay(r recordReq) time.Duration {
	switch {
	case r.outcome == OutcomeAuthRefused:
		// Nothing was processed, but nothing will be until an operator
		// fixes the credentials: wait long, whatever Retry-After says.
		return backoff(s.cfg.AuthRefusedWait, s.cfg.AuthRefusedWait, 1)
	case r.outcome == OutcomeRateLimited && r.sr.Exchange.RetryAfter > 0:
		// Capped like an unanswered lookup's wait (applyLookups): at the
		// resolver schedule's longest delay, so a provider's (or a
		// proxy's) huge Retry-After cannot park the attempt, and the
		// money it holds, for years. providers.parseRetryAfter caps it at
		// providers.MaxRetryAfter already.
		return min(r.sr.Exchange.RetryAfter, s.cfg.ResolveSchedule[len(s.cfg.ResolveSchedule)-1])
	}
	return backoff(s.cfg.SendBackoffBase, s.cfg.SendBackoffMax, r.callNo)
}

// maxedSends reports whether a (its calls all recorded) has made MaxSends
// calls that count: a call whose credentials the provider refused does
// not (nothing was processed, and the attempt waits for an operator).
func (s *Service) maxedSends(ctx context.Context, db DB, a Attempt) (bool, error) {
	if a.CallCount < s.cfg.MaxSends {
		return false, nil
	}
	var refused int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM attempt_events WHERE attempt_id = $1 AND type = 'call'
		AND outcome = $2`, a.ID, string(OutcomeAuthRefused)).Scan(&refused); err != nil {
		return false, fmt.Errorf("attempts: count refused calls of %s: %w", a.ID, err)
	}
	return a.CallCount-refused >= s.cfg.MaxSends, nil
}

// callReason is the reason of the transition a definitive call answer makes.
func callReason(callNo, statusCode int, outcome Outcome) string {
	return fmt.Sprintf("call %d: HTTP %d %s", callNo, statusCode, outcome)
}

// lateConflict handles a provider answer that contradicts a final status (a
// success reported after we resolved failed, or the reverse). Finals never
// change (R9); the conflict is kept as a note and logged as an error so
// reconciliation (R19) and a human look at it.
//
// A success after failed is a divergence (issue 13 finding 5): the reserve
// went back while the money left. Besides the note, the attempt is flagged
// for review (the review queue lists it), diverged_at and divergence keep
// what was said (audit verify reports it), saldo_attempts_divergences_total
// counts it and an error is logged. Duplicates of the report add a note only.
func (s *Service) lateConflict(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt, actor Actor, said string) error {
	reason := fmt.Sprintf("%s reported %s for an attempt already %s: final status kept, reconcile", actor, said, a.Status)
	now := s.clock.Now()
	if err := insertEvent(ctx, tx, Event{AttemptID: a.ID, At: now, Type: EventNote, Actor: actor, Reason: reason}); err != nil {
		return err
	}
	if a.Status == StatusFailed && said == string(StatusSucceeded) {
		why := fmt.Sprintf("divergence: %s reported succeeded after the attempt was resolved failed by %s "+
			"(the reserve was released): money may have left twice over; a human settles it (R19)", actor, a.ResolvedBy)
		na, err := scanAttempt(tx.QueryRow(ctx, `UPDATE attempts SET diverged_at = $2, divergence = $3,
			review = true, review_reason = $3, review_at = $2, updated_at = $2
			WHERE id = $1 AND status = 'failed' AND diverged_at IS NULL RETURNING `+attemptColumns, a.ID, now, why))
		switch {
		case errors.Is(err, ErrNotFound):
			// Already diverged: the note is enough.
		case err != nil:
			return fmt.Errorf("attempts: record divergence of %s: %w", a.ID, err)
		default:
			if err := insertEvent(ctx, tx, Event{AttemptID: a.ID, At: now, Type: EventReview, Actor: actor, Reason: why}); err != nil {
				return err
			}
			after.add(func() {
				s.log.ErrorContext(ctx, "provider reports success for a failed attempt: divergence, review", "attempt_id", na.ID,
					"kind", na.Kind, "provider", na.Provider, "reference", na.Reference, "resolved_by", na.ResolvedBy,
					"reported_by", actor)
				s.metrics.divergence(na)
				s.metrics.reviewFlagged(na)
				if s.cfg.OnReview != nil {
					s.cfg.OnReview(na, why)
				}
			})
		}
	}
	after.add(func() {
		s.log.ErrorContext(ctx, "provider contradicts a final attempt", "attempt_id", a.ID, "kind", a.Kind,
			"provider", a.Provider, "reference", a.Reference, "status", a.Status, "reported", said)
		s.metrics.conflict(a)
	})
	return nil
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
