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

	"github.com/saldo/saldo/internal/pgtext"
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
//   - in review: a human decides; nothing is sent meanwhile (R18);
//   - the re-send backoff has not elapsed: RetryIn;
//   - MaxSends reached (calls whose credentials were refused not
//     counted), or the provider's key has expired since the attempt
//     opened (R14): unknown, resolved by lookup;
//   - another attempt of the same subject has an unsettled divergence (the
//     provider reported it succeeded after it was resolved failed): this
//     attempt exists only because that one was thought failed (R6), so it
//     is held in review, open with its reserve, never sent (R9, R19;
//     the call-start mark refuses, then holdIfSiblingDiverged);
//   - the provider's circuit is open: wait (before any lookup too);
//   - a provider without idempotency keys (R20): before any re-send, a
//     lookup by reference once the consistency window since the last call
//     has passed; re-send only if nothing is found. Lookups the provider
//     does not answer back off by their number and go to review after
//     UnansweredReviewAfter, as the resolver's do (R15, R18).
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
	case a.Review:
		// In front of a human (ResolveManually decides): never sent by
		// the worker meanwhile. The job ends; the attempt stays open with
		// its reserve (R18, R22).
		return res, nil
	case a.NextSendAt != nil && now.Before(*a.NextSendAt):
		res.RetryIn = a.NextSendAt.Sub(now)
		return res, nil
	case maxed:
		return s.executeToUnknown(ctx, a, fmt.Sprintf("%d calls made without a definitive answer; resolve by lookup", a.CallCount))
	case a.CallCount > 0 && a.KeyExpiresAt != nil && !now.Before(*a.KeyExpiresAt):
		return s.executeToUnknown(ctx, a, fmt.Sprintf("provider key expired at %s: a re-send could create a second operation (R14)",
			fmtTime(a.KeyExpiresAt)))
	}

	// An unsettled divergence of another attempt of the subject is not
	// asked here (a statement per execution): the call-start mark below
	// refuses then (sendableSQL), and the attempt is held in review on
	// that path.
	if sum := sha256.Sum256(a.Payload); !bytes.Equal(sum[:], a.PayloadSHA256) {
		return res, fmt.Errorf("%w: attempt %s", ErrPayloadTampered, a.ID)
	}
	// The provider's circuit is open: wait (snooze), never fail. Checked
	// before the lookup a provider without keys makes before a re-send:
	// while the provider is down, neither the call nor the lookup goes.
	// (A half-open circuit's probe is then the lookup and the re-send it
	// allows; an inconclusive lookup keeps the probe out until OpenFor
	// passes, as a failed probe would keep the circuit open.)
	if ok, wait := s.breakers.allow(a.Provider, a.Operation); !ok {
		res.RetryIn = wait
		return res, nil
	}

	if !caps.IdempotencyKeys && a.CallCount > 0 {
		done, r, err := s.lookupBeforeResend(ctx, prov, caps, a)
		if done || err != nil {
			return r, err
		}
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
		// Someone else moved the attempt, or a divergence of another
		// attempt of its subject was recorded since it was read (startSQL
		// refuses then); re-read, hold it in review in that case (the
		// divergence's transaction normally has), and let the caller decide.
		a, err = s.Get(ctx, s.pool, id)
		if err != nil {
			return ExecuteResult{Attempt: a}, err
		}
		if a.Status == StatusPending && !a.Review && !a.CallInFlight() {
			if held, r, err := s.holdIfSiblingDiverged(ctx, a); held || err != nil {
				return r, err
			}
		}
		return ExecuteResult{Attempt: a}, nil
	}
	deadline := started.Add(s.cfg.StaleCallAfter)
	a.CallCount, a.CallStartedAt, a.CallDeadlineAt = callNo, &started, &deadline
	return s.call(ctx, prov, a, callNo)
}

// callDeadlineMargin is how long before its stamp's StaleCallAfter a call
// must be over (callContext).
const callDeadlineMargin = time.Second

// callContext is ctx for the call of a, whose mark stamped it started at
// a.CallStartedAt: it ends callDeadlineMargin before CallStartedAt +
// StaleCallAfter. The sweeper counts the call as over at that instant and
// R16's window for a lookup's "not found" counts from it; but the stamp
// is taken before the mark waits for its batch, a pool connection and row
// locks, so without this bound a call could leave (and reach the
// provider) later than the stamp says, and be failed on a "not found" it
// can still contradict. A call whose time is already up does not leave:
// the request is never written (not sent: the attempt stays pending, and
// goes out again with the same key).
func (s *Service) callContext(ctx context.Context, a Attempt) (context.Context, context.CancelFunc) {
	if a.CallStartedAt == nil {
		return context.WithCancel(ctx)
	}
	left := a.CallStartedAt.Add(s.cfg.StaleCallAfter - callDeadlineMargin).Sub(s.clock.Now())
	return context.WithTimeout(ctx, left)
}

// call makes call callNo of a (marked in flight) and records its result.
func (s *Service) call(ctx context.Context, prov providers.Provider, a Attempt, callNo int) (ExecuteResult, error) {
	res := ExecuteResult{Attempt: a}
	// The call: no transaction open, exactly one exchange, over before its
	// stamp's StaleCallAfter (callContext).
	cctx, cancel := s.callContext(ctx, a)
	sr := prov.Submit(cctx, providers.SubmitRequest{Operation: providers.Operation(a.Operation),
		IdempotencyKey: a.IdempotencyKey, Reference: a.Reference, Payload: a.Payload})
	cancel()
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
		if la.Status != StatusPending || la.CallCount != a.CallCount || la.CallInFlight() != a.CallInFlight() {
			// Moved since a was read: another executor recorded its call
			// (a 429 or a not-sent answer keeps it pending, to be sent
			// again with the same key, R2) or made another. The reason
			// read from a no longer holds; the row as it stands decides
			// at the next run.
			out.Attempt = la
			return nil
		}
		out, err = s.transition(ctx, tx, after, la, change{To: StatusUnknown, Actor: ActorWorker, Reason: reason})
		return err
	})
	return ExecuteResult{Attempt: out.Attempt}, err
}

// siblingDivergedSQL names a divergence, settled or not (R9, R19), of
// another attempt of $1's subject (same direction and subject id), if any:
// sendableSQL's condition, read on its own.
const siblingDivergedSQL = `SELECT d.id FROM attempts a JOIN attempts d ON d.direction = a.direction
		AND d.subject_id = a.subject_id AND d.id <> a.id
	WHERE a.id = $1 AND d.diverged_at IS NOT NULL
	ORDER BY d.diverged_at, d.id LIMIT 1`

// holdIfSiblingDiverged holds the pending attempt a in review instead of
// sending it when another attempt of its subject has diverged (settled or
// not): the provider reported that attempt succeeded after it was
// resolved failed, and a exists only because it was thought failed (R6):
// sending a would pay twice. a stays open with its reserve (R22); an
// operator decides (ResolveManually: failing an attempt never sent is
// allowed) once the divergence is booked (SettleDivergence). held means
// Execute must not send; r is the attempt as it then stands.
func (s *Service) holdIfSiblingDiverged(ctx context.Context, a Attempt) (bool, ExecuteResult, error) {
	res := ExecuteResult{Attempt: a}
	var diverged uuid.UUID
	switch err := s.pool.QueryRow(ctx, siblingDivergedSQL, a.ID).Scan(&diverged); {
	case errors.Is(err, pgx.ErrNoRows):
		return false, res, nil
	case err != nil:
		return true, res, fmt.Errorf("attempts: divergences of the subject of %s: %w", a.ID, err)
	}
	err := s.inTx(ctx, func(tx pgx.Tx, after *afterCommit) error {
		la, err := lockAttempt(ctx, tx, a.ID)
		if err != nil {
			return err
		}
		res.Attempt = la
		if la.Status != StatusPending || la.CallInFlight() {
			return nil // moved or sent meanwhile: not sent from here anyway
		}
		res.Attempt, err = s.flagReview(ctx, tx, after, la, ActorWorker, heldReason(diverged))
		return err
	})
	return true, res, err
}

// heldReason is the review reason of an attempt held, unsent, because
// attempt diverged of its subject has an unsettled divergence.
func heldReason(diverged uuid.UUID) string {
	return fmt.Sprintf("held, not sent: attempt %s of the same subject was reported succeeded after it was resolved failed "+
		"(divergence); sending this one could pay twice: settle the divergence and decide (R6, R9, R19)", diverged)
}

// unansweredTooLong reports whether a's lookups have gone unanswered for
// UnansweredReviewAfter (the run that began at UnansweredSince), and the
// review reason: the resolver's own test and words (Resolve, R18), applied
// by Execute to a pending attempt of a provider without keys whose lookups
// before a re-send go unanswered (R20).
func (s *Service) unansweredTooLong(a Attempt, now time.Time) (string, bool) {
	if a.UnansweredSince == nil || now.Sub(*a.UnansweredSince) < s.cfg.UnansweredReviewAfter {
		return "", false
	}
	return fmt.Sprintf("the provider has answered none of the %d lookups since %s (R18)",
		a.LookupsUnanswered, fmtTime(a.UnansweredSince)), true
}

// countResendLookupSQL counts a lookup before a re-send ($3: whether the
// provider answered it) as countLookupsSQL counts the resolver's: in
// lookup_count and last_lookup_at, and an unanswered one in
// lookups_unanswered and the run of them that began at unanswered_since
// (NULL again after an answered one), and one that found the operation
// processing ($4) in lookups_processing. It also returns how many lookups of
// the attempt the current run holds: the number the next wait backs off by.
const countResendLookupSQL = `UPDATE attempts SET lookup_count = lookup_count + 1, last_lookup_at = $2, updated_at = $2,
		lookups_unanswered = lookups_unanswered + CASE WHEN $3 THEN 0 ELSE 1 END,
		lookups_processing = lookups_processing + CASE WHEN $4 THEN 1 ELSE 0 END,
		unanswered_since = CASE WHEN $3 THEN NULL ELSE coalesce(unanswered_since, $2) END
	WHERE id = $1
	RETURNING (SELECT count(*) FROM attempt_events e WHERE e.attempt_id = attempts.id AND e.type = 'lookup'
			AND e.at >= coalesce(attempts.unanswered_since, 'infinity'::timestamptz)), ` + attemptColumns

// lookupBeforeResend is R20 for providers without idempotency keys: before a
// re-send, wait until the consistency window since the last call has passed,
// then look the reference up; re-send only when nothing is found. done means
// Execute must not send now (r says what happened instead).
//
// Each lookup is counted on the attempt as the resolver counts its own
// (lookup_count, lookups_unanswered, unanswered_since; R15). One the
// provider does not answer (an outage: transport error, 5xx, 429) proves
// nothing and makes no call, so the next comes after a backoff by the
// number of unanswered lookups in a row (or the provider's Retry-After,
// capped like the resolver's), never the call's backoff again: no lookup
// every second for the length of an outage. Once they have gone unanswered
// for UnansweredReviewAfter, the attempt goes to review, as an unknown one
// does (R18): its reserve is held and an operator is told.
func (s *Service) lookupBeforeResend(ctx context.Context, prov providers.Provider, caps providers.Capabilities, a Attempt) (bool, ExecuteResult, error) {
	res := ExecuteResult{Attempt: a}
	if !caps.LookupByReference {
		r, err := s.executeToUnknown(ctx, a, "provider has no idempotency keys and no lookup: a re-send could pay twice (R20, R25)")
		return true, r, err
	}
	now := s.clock.Now()
	if reason, ok := s.unansweredTooLong(a, now); ok {
		r, err := s.executeToReview(ctx, a, reason)
		return true, r, err
	}
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
	var inRun int
	err := s.inTx(ctx, func(tx pgx.Tx, after *afterCommit) error {
		la, err := lockAttempt(ctx, tx, a.ID)
		if err != nil {
			return err
		}
		lnow := s.clock.Now()
		if err := insertLookupEvent(ctx, tx, la, lr, class, ActorWorker, lnow); err != nil {
			return err
		}
		la, err = scanAttemptAfter(tx.QueryRow(ctx, countResendLookupSQL, la.ID, lnow, class.answered(),
			foundProcessing(lr, class)), &inRun)
		if err != nil {
			return fmt.Errorf("attempts: count lookup of %s: %w", a.ID, err)
		}
		after.add(func() { s.metrics.lookup(la, class) })
		out = la
		switch {
		case class == lookupFound:
			out, err = s.applyProviderState(ctx, tx, after, la, ActorWorker, lookupState(lr), "lookup before re-send")
		case !class.answered() && la.Status == StatusPending:
			if reason, ok := s.unansweredTooLong(la, lnow); ok {
				out, err = s.flagReview(ctx, tx, after, la, ActorWorker, reason)
			}
		}
		return err
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
	if out.Review || out.Status != StatusPending {
		return true, res, nil // in review (unanswered too long), or moved meanwhile
	}
	// Unanswered: back off by the lookups of this run (no call was made,
	// so the call count says nothing), at least the provider's
	// Retry-After, capped as the resolver caps it (applyLookups).
	res.RetryIn = max(backoff(s.cfg.SendBackoffBase, s.cfg.SendBackoffMax, max(inRun, 1)),
		min(lr.Exchange.RetryAfter, s.cfg.ResolveSchedule[len(s.cfg.ResolveSchedule)-1]))
	return true, res, nil
}

// executeToReview flags a for review (Execute's worker), in its own
// transaction.
func (s *Service) executeToReview(ctx context.Context, a Attempt, reason string) (ExecuteResult, error) {
	var out Attempt
	err := s.inTx(ctx, func(tx pgx.Tx, after *afterCommit) error {
		la, err := lockAttempt(ctx, tx, a.ID)
		if err != nil {
			return err
		}
		out, err = s.flagReview(ctx, tx, after, la, ActorWorker, reason)
		return err
	})
	return ExecuteResult{Attempt: out}, err
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
	return fmt.Sprintf("call %d: %s (HTTP %d) %s", r.callNo, r.outcome, r.sr.Exchange.StatusCode, pgtext.Truncate(r.errText(), 300))
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
		// separate SELECT ... FOR UPDATE is needed. It matches only while
		// the call is unrecorded: a record batch whose COMMIT was still
		// running when recordedAfterAll read the attempt (its answer lost)
		// has recorded it meanwhile, and recording it again would add its
		// call event, metrics and owner work twice.
		la, err := scanAttempt(tx.QueryRow(ctx, `UPDATE attempts SET calls_recorded = $2,
			call_ended_at = $3, last_error = $4, updated_at = $3 WHERE id = $1 AND calls_recorded < $2 RETURNING `+attemptColumns,
			r.a.ID, r.callNo, now, sqlcols.Nullable(pgtext.Truncate(errText, maxErrorText))))
		if errors.Is(err, ErrNotFound) { // no row matched: recorded meanwhile (or no such attempt: Get says so)
			if out.a, err = s.Get(ctx, tx, r.a.ID); err != nil {
				return err
			}
			if out.a.Status == StatusPending && out.a.NextSendAt != nil && out.a.NextSendAt.After(now) {
				out.retryIn = out.a.NextSendAt.Sub(now)
			}
			s.log.WarnContext(ctx, "attempts: a call was recorded meanwhile (a record batch's COMMIT that answered an error); not recorded again",
				"attempt_id", r.a.ID, "reference", r.a.Reference, "call", r.callNo, "status", out.a.Status)
			return nil
		}
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
				"status_code", ex.StatusCode, "provider_request_id", ex.ProviderRequestID, "error", pgtext.Truncate(r.errText(), 300))
		}
		s.log.InfoContext(ctx, "attempt call", "attempt_id", a.ID, "kind", a.Kind, "provider", a.Provider,
			"reference", a.Reference, "call", r.callNo, "outcome", r.outcome, "status_code", ex.StatusCode,
			"wire_calls", ex.WireCalls, "duration", ex.Ended.Sub(ex.Started), "error", pgtext.Truncate(r.errText(), 300))
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
			out.a, err = s.lateConflict(ctx, tx, after, la, ActorWorker, string(outcome))
			return out, err
		}
		tr, err := s.transition(ctx, tx, after, la, change{To: outcome.Status(), Actor: ActorWorker,
			Reason: callReason(callNo, ex.StatusCode, outcome), ProviderID: sr.ProviderID,
			FailureCode: sr.FailureCode, FailureReason: sr.FailureReason, Data: sr.Data})
		out.a = tr.Attempt
		return out, err
	case OutcomeProcessing:
		out.a, err = s.markProcessing(ctx, tx, la, ActorWorker, sr.ProviderID, sr.Data, sr.ExpectedBy)
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
// Either way it is a divergence: the ledger and the provider disagree about
// money. A success after failed (issue 13 finding 5): the reserve went back
// (or the charge was never credited) while the money moved. A failure after
// succeeded (a reversal: a payout the bank returned, a transfer reversed in
// full, a refund that failed late, a charge that did not settle): the ledger
// shows money moved that came back or never arrived. Besides the note, the
// attempt is flagged for review (the review queue lists it), diverged_at and
// divergence keep what was said (audit verify reports it until an operator
// settles it), saldo_attempts_divergences_total counts it and an error is
// logged. Duplicates of the report add a note only. It returns the attempt
// as it now stands.
func (s *Service) lateConflict(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt, actor Actor, said string) (Attempt, error) {
	reason := fmt.Sprintf("%s reported %s for an attempt already %s: final status kept, reconcile", actor, said, a.Status)
	now := s.clock.Now()
	if err := insertEvent(ctx, tx, Event{AttemptID: a.ID, At: now, Type: EventNote, Actor: actor, Reason: reason}); err != nil {
		return a, err
	}
	var why string
	switch {
	case a.Status == StatusFailed && said == string(StatusSucceeded):
		why = fmt.Sprintf("divergence: %s reported succeeded after the attempt was resolved failed by %s "+
			"(the reserve was released): money may have left twice over; a human settles it (R19)", actor, a.ResolvedBy)
		if a.Kind.direction() == "in" {
			why = fmt.Sprintf("divergence: %s reported succeeded after the attempt was resolved failed by %s "+
				"(nothing was credited): money arrived that the ledger does not show; a human settles it (R19)", actor, a.ResolvedBy)
		}
	case a.Status == StatusSucceeded && said == string(StatusFailed):
		why = fmt.Sprintf("divergence (reversal): %s reported failed after the attempt succeeded (resolved by %s): "+
			"the ledger shows money moved that came back or never left; a human books it and settles it (R19)", actor, a.ResolvedBy)
		if a.Kind.direction() == "in" {
			why = fmt.Sprintf("divergence (reversal): %s reported failed after the attempt succeeded (resolved by %s): "+
				"the merchant was credited with money that did not arrive; a human books it and settles it (R19)", actor, a.ResolvedBy)
		}
	}
	if why != "" {
		kind := DivergencePaidAfterFailure
		if a.Status == StatusSucceeded {
			kind = DivergenceReversal
		}
		var err error
		if a, _, err = s.recordDivergence(ctx, tx, after, a, actor, kind, why, said); err != nil {
			return a, err
		}
	}
	after.add(func() {
		s.log.ErrorContext(ctx, "provider contradicts a final attempt", "attempt_id", a.ID, "kind", a.Kind,
			"provider", a.Provider, "reference", a.Reference, "status", a.Status, "reported", said)
		s.metrics.conflict(a)
	})
	return a, nil
}

// unsentSiblingsSQL locks the open attempts of $1's subject (same
// direction and subject id) that may still be sent: pending, nothing in
// flight, not reported processing, not in review. R8 leaves at most one.
const unsentSiblingsSQL = `SELECT ` + attemptColumns + ` FROM attempts
	WHERE subject_id = $2 AND direction = (SELECT direction FROM attempts WHERE id = $1) AND id <> $1
		AND status = 'pending' AND NOT review AND call_count = calls_recorded
		AND provider_state IS DISTINCT FROM 'processing'
	ORDER BY id FOR UPDATE`

// holdSiblings flags for review, in the transaction that records the
// divergence of diverged, every attempt of its subject that may still be
// sent: the next attempt the payout retry policy opened when diverged was
// resolved failed (R6), waiting for its first call, or one waiting to be
// sent again. Sending it would pay twice now that the provider says
// diverged paid (R9, R19); it stays open with its reserve (R22) for an
// operator to decide, and Execute sends nothing in review. An attempt
// whose call is in flight or whose operation the provider holds
// (unknown, processing) is left to the resolver: it has been sent, and
// review would stop its lookups.
func (s *Service) holdSiblings(ctx context.Context, tx pgx.Tx, after *afterCommit, diverged Attempt, actor Actor) error {
	sibs, err := queryAttempts(ctx, tx, unsentSiblingsSQL, diverged.ID, diverged.SubjectID)
	if err != nil {
		return fmt.Errorf("attempts: attempts of the subject of diverged %s: %w", diverged.ID, err)
	}
	for _, sib := range sibs {
		if _, err := s.flagReview(ctx, tx, after, sib, actor, heldReason(diverged.ID)); err != nil {
			return err
		}
	}
	return nil
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
