package attempts

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/internal/pgtext"
	"github.com/saldo/saldo/internal/sqlcols"
	"github.com/saldo/saldo/providers"
)

// FailureNotFound is the failure code of an attempt the resolver failed
// because the provider had no operation with its reference past the
// consistency window (R16): proof that the provider did nothing.
const FailureNotFound = "not_found"

// report is a provider's statement about one operation, from a lookup, a
// webhook, a statement or an operator.
type report struct {
	// Provider, Operation, Amount, Currency: what the report says about the
	// operation, checked against the attempt ("" is not checked).
	Provider  string
	Operation providers.Operation
	// Direction: a report that cannot name its operation (a Pix send's
	// notice) still says which way it moves money ("" is not checked).
	Direction     providers.Direction
	Amount        string
	Currency      string
	State         providers.State
	ProviderID    string
	FailureCode   string
	FailureReason string
	Data          []byte
	Evidence      json.RawMessage
	ActorID       string
	// ExpectedBy: when the provider expects a processing operation to end
	// (zero: it did not say); markProcessing keeps it.
	ExpectedBy time.Time
}

type lookupClass string

const (
	lookupFound        lookupClass = "found"
	lookupNotFound     lookupClass = "not_found"
	lookupInconclusive lookupClass = "inconclusive"
)

// answered: the provider answered the lookup (found, or not found); an
// inconclusive one is unanswered and proves nothing (lookups_unanswered).
func (c lookupClass) answered() bool { return c != lookupInconclusive }

// foundProcessing: the lookup lr, of class c, found the operation and the
// provider says it is processing (lookups_processing): an answer, but not
// one MaxLookups bounds (Attempt.LookupsUndecided, R18).
func foundProcessing(lr providers.LookupResult, c lookupClass) bool {
	return c == lookupFound && lr.State == providers.StateProcessing
}

// classifyLookup: found needs a readable answer naming a state; not found
// needs a clean 404 or an empty 200 search result, with no error from the
// adapter. Anything else (transport error, 5xx, 429, auth errors, a 204 or
// another 2xx that names nothing) proves nothing. The adapters mark what
// they cannot read as proof of absence (Exchange.Err); this is the core's
// own guard against one that forgets (R16).
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
	if ex.StatusCode == 404 || ex.StatusCode == 200 {
		return lookupNotFound
	}
	return lookupInconclusive
}

func lookupState(lr providers.LookupResult) report {
	return report{State: lr.State, ProviderID: lr.ProviderID, FailureCode: lr.FailureCode,
		FailureReason: lr.FailureReason, Data: lr.Data, Amount: lr.Amount, Currency: lr.Currency, ExpectedBy: lr.ExpectedBy}
}

// checkReport compares what a provider's report says about the operation
// (provider, operation, amount, currency) with the attempt a, locked in tx
// (issue 13 finding 4). A difference is ErrReportMismatch: an open attempt
// is flagged for review, the mismatch is counted and logged as an error,
// and the caller moves nothing.
func (s *Service) checkReport(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt, actor Actor, r report) (Attempt, error) {
	field, said, want, err := reportMismatch(a, r, func() (decimal.Decimal, string, bool, error) {
		ao, ok := s.owner(a.Kind).(AmountOwner)
		if !ok {
			return decimal.Decimal{}, "", false, nil
		}
		amount, currency, err := ao.AttemptAmount(ctx, tx, a)
		return amount, currency, true, err
	})
	if err != nil {
		return a, err
	}
	if field == "" {
		return a, nil
	}
	mismatch := fmt.Errorf("%w: %s %q, expected %q", ErrReportMismatch, field, said, want)
	if a.Review {
		// Already in front of a human: a poll repeating the same report
		// must not raise the alert again every time.
		return a, mismatch
	}
	reason := fmt.Sprintf("%s reported %s for reference %s with %s %q, the attempt's is %q: moves nothing, a human checks it",
		actor, r.State, a.Reference, field, said, want)
	if err := insertEvent(ctx, tx, Event{AttemptID: a.ID, At: s.clock.Now(), Type: EventNote, Actor: actor,
		ActorID: r.ActorID, Reason: reason}); err != nil {
		return a, err
	}
	na, err := s.flagReview(ctx, tx, after, a, actor, reason)
	if err != nil {
		return a, err
	}
	after.add(func() {
		s.log.ErrorContext(ctx, "provider report contradicts the attempt", "attempt_id", a.ID, "kind", a.Kind,
			"provider", a.Provider, "reference", a.Reference, "field", field, "reported", said, "expected", want,
			"state", r.State, "actor", actor, "actor_id", r.ActorID)
		s.metrics.mismatch(a, field)
	})
	return na, mismatch
}

// reportMismatch is the field of the report r that contradicts the
// attempt a ("" when none does), with what r said and what a has:
// provider, operation, direction (a send's report never moves a charge,
// nor a received payment's a payout: R17), then, through amount (the
// attempt's amount and currency; false when its owner keeps none), amount
// and currency.
func reportMismatch(a Attempt, r report, amount func() (decimal.Decimal, string, bool, error)) (field, said, want string, err error) {
	switch {
	case r.Provider != "" && r.Provider != a.Provider:
		return "provider", r.Provider, a.Provider, nil
	case r.Operation != "" && string(r.Operation) != a.Operation:
		return "operation", string(r.Operation), a.Operation, nil
	case r.Direction != "" && string(r.Direction) != a.Kind.direction():
		return "direction", string(r.Direction), a.Kind.direction(), nil
	case r.Amount == "" && r.Currency == "":
		return "", "", "", nil
	}
	am, currency, ok, err := amount()
	if err != nil {
		return "", "", "", fmt.Errorf("attempts: amount of %s %s (attempt %s): %w", a.Kind, a.SubjectID, a.ID, err)
	}
	if !ok {
		return "", "", "", nil
	}
	if r.Amount != "" {
		if d, err := decimal.NewFromString(r.Amount); err != nil || !d.Equal(am) {
			return "amount", r.Amount, am.String(), nil
		}
	}
	if r.Currency != "" && !strings.EqualFold(r.Currency, currency) {
		return "currency", r.Currency, currency, nil
	}
	return "", "", "", nil
}

// insertLookupEvent records a lookup of a whose asking time is the
// exchange's own start (lookupEvent with no asked time).
func insertLookupEvent(ctx context.Context, tx pgx.Tx, a Attempt, lr providers.LookupResult, class lookupClass, actor Actor, now time.Time) error {
	return insertEvent(ctx, tx, lookupEvent(a, lr, class, actor, now, time.Time{}))
}

// lookupEvent is the event that records a lookup of a, recorded at now.
// Its started_at is when the provider was asked: asked (the service's
// clock just before the lookup was sent) when set, else the exchange's
// start. A "not found" proves absence only if the provider was asked
// after its consistency window (R16): ResolveManually reads it back from
// started_at (lastLookupSQL).
func lookupEvent(a Attempt, lr providers.LookupResult, class lookupClass, actor Actor, now, asked time.Time) Event {
	ex := lr.Exchange
	started := timePtr(ex.Started)
	if !asked.IsZero() {
		started = &asked
	}
	outcome := string(class)
	if class == lookupFound {
		outcome = "found_" + string(lr.State)
	}
	errText := ""
	if ex.Err != nil {
		errText = ex.Err.Error()
	}
	return Event{AttemptID: a.ID, At: now, Type: EventLookup, Actor: actor,
		StartedAt: started, EndedAt: timePtr(ex.Ended), Outcome: outcome, StatusCode: ex.StatusCode,
		ProviderRequestID: ex.ProviderRequestID, WireCalls: ex.WireCalls, Error: errText}
}

// applyProviderState applies what the provider says about the attempt's
// operation: succeeded or failed transition an open attempt (conditionally,
// R10); processing keeps it open; a final attempt never changes (a
// contradiction is noted and logged).
func (s *Service) applyProviderState(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt, actor Actor, r report, reason string) (Attempt, error) {
	a, _, err := s.applyReport(ctx, tx, after, a, actor, r, reason)
	if errors.Is(err, ErrProviderIDMismatch) || errors.Is(err, ErrReportMismatch) {
		return a, nil // flagged for review; not an error for jobs
	}
	return a, err
}

func (s *Service) applyReport(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt, actor Actor, r report, reason string) (Attempt, bool, error) {
	// The same second operation reported again (a redelivery, a lookup,
	// the statement, another event about it) is not news, whatever it says
	// besides (another amount): nothing is noted, logged or alerted again,
	// before or after its divergence was settled (R9, R19).
	if seen, err := secondOperationSeen(ctx, tx, a, r); err != nil || seen {
		return a, false, err
	}
	switch r.State {
	case providers.StateSucceeded, providers.StateFailed, providers.StateProcessing:
		// A report about another provider's, operation's or amount's
		// operation is not the provider's word about ours (finding 4).
		if na, err := s.checkReport(ctx, tx, after, a, actor, r); err != nil {
			if errors.Is(err, ErrReportMismatch) && a.Status == StatusFailed && r.State == providers.StateSucceeded &&
				(r.Provider == "" || r.Provider == a.Provider) {
				// But the provider we sent it to says money left under
				// our reference after the attempt was failed and its
				// reserve released: whatever amount or operation it
				// names, the divergence is recorded as well (review,
				// audit verify, no retry: R6, R19, R22); nothing moves.
				na, cerr := s.lateConflict(ctx, tx, after, na, actor, string(r.State))
				if cerr != nil {
					return na, false, cerr
				}
				return na, false, err
			}
			if errors.Is(err, ErrReportMismatch) && isSecondOperation(a, r) {
				// Another operation, of another amount or operation, under
				// the reference of an attempt that is final as its own:
				// succeeded, paid or charged twice all the same; failed, a
				// note. Either way noted by its provider id, so that its
				// repeats are found (secondOperationSeen) and not
				// reported again as news on every redelivery.
				na, serr := s.secondOperation(ctx, tx, after, na, actor, r)
				if serr != nil && !errors.Is(serr, ErrProviderIDMismatch) {
					return na, false, serr
				}
				return na, false, err
			}
			return na, false, err
		}
	}
	switch r.State {
	case providers.StateSucceeded, providers.StateFailed:
		to := StatusSucceeded
		if r.State == providers.StateFailed {
			to = StatusFailed
		}
		if a.Status.Final() {
			if a.Status != to {
				if a.Status == StatusSucceeded && a.ProviderID != "" && r.ProviderID != "" && r.ProviderID != a.ProviderID {
					// Another operation under our reference failed (a
					// second payment intent declined, a second transfer
					// refused): it moved nothing and says nothing about
					// the operation that succeeded. A note, never a
					// reversal (found by review).
					a, err := s.secondOperation(ctx, tx, after, a, actor, r)
					return a, false, err
				}
				a, err := s.lateConflict(ctx, tx, after, a, actor, string(r.State))
				return a, false, err
			}
			if a.ProviderID != "" && r.ProviderID != "" && r.ProviderID != a.ProviderID {
				a, err := s.secondOperation(ctx, tx, after, a, actor, r)
				return a, false, err
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
		na, err := s.markProcessing(ctx, tx, a, actor, r.ProviderID, r.Data, r.ExpectedBy)
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

// isSecondOperation: the report r names, for the final attempt a, another
// operation than a's recorded one at a's provider, in a final state that
// is not a's word (secondOperation): succeeded or failed for a succeeded
// attempt, failed for a failed one. A success reported for a failed
// attempt is lateConflict's, whatever operation it names.
func isSecondOperation(a Attempt, r report) bool {
	if !a.Status.Final() || (r.Provider != "" && r.Provider != a.Provider) ||
		a.ProviderID == "" || r.ProviderID == "" || r.ProviderID == a.ProviderID {
		return false
	}
	switch r.State {
	case providers.StateSucceeded:
		return a.Status == StatusSucceeded
	case providers.StateFailed:
		return true
	}
	return false
}

// secondOperationSeen: r is a second operation of a (isSecondOperation)
// already noted on it in the same state (secondOperation's note, keyed by
// the second provider id). Seen in another state is news: one first
// reported failed and later succeeded (a payment intent confirmed again).
// One indexed look-up of a's events (attempt_events by attempt_id), only
// for a report naming another operation for a final attempt.
func secondOperationSeen(ctx context.Context, tx pgx.Tx, a Attempt, r report) (bool, error) {
	if !isSecondOperation(a, r) {
		return false, nil
	}
	var seen bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM attempt_events WHERE attempt_id = $1 AND type = 'note'
		AND evidence->>'second_provider_id' = $2 AND evidence->>'state' = $3)`, a.ID, r.ProviderID, string(r.State)).Scan(&seen); err != nil {
		return false, fmt.Errorf("attempts: second operation %q of %s: %w", r.ProviderID, a.ID, err)
	}
	return seen, nil
}

// secondOperation handles a report naming another provider operation
// (r.ProviderID) in the final status the attempt a already has under its
// recorded one: a second operation under our reference (a cob paid twice
// by the payer, a transfer made twice). Nothing moves (R9: the status, the
// provider id and the ledger stay), but someone was paid or charged twice:
// a succeeded second operation is a divergence of kind second_operation
// (recordDivergence: review with an alert, the owner's needs_attention and
// *.diverged, saldo_attempts_divergences_total, the audit reporting it
// until an operator books the return and settles it). A report naming a
// provider id another attempt holds (providerIDHolder: a PSP's bug, a
// forged or misrouted notice) is no less in front of a human: the same
// divergence, whose text says whose id it is. A failed second operation
// moved no money: a note, an ERROR log and saldo_attempts_conflicts_total.
//
// The same second operation reported again (a redelivery, the lookup, the
// statement), whatever amount it names, changes nothing: applyReport finds
// its note, keyed by the second provider id, before anything else
// (secondOperationSeen) and never calls this. Another one on an attempt
// that has diverged already (settled or not) never replaces the recorded
// divergence (the evidence never changes): it is a note with an ERROR log
// and an alert (OnReview).
//
// It returns ErrProviderIDMismatch (the report contradicts the recorded
// provider id; the webhook answers "review") for a succeeded second
// operation seen for the first time; nil for a failed one.
func (s *Service) secondOperation(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt, actor Actor, r report) (Attempt, error) {
	holder, err := providerIDHolder(ctx, tx, a, r.ProviderID)
	if err != nil {
		return a, err
	}
	what := fmt.Sprintf("%s reported %s as provider operation %q for reference %s, whose attempt is already %s as %q",
		actor, r.State, r.ProviderID, a.Reference, a.Status, a.ProviderID)
	if holder != "" {
		what += fmt.Sprintf(" (attempt %s holds %q: perhaps a report about another operation)", holder, r.ProviderID)
	}
	evidence, err := json.Marshal(map[string]any{"second_provider_id": r.ProviderID, "state": r.State,
		"recorded_provider_id": a.ProviderID, "held_by_attempt": holder, "report": r.Evidence})
	if err != nil {
		return a, err
	}
	now := s.clock.Now()
	if err := insertEvent(ctx, tx, Event{AttemptID: a.ID, At: now, Type: EventNote, Actor: actor, ActorID: r.ActorID,
		Reason:   pgtext.Truncate(what+": a second operation under our reference; nothing moved", maxErrorText),
		Evidence: evidence}); err != nil {
		return a, err
	}
	after.add(func() { s.metrics.conflict(a) })
	if r.State != providers.StateSucceeded || a.Status != StatusSucceeded {
		after.add(func() {
			s.log.ErrorContext(ctx, "provider reports a second operation, failed, for a final attempt: noted", "attempt_id", a.ID,
				"kind", a.Kind, "provider", a.Provider, "reference", a.Reference, "status", a.Status, "provider_id", a.ProviderID,
				"reported_provider_id", r.ProviderID, "held_by", holder, "actor", actor)
		})
		return a, nil
	}
	twice := "money moved twice under it (the payer was charged twice; the merchant was credited once)"
	if a.Kind.direction() == "out" {
		twice = "money left twice under it (paid out twice; the ledger shows it once)"
	}
	why := fmt.Sprintf("divergence (second operation): %s: %s; a human books the return or refund of the second "+
		"operation and settles it (R9, R19)", what, twice)
	na, diverged, err := s.recordDivergence(ctx, tx, after, a, actor, DivergenceSecondOperation, why,
		"succeeded as "+r.ProviderID)
	if err != nil {
		return na, err
	}
	if !diverged {
		// The divergence recorded first stays (evidence); this one is the
		// note, and a human is alerted to it.
		after.add(func() {
			s.log.ErrorContext(ctx, "provider reports another second operation for an attempt already diverged: noted, alert",
				"attempt_id", a.ID, "kind", a.Kind, "provider", a.Provider, "reference", a.Reference,
				"provider_id", a.ProviderID, "reported_provider_id", r.ProviderID, "held_by", holder, "actor", actor,
				"divergence_settled", a.DivergenceSettledAt != nil)
			if s.cfg.OnReview != nil {
				s.cfg.OnReview(a, why)
			}
		})
	}
	return na, ErrProviderIDMismatch
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
// After MaxLookups answered lookups that could not tell the outcome
// (LookupsUndecided: lookups that found it processing do not count), or
// once "processing" is late (ProcessingReviewAt: ProcessingReviewAfter
// since it began and the provider's own expected end plus
// ProcessingExpectedMargin, both past), or for a provider that cannot look
// up, the attempt goes to review with an alert, never to automatic
// failure (R18).
func (s *Service) Resolve(ctx context.Context, id uuid.UUID) (ResolveResult, error) {
	// Read with the other executors' and resolvers' reads (getMany).
	a, err := s.getter.Do(ctx, id)
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
	case a.LookupsUndecided() >= s.cfg.MaxLookups:
		return review(fmt.Sprintf("%d answered lookups could not tell the outcome and it is still unclear (R18)", a.LookupsUndecided()))
	case a.ProcessingFrom != nil && !now.Before(s.ProcessingReviewAt(a)):
		return review(s.processingLateReason(a))
	}
	if reason, ok := s.unansweredTooLong(a, now); ok {
		return review(reason)
	}

	// When the provider is asked, not when its answer is recorded, is what
	// a "not found" proves absence at (R16): a slow answer recorded after
	// the window says nothing about the time after it was asked.
	asked := s.clock.Now()
	lr, lerr := lookup(ctx, prov, a)
	if lerr != nil {
		return review(fmt.Sprintf("lookup by reference refused: %v (R25)", lerr))
	}
	r, err := s.results.Do(ctx, resultReq{lu: &lookedUp{a: a, lr: lr, class: classifyLookup(lr), window: caps.ConsistencyWindow,
		asked: asked}})
	return r.res, err
}

// ProcessingReviewAt is when an attempt the provider reports processing
// (ProcessingFrom set) goes to review for it (R18): ProcessingReviewAfter
// after processing began, or, when the provider said when it expects the
// operation to end (ProcessingExpectedBy), that date plus
// ProcessingExpectedMargin if later. The date is capped at
// MaxProcessingExpectedAfter after processing began (again here, whatever
// wrote it), so no provider's date keeps an attempt out of review for
// longer. The zero time for an attempt never reported processing.
func (s *Service) ProcessingReviewAt(a Attempt) time.Time {
	if a.ProcessingFrom == nil {
		return time.Time{}
	}
	at := a.ProcessingFrom.Add(s.cfg.ProcessingReviewAfter)
	if e := s.processingExpectedBy(a); e != nil {
		if late := e.Add(s.cfg.ProcessingExpectedMargin); late.After(at) {
			at = late
		}
	}
	return at
}

// processingExpectedBy is a's ProcessingExpectedBy capped at
// MaxProcessingExpectedAfter after ProcessingFrom (nil when it has none).
func (s *Service) processingExpectedBy(a Attempt) *time.Time {
	if a.ProcessingExpectedBy == nil || a.ProcessingFrom == nil {
		return a.ProcessingExpectedBy
	}
	e, _ := capExpectedBy(*a.ProcessingFrom, *a.ProcessingExpectedBy)
	return e
}

// processingLateReason is the review reason of an attempt still processing
// at its ProcessingReviewAt: since when, and the provider's expected end
// when it gave one.
func (s *Service) processingLateReason(a Attempt) string {
	e := s.processingExpectedBy(a)
	if e == nil {
		return fmt.Sprintf("provider reports processing since %s, more than %s, and never said when it expects it to end (R18)",
			fmtTime(a.ProcessingFrom), s.cfg.ProcessingReviewAfter)
	}
	capped := ""
	if e.Equal(a.ProcessingFrom.Add(MaxProcessingExpectedAfter)) {
		capped = fmt.Sprintf(" (the provider's date capped at %s after processing began)", MaxProcessingExpectedAfter)
	}
	return fmt.Sprintf("provider reports processing since %s and expected it to end by %s%s: still processing %s after "+
		"that (margin %s) and more than %s since it began (R18)", fmtTime(a.ProcessingFrom), fmtTime(e), capped,
		s.clock.Now().Sub(*e).Round(time.Minute), s.cfg.ProcessingExpectedMargin, s.cfg.ProcessingReviewAfter)
}

// lookedUp is one lookup's answer for the resolver to record and apply.
type lookedUp struct {
	a      Attempt
	lr     providers.LookupResult
	class  lookupClass
	window time.Duration
	// asked is the service's clock just before the lookup was sent: a
	// "not found" says nothing about any later moment (R16). Zero (a
	// lookup made without it) counts as the time it is recorded at.
	asked time.Time
}

// countLookupsSQL counts a lookup of each attempt of $1 made at $2 and
// schedules the next. $4 says, for each id of $1, whether the provider
// answered that lookup (found or not found); $5 is the provider's
// Retry-After for an unanswered one, in microseconds (0 when it gave
// none); $6 whether it found the operation processing (counted in
// lookups_processing: not toward MaxLookups, R18). The schedule's step is
// the number of answered lookups, "processing" ones included: after the
// nth answered lookup the next comes after ResolveSchedule[n] ($3, in
// microseconds; the last entry repeats), so an operation the provider
// keeps processing for a day (a Pix cob, a payout in transit) is looked
// up at the schedule's longest delay, not every few seconds. An
// unanswered lookup leaves the step where it was: the next comes after
// the same delay again, or after the Retry-After when longer. The CTE
// locks the attempts in id order first, as record batches lock theirs.
var countLookupsSQL = `WITH o AS MATERIALIZED (SELECT id FROM attempts WHERE id = ANY ($1::uuid[]) ORDER BY id FOR UPDATE),
	l AS (SELECT * FROM unnest($1::uuid[], $4::boolean[], $5::bigint[], $6::boolean[]) AS l (id, answered, wait_us, processing))
	UPDATE attempts a SET lookup_count = a.lookup_count + 1, last_lookup_at = $2::timestamptz, updated_at = $2::timestamptz,
		lookups_unanswered = a.lookups_unanswered + CASE WHEN l.answered THEN 0 ELSE 1 END,
		lookups_processing = a.lookups_processing + CASE WHEN l.processing THEN 1 ELSE 0 END,
		unanswered_since = CASE WHEN l.answered THEN NULL ELSE coalesce(a.unanswered_since, $2::timestamptz) END,
		next_lookup_at = $2::timestamptz + greatest(l.wait_us,
			($3::bigint[])[least(a.lookup_count - a.lookups_unanswered + CASE WHEN l.answered THEN 1 ELSE 0 END,
				cardinality($3::bigint[]) - 1) + 1]) * interval '1 microsecond'
	FROM o JOIN l ON l.id = o.id WHERE a.id = ANY ($1::uuid[]) AND a.id = o.id
	RETURNING ` + qualifiedAttemptColumns

// applyLookups records the lookups lus made, of distinct attempts, at now
// (each one's event, lookup count and next lookup's time: one statement
// each for all of them), then applies what each found, in order
// (applyFound).
func (s *Service) applyLookups(ctx context.Context, tx pgx.Tx, after *afterCommit, lus []lookedUp, now time.Time) ([]ResolveResult, error) {
	ids := make([]uuid.UUID, len(lus))
	answered := make([]bool, len(lus))
	processing := make([]bool, len(lus))
	waitMicros := make([]int64, len(lus))
	for i, lu := range lus {
		ids[i] = lu.a.ID
		answered[i] = lu.class.answered()
		processing[i] = foundProcessing(lu.lr, lu.class)
		if !answered[i] {
			waitMicros[i] = min(lu.lr.Exchange.RetryAfter, s.cfg.ResolveSchedule[len(s.cfg.ResolveSchedule)-1]).Microseconds()
		}
	}
	counted, err := s.queryByIDs(ctx, tx, countLookupsSQL, ids, now, s.scheduleMicros, answered, waitMicros, processing)
	if err != nil {
		return nil, fmt.Errorf("attempts: record %d lookups: %w", len(lus), err)
	}
	for _, lu := range lus {
		if _, ok := counted[lu.a.ID]; !ok {
			return nil, fmt.Errorf("%w: attempt %s", ErrNotFound, lu.a.ID)
		}
	}
	moved, err := s.lookupFinals(ctx, tx, after, lus, counted, now)
	if err != nil {
		return nil, err
	}
	// Each attempt's lookup event, then its transition when it moved here.
	events := make([]Event, 0, len(lus)+len(moved))
	for i, lu := range lus {
		events = append(events, lookupEvent(lu.a, lu.lr, lu.class, ActorResolver, now, lu.asked))
		if m, ok := moved[i]; ok {
			events = append(events, m.event)
		}
	}
	after.add(func() {
		for _, lu := range lus {
			s.metrics.lookup(lu.a, lu.class)
		}
	})
	if err := insertEvents(ctx, tx, events); err != nil {
		return nil, err
	}
	out := make([]ResolveResult, len(lus))
	for i, lu := range lus {
		if m, ok := moved[i]; ok {
			out[i] = ResolveResult{Attempt: m.a, Transitioned: true}
			continue
		}
		if out[i], err = s.applyFound(ctx, tx, after, lu, counted[lu.a.ID], now); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// finalLookupSQL is transition's UPDATE for many attempts at once, each
// from the status it was read in (locked) to a final one, resolved by the
// resolver (lookupFinals). A lookup naming a provider id another attempt
// holds moves nothing here: applyFound flags it for review (transition,
// providerIDHolder).
var finalLookupSQL = `UPDATE attempts a SET status = u.to_status,
		provider_id = COALESCE(a.provider_id, u.provider_id), failure_code = COALESCE(u.failure_code, a.failure_code),
		failure_reason = COALESCE(u.failure_reason, a.failure_reason), data = COALESCE(u.data::jsonb, a.data),
		resolved_at = $9, resolved_by = $10, provider_state = u.provider_state, next_send_at = NULL, updated_at = $9
	FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
		AS u(uid, from_status, to_status, provider_id, failure_code, failure_reason, data, provider_state)
	WHERE a.id = ANY ($1::uuid[]) AND a.id = u.uid AND a.status = u.from_status
		AND (u.provider_id IS NULL OR a.provider_id IS NOT NULL OR NOT EXISTS (SELECT 1 FROM attempts o
			WHERE o.provider = a.provider AND o.provider_id = u.provider_id AND o.id <> a.id))
	RETURNING ` + qualifiedAttemptColumns

// movedByLookup is an attempt lookupFinals moved, and its transition event.
type movedByLookup struct {
	a     Attempt
	event Event
}

// lookupFinals moves, with one statement, the attempts whose lookups make
// them final with no question asked. A found succeeded or failed: the
// attempt open, the state machine allowing it, no other provider id
// recorded, the report matching the attempt (reportMismatch; amounts read
// for all of them at once through AmountsOwner). A "not found" (R16): the
// attempt unknown, nothing acknowledged, the provider's consistency window
// passed since the last call. And an owner that takes final attempts in
// batches (they are handed over with the transaction's other finals,
// last). It is what applyFound does for each of them (applyProviderState
// or its not-found case, then transition), set-based; every other lookup
// (and every lookup of an attempt made final meanwhile) is left to
// applyFound, one by one. now is the lookups' recorded time; a "not
// found" is judged at the time its lookup was asked (notFoundFailure). It
// returns the attempts it moved by their index in lus.
func (s *Service) lookupFinals(ctx context.Context, tx pgx.Tx, after *afterCommit, lus []lookedUp, counted map[uuid.UUID]Attempt, now time.Time) (map[int]movedByLookup, error) {
	if !after.collectFinals {
		return nil, nil
	}
	type candidate struct {
		i      int
		la     Attempt
		r      report // what the lookup found (to failed for "not found")
		to     Status
		reason string
	}
	var cands []candidate
	byOwner := map[AmountsOwner][]Attempt{}
	for i, lu := range lus {
		la := counted[lu.a.ID]
		if !la.Status.Open() || !s.isBatchOwned(la.Kind) {
			continue
		}
		switch lu.class {
		case lookupNotFound:
			c, ok := s.notFoundFailure(la, lu, now)
			if !ok {
				continue // nothing to do: applyFound does nothing either
			}
			cands = append(cands, candidate{i: i, la: la, to: c.To,
				r: report{FailureCode: c.FailureCode, FailureReason: c.FailureReason}, reason: c.Reason})
		case lookupFound:
			r := lookupState(lu.lr)
			to := StatusSucceeded
			switch r.State {
			case providers.StateSucceeded:
			case providers.StateFailed:
				to = StatusFailed
			default:
				continue
			}
			if !CanTransition(la.Status, to) || (r.ProviderID != "" && la.ProviderID != "" && r.ProviderID != la.ProviderID) {
				continue
			}
			if r.Amount != "" || r.Currency != "" {
				switch o := s.owner(la.Kind).(type) {
				case AmountsOwner:
					byOwner[o] = append(byOwner[o], la)
				case AmountOwner:
					continue // its amounts one by one: applyFound
				}
			}
			cands = append(cands, candidate{i: i, la: la, r: r, to: to,
				reason: fmt.Sprintf("lookup %d found %s", la.LookupCount, lu.lr.State)})
		}
	}
	if len(cands) == 0 {
		return nil, nil
	}
	amounts := map[uuid.UUID]OwnedAmount{}
	for o, as := range byOwner {
		got, err := o.AttemptAmounts(ctx, tx, as)
		if err != nil {
			return nil, fmt.Errorf("attempts: amounts of %d attempts: %w", len(as), err)
		}
		for _, a := range as {
			oa, ok := got[a.ID]
			if !ok {
				return nil, fmt.Errorf("attempts: no amount for %s %s (attempt %s)", a.Kind, a.SubjectID, a.ID)
			}
			amounts[a.ID] = oa
		}
	}
	var ids []uuid.UUID
	var from, to, states []string
	var pids, codes, reasons, data []*string
	kept := cands[:0]
	for _, c := range cands {
		field, _, _, err := reportMismatch(c.la, c.r, func() (decimal.Decimal, string, bool, error) {
			oa, ok := amounts[c.la.ID]
			return oa.Amount, oa.Currency, ok, nil
		})
		if err != nil {
			return nil, err
		}
		if field != "" {
			continue // flagged for review by applyFound
		}
		kept = append(kept, c)
		state := providers.StateSucceeded
		if c.to == StatusFailed {
			state = providers.StateFailed
		}
		var d *string
		if len(c.r.Data) > 0 && json.Valid(c.r.Data) {
			d = ptr(string(c.r.Data))
		}
		ids = append(ids, c.la.ID)
		from, to = append(from, string(c.la.Status)), append(to, string(c.to))
		pids, codes = append(pids, sqlcols.Nullable(c.r.ProviderID)), append(codes, sqlcols.Nullable(c.r.FailureCode))
		reasons, data, states = append(reasons, sqlcols.Nullable(c.r.FailureReason)), append(data, d), append(states, string(state))
	}
	if len(kept) == 0 {
		return nil, nil
	}
	at := s.clock.Now()
	got, err := s.queryByIDs(ctx, tx, finalLookupSQL, ids, from, to, pids, codes, reasons, data, states, at, string(ActorResolver))
	if err != nil {
		return nil, fmt.Errorf("attempts: resolve %d attempts by lookup: %w", len(ids), err)
	}
	out := make(map[int]movedByLookup, len(kept))
	for _, c := range kept {
		na, ok := got[c.la.ID]
		if !ok {
			continue // the status moved under us (R10): applyFound sees it as it is
		}
		out[c.i] = movedByLookup{a: na, event: Event{AttemptID: na.ID, At: at, Type: EventTransition, Actor: ActorResolver,
			FromStatus: c.la.Status, ToStatus: na.Status, Reason: c.reason}}
		after.final(na)
		s.afterTransition(ctx, after, na, c.la.Status, ActorResolver, c.reason)
	}
	return out, nil
}

// applyFound applies what the lookup lu found to the attempt la (locked,
// the lookup recorded): a found state goes through applyProviderState, as
// a webhook's does, whatever the attempt's status: it moves an open
// attempt, and on an attempt made final while the lookup was on the wire
// (a webhook, reconciliation, an operator) a contradiction is a late
// conflict, and a success after failed a divergence (R9, R18, R19);
// "not found" fails an unknown attempt nobody acknowledged once the
// consistency window has passed since its last call could have reached
// the provider (R16, notFoundFailure); anything else leaves it open. now
// is the lookup's recorded time.
func (s *Service) applyFound(ctx context.Context, tx pgx.Tx, after *afterCommit, lu lookedUp, la Attempt, now time.Time) (ResolveResult, error) {
	var res ResolveResult
	res.Attempt = la
	if !la.Status.Open() && lu.class != lookupFound {
		return res, nil
	}
	switch lu.class {
	case lookupFound:
		before := la.Status
		na, err := s.applyProviderState(ctx, tx, after, la, ActorResolver, lookupState(lu.lr),
			fmt.Sprintf("lookup %d found %s", la.LookupCount, lu.lr.State))
		res.Attempt, res.Transitioned = na, na.Status != before
		return res, err
	case lookupNotFound:
		c, ok := s.notFoundFailure(la, lu, now)
		if !ok {
			return res, nil
		}
		tr, err := s.transition(ctx, tx, after, la, c)
		res.Attempt, res.Transitioned = tr.Attempt, tr.Transitioned
		return res, err
	}
	return res, nil
}

// notFoundFailure is the failure a "not found" lookup lu, recorded at now,
// proves for the attempt la, and whether it proves one (R16, R22): only for
// an unknown attempt nobody acknowledged, once the provider's consistency
// window has passed between the moment the request could last have been
// on its way and the moment the provider was asked (lu.asked, not now: a
// slow answer is no newer than its question). A call in flight (started,
// its answer not recorded: a second executor made the attempt unknown, or
// the process died mid-call) may still be on its way until it started
// StaleCallAfter ago, the longest a call may last (the sweeper's measure):
// until then "not found" proves nothing, and the window counts from then.
// applyFound and lookupFinals both decide by it.
func (s *Service) notFoundFailure(la Attempt, lu lookedUp, now time.Time) (change, bool) {
	if la.Review {
		// Put in front of a human while the lookup was on its way (a
		// report that contradicts the attempt, a statement line): as when
		// the review came first (Resolve then looks nothing up), a human
		// decides, and the reserve stays (R18, R22).
		return change{}, false
	}
	if la.Status != StatusUnknown || la.Acknowledged() {
		// The provider already named or acknowledged this operation (a
		// provider id, a 2xx, a 409 "key in use", a processing report): a
		// later "not found" contradicts it and proves nothing. Never
		// failed on it; the lookups go on and, once exhausted, a human
		// decides (R16, R18).
		return change{}, false
	}
	// Counted from the latest moment the request could still have been on
	// its way: the last call's start or recorded end, or when we stopped
	// waiting for it (unknown_at); for a call still in flight, its start
	// plus the longest a call may last.
	ref := absenceFrom(la)
	if la.CallInFlight() {
		if la.CallStartedAt == nil {
			return change{}, false
		}
		if end := s.callOverAt(la); end.After(ref) {
			ref = end
		}
	}
	asked := lu.asked
	if asked.IsZero() || asked.After(now) {
		asked = now
	}
	if asked.Sub(ref) < lu.window {
		return change{}, false
	}
	return change{To: StatusFailed, Actor: ActorResolver, FailureCode: FailureNotFound,
		Reason: fmt.Sprintf("lookup %d: not found, asked %s after the last call could have reached the provider (consistency window %s, R16)",
			la.LookupCount, asked.Sub(ref).Round(time.Second), lu.window),
		FailureReason: "the provider has no operation with our reference after its consistency window"}, true
}

// retryIn sets res.RetryIn: when an attempt still awaiting resolution is
// due for its next lookup (at least a second from now).
func (s *Service) retryIn(res ResolveResult) ResolveResult {
	if res.Attempt.AwaitingResolution() && !res.Attempt.Review && res.Attempt.NextLookupAt != nil {
		res.RetryIn = max(res.Attempt.NextLookupAt.Sub(s.clock.Now()), time.Second)
	}
	return res
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
//
// Provider, Operation, Amount and Currency are what the statement says
// about the operation; each one set must match the attempt (its provider
// and operation, and the amount and currency its AmountOwner gives) or the
// statement moves nothing: the attempt goes to review with an alert and
// ResolveByReference returns ErrReportMismatch (issue 13 finding 4). A
// provider's word (webhook, poll) must set every one it has.
type ResolveInput struct {
	Reference string
	Provider  string
	Operation providers.Operation
	// Direction as providers.WebhookEvent.Direction: the attempt's kind
	// must move money that way, or the report is a mismatch (review,
	// nothing moved). "" is not checked.
	Direction     providers.Direction
	Amount        string
	Currency      string
	State         providers.State
	ProviderID    string
	FailureCode   string
	FailureReason string
	Data          []byte
	Source        Source
	// Actor identifies the source instance (webhook event id, operator id).
	Actor  string
	Reason string
	// Evidence, optional JSON, is kept on the transition event it causes
	// (a reconciliation run's statement line, an operator's evidence).
	Evidence json.RawMessage
	// ExpectedBy, for a processing report: when the provider expects the
	// operation to end (providers.WebhookEvent.ExpectedBy); zero when it
	// did not say. It moves the review of a long "processing" (R18).
	ExpectedBy time.Time
}

// ResolveByReference applies a provider's statement to the attempt with that
// reference (R17): a conditional transition, so duplicates and out-of-order
// events are harmless, "processing" never downgrades anything and a final
// status never changes. It reports whether this call changed the status.
// ErrNotFound when no attempt has the reference; ErrProviderIDMismatch (the
// attempt is then flagged for review) when the provider id contradicts the
// recorded one; ErrReportMismatch (flagged for review, nothing moved) when
// in's provider, operation, amount or currency contradicts the attempt. An
// operator's "failed" (SourceOperator) is ResolveManually's decision, with
// its refusals (ErrManualFailRefused).
func (s *Service) ResolveByReference(ctx context.Context, in ResolveInput) (ResolveResult, error) {
	actor, err := sourceActor(in)
	if err != nil {
		return ResolveResult{}, err
	}
	switch in.State {
	case providers.StateSucceeded, providers.StateFailed, providers.StateProcessing:
	default:
		return ResolveResult{}, fmt.Errorf("%w: unknown provider state %q", ErrInvalid, in.State)
	}
	if in.Reference == "" {
		return ResolveResult{}, fmt.Errorf("%w: empty reference", ErrInvalid)
	}
	if in.Source == SourceOperator && in.State == providers.StateFailed {
		// An operator's failed is ResolveManually's decision, whatever the
		// door it comes through (issue 13 finding 5).
		a, err := s.GetByReference(ctx, s.pool, in.Reference)
		if err != nil {
			return ResolveResult{}, err
		}
		return s.ResolveManually(ctx, a.ID, StatusFailed, in.Actor, in.Reason, nil)
	}
	var res ResolveResult
	var mismatch error
	err = s.inTx(ctx, func(tx pgx.Tx, after *afterCommit) error {
		mismatch = nil
		a, err := scanAttempt(tx.QueryRow(ctx, `SELECT `+attemptColumns+` FROM attempts WHERE reference = $1 FOR UPDATE`, in.Reference))
		if err != nil {
			return err
		}
		reason := in.Reason
		if reason == "" {
			reason = fmt.Sprintf("%s reports %s", in.Source, in.State)
		}
		na, tr, err := s.applyReport(ctx, tx, after, a, actor, report{Provider: in.Provider, Operation: in.Operation, Direction: in.Direction,
			Amount: in.Amount, Currency: in.Currency, State: in.State, ProviderID: in.ProviderID,
			FailureCode: in.FailureCode, FailureReason: in.FailureReason, Data: in.Data, ActorID: in.Actor,
			Evidence: in.Evidence, ExpectedBy: in.ExpectedBy}, reason)
		if errors.Is(err, ErrProviderIDMismatch) || errors.Is(err, ErrReportMismatch) {
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
//
// "failed" gives the reserve back (R22), so it is refused with a
// *ManualFailRefusedError (ErrManualFailRefused; nothing changes, the
// operator may record the decision again once it is allowed) unless the
// provider cannot be paying the operation (issue 13 finding 5):
//   - a call is in flight (started, nothing recorded): refused;
//   - no call ever started and the provider never acknowledged anything:
//     allowed (nothing left the process);
//   - otherwise a lookup past the provider's consistency window (counted
//     from the last call or from when the attempt became unknown, as R16
//     counts it) must have come back not found. Before the window it is
//     refused. After it, if the last lookup is not such a "not found",
//     ResolveManually looks the reference up itself (outside any
//     transaction, R11) and records the lookup: not found allows it; found,
//     or an inconclusive answer, refuses it (a found operation is resolved
//     by the resolver or a webhook with the provider's own word);
//   - a provider that cannot look up by reference (R25): allowed once the
//     consistency window has passed, on the operator's evidence (the
//     provider's statement, reconciliation).
func (s *Service) ResolveManually(ctx context.Context, attemptID uuid.UUID, status Status, operatorID, reason string, evidence json.RawMessage) (ResolveResult, error) {
	return s.ResolveManuallyWith(ctx, attemptID, status, operatorID, reason, evidence, nil)
}

// ResolveManuallyWith is ResolveManually with also run inside the
// decision's transaction, before its COMMIT, when the decision stands (it
// moved the attempt, or found it already final with the same status): what
// also writes in tx commits with the decision, and an error from it rolls
// the decision back and is returned as it is. On a refusal
// (ManualFailRefusedError, TransitionError) also is not called. The caller
// records there what must commit with the decision and never without it
// (the API's idempotent answer: a COMMIT whose answer was lost then leaves
// both, R4, R5); also may run again when the transaction is a deadlock's
// victim (runTx). A nil also is ResolveManually.
func (s *Service) ResolveManuallyWith(ctx context.Context, attemptID uuid.UUID, status Status, operatorID, reason string,
	evidence json.RawMessage, also func(ctx context.Context, tx pgx.Tx, res ResolveResult) error) (ResolveResult, error) {
	if !status.Final() {
		return ResolveResult{}, fmt.Errorf("%w: an operator resolves to succeeded or failed, not %q", ErrInvalid, status)
	}
	if strings.TrimSpace(operatorID) == "" || strings.TrimSpace(reason) == "" {
		return ResolveResult{}, fmt.Errorf("%w: operator id and reason are required", ErrInvalid)
	}
	if len(evidence) > 0 {
		if err := s.checkEvidence(ctx, evidence); err != nil {
			return ResolveResult{}, err
		}
	}
	// A manual failed may need a lookup, made before the transaction (R11);
	// asked is when it was sent (R16: what a "not found" proves).
	var lr *providers.LookupResult
	var asked time.Time
	if status == StatusFailed {
		a, err := s.Get(ctx, s.pool, attemptID)
		if err != nil {
			return ResolveResult{}, err
		}
		if a.Status.Open() {
			v, err := s.manualFailVerdict(ctx, s.pool, a, nil, time.Time{})
			if err != nil {
				return ResolveResult{}, err
			}
			switch v.decision {
			case manualRefuse:
				return ResolveResult{Attempt: a}, &ManualFailRefusedError{AttemptID: a.ID, Reason: v.reason}
			case manualLookup:
				asked = s.clock.Now()
				r, lerr := lookup(ctx, s.providers[a.Provider], a)
				if lerr != nil {
					return ResolveResult{Attempt: a}, &ManualFailRefusedError{AttemptID: a.ID,
						Reason: "the provider refused a lookup by reference: " + lerr.Error()}
				}
				lr = &r
			}
		}
	}
	var res ResolveResult
	var refused error
	// decide is the decision under the attempt's row lock: res is what it
	// did; refused (committed with the lookup's record, if any) refuses a
	// manual failed.
	decide := func(tx pgx.Tx, after *afterCommit) error {
		refused = nil
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
		if status == StatusFailed {
			if lr != nil {
				if a, err = s.recordManualLookup(ctx, tx, after, a, *lr, asked); err != nil {
					return err
				}
				if a.Status.Final() {
					// The lookup found the provider's final answer and it
					// was applied: the provider's word, not the operator's.
					res = ResolveResult{Attempt: a, Transitioned: true}
					if a.Status != status {
						refused = &ManualFailRefusedError{AttemptID: a.ID, Reason: fmt.Sprintf("a lookup just found the "+
							"operation at the provider, %s (provider id %q): recorded as the provider's word", a.Status, a.ProviderID)}
					}
					return nil
				}
			}
			// Decided again under the row lock: a call may have started
			// since the attempt was read.
			v, err := s.manualFailVerdict(ctx, tx, a, lr, asked)
			if err != nil {
				return err
			}
			if v.decision != manualAllow {
				// Commit the lookup's record; refuse the decision.
				res = ResolveResult{Attempt: a}
				refused = &ManualFailRefusedError{AttemptID: a.ID, Reason: v.reason}
				return nil
			}
		}
		c := change{To: status, Actor: ActorOperator, ActorID: operatorID, Reason: reason, Evidence: evidence}
		if status == StatusFailed {
			c.FailureCode, c.FailureReason = "operator", reason
		}
		tr, err := s.transition(ctx, tx, after, a, c)
		res = ResolveResult{Attempt: tr.Attempt, Transitioned: tr.Transitioned}
		return err
	}
	err := s.inTx(ctx, func(tx pgx.Tx, after *afterCommit) error {
		if err := decide(tx, after); err != nil || refused != nil || also == nil {
			return err
		}
		return also(ctx, tx, res)
	})
	if err == nil && refused != nil {
		s.log.WarnContext(ctx, "manual failed refused", "attempt_id", res.Attempt.ID, "provider", res.Attempt.Provider,
			"reference", res.Attempt.Reference, "operator", operatorID, "why", refused.Error())
		return res, refused
	}
	return res, err
}

// checkEvidence refuses (ErrInvalidEvidence) evidence the attempt_events
// jsonb column would refuse, before anything is looked up or written: JSON
// that encoding/json accepts but jsonb does not (a lone surrogate escape
// "\ud800", "\u0000", a number outside numeric's range such as 1e1000000)
// would otherwise fail the transition's INSERT, a 500 for the operator.
//
// It asks PostgreSQL (SELECT $1::jsonb, outside any transaction) rather than
// re-implementing jsonb's input rules in Go: those rules (surrogate pairing,
// which escapes the server encoding can represent, numeric's digit limits
// before and after the point) belong to the server and its version, and
// the server's own parser is the only exact copy. Any data exception
// (SQLSTATE class 22) is the evidence's fault; other errors (the database
// unreachable) are returned as they are. The price is one round trip on a
// rare operator action.
func (s *Service) checkEvidence(ctx context.Context, evidence json.RawMessage) error {
	if !json.Valid(evidence) {
		return fmt.Errorf("%w: not valid JSON", ErrInvalidEvidence)
	}
	_, err := s.pool.Exec(ctx, "SELECT $1::jsonb", evidence)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22") {
		why := pgErr.Message
		if pgErr.Detail != "" {
			why += " (" + pgErr.Detail + ")"
		}
		return fmt.Errorf("%w: %s", ErrInvalidEvidence, why)
	}
	return err
}

type manualDecision int

const (
	manualAllow manualDecision = iota
	manualRefuse
	manualLookup // allowed only if a fresh lookup comes back not found
)

type manualVerdict struct {
	decision manualDecision
	reason   string
}

// callOverAt is when the call in flight of a is over at the latest: its
// start plus this process's StaleCallAfter, or the deadline the process that
// made the call stamped (CallDeadlineAt, its own StaleCallAfter), whichever
// is later. A fleet whose processes are configured differently thus never
// counts a call over while its caller may still send it (R11, R16).
func (s *Service) callOverAt(a Attempt) time.Time {
	var end time.Time
	if a.CallStartedAt != nil {
		end = a.CallStartedAt.Add(s.cfg.StaleCallAfter)
	}
	if a.CallDeadlineAt != nil && a.CallDeadlineAt.After(end) {
		end = *a.CallDeadlineAt
	}
	return end
}

// manualFailVerdict says whether an operator may resolve the open attempt a
// failed now (ResolveManually's rules). fresh is a lookup just made for this
// decision (nil when none was), sent at freshAsked. A "not found" counts
// only if the provider was asked past the consistency window (R16): the
// time it was asked, not the time its answer came, is compared. A call
// whose answer is not recorded refuses it until StaleCallAfter after the
// call started, and the window then counts from there.
func (s *Service) manualFailVerdict(ctx context.Context, db DB, a Attempt, fresh *providers.LookupResult, freshAsked time.Time) (manualVerdict, error) {
	now := s.clock.Now()
	// Counted from the latest moment the request could still have been on
	// its way, as notFoundFailure counts it (R16).
	ref := absenceFrom(a)
	if a.CallInFlight() {
		// A call whose answer is not recorded may still be on its way
		// until it has lasted as long as any call can (StaleCallAfter,
		// R11). After that it is over, answered or not: a process that
		// died mid-call never records it, and refusing for ever would
		// leave the reserve to no one's decision (R18, R25).
		if a.CallStartedAt == nil || now.Before(s.callOverAt(a)) {
			return manualVerdict{manualRefuse, fmt.Sprintf("call %d started at %s and its answer is not recorded: it is in flight "+
				"and the provider may be paying it until %s; wait for its answer (or for the sweeper to make "+
				"the attempt unknown and a lookup to decide)", a.CallCount, fmtTime(a.CallStartedAt), fmtTime(timePtr(s.callOverAt(a))))}, nil
		}
		if end := s.callOverAt(a); end.After(ref) {
			ref = end
		}
	}
	if a.CallCount == 0 && !a.Acknowledged() {
		return manualVerdict{decision: manualAllow}, nil
	}
	prov, ok := s.providers[a.Provider]
	if !ok {
		return manualVerdict{manualRefuse, fmt.Sprintf("provider %q is not configured in this process: its consistency window is unknown", a.Provider)}, nil
	}
	caps := prov.Capabilities()
	ready := ref.Add(caps.ConsistencyWindow)
	if now.Before(ready) {
		return manualVerdict{manualRefuse, fmt.Sprintf("the provider's consistency window (%s) since the last call or since the attempt became "+
			"unknown ends at %s: before it, no lookup can prove the operation absent (R16); record the decision again after it",
			caps.ConsistencyWindow, fmtTime(&ready))}, nil
	}
	if !caps.LookupByReference {
		return manualVerdict{decision: manualAllow}, nil // R25: the operator's evidence decides
	}
	if fresh != nil {
		switch classifyLookup(*fresh) {
		case lookupNotFound:
			if freshAsked.IsZero() || freshAsked.Before(ready) {
				// Asked before the window (counted again under the lock)
				// ended: it proves nothing.
				return manualVerdict{manualRefuse, fmt.Sprintf("a lookup just made came back not found, but it was sent at %s, "+
					"before the provider's consistency window (%s) ended at %s: it proves nothing (R16); record the decision again",
					fmtTime(&freshAsked), caps.ConsistencyWindow, fmtTime(&ready))}, nil
			}
			return manualVerdict{decision: manualAllow}, nil
		case lookupFound:
			return manualVerdict{manualRefuse, fmt.Sprintf("a lookup just found the operation at the provider, %s (provider id %q): "+
				"the provider's answer resolves it (resolver, webhook); if it paid, record succeeded", fresh.State, fresh.ProviderID)}, nil
		}
		what := fmt.Sprintf("HTTP %d", fresh.Exchange.StatusCode)
		if fresh.Exchange.Err != nil {
			what = fresh.Exchange.Err.Error()
		}
		return manualVerdict{manualRefuse, "a lookup just made was inconclusive (" + pgtext.Truncate(what, 300) +
			"): nothing proves the operation absent; record the decision again later"}, nil
	}
	var at time.Time
	var outcome *string
	err := db.QueryRow(ctx, lastLookupSQL, a.ID).Scan(&at, &outcome)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return manualVerdict{}, err
	}
	// at is when the provider was asked. The "not found" must also be
	// newer than anything the provider said about the operation (a
	// processing report after it names it again).
	if err == nil && sqlcols.Deref(outcome) == string(lookupNotFound) && !at.Before(ready) &&
		(a.ProcessingFrom == nil || !at.Before(*a.ProcessingFrom)) && (a.AcknowledgedAt == nil || !at.Before(*a.AcknowledgedAt)) {
		return manualVerdict{decision: manualAllow}, nil
	}
	return manualVerdict{decision: manualLookup}, nil
}

// lastLookupSQL reads the latest lookup of an attempt: when the provider was
// asked and what it answered. The asking time is the event's started_at
// (lookupEvent: the service's clock just before the lookup was sent, or,
// for a lookup recorded without it, the exchange's start, as every lookup
// event recorded before the asking time was kept); never later than when
// it was recorded (least ignores a NULL started_at: such an event counts
// from when it was recorded, the latest it can have been asked).
const lastLookupSQL = `SELECT least(started_at, at), outcome FROM attempt_events
	WHERE attempt_id = $1 AND type = 'lookup' ORDER BY id DESC LIMIT 1`

// absenceFrom is the moment from which a provider's consistency window is
// counted for a "not found": the latest moment the request could still have
// been on its way (the last call's start or recorded end, or when we
// stopped waiting for it), as Resolve counts it (R16).
func absenceFrom(a Attempt) time.Time {
	ref := a.CreatedAt
	for _, t := range []*time.Time{a.CallStartedAt, a.CallEndedAt, a.UnknownAt} {
		if t != nil && t.After(ref) {
			ref = *t
		}
	}
	return ref
}

// recordManualLookup records a lookup ResolveManually made, sent at asked,
// in tx as every other lookup is: the event and the lookup counters (an
// unanswered lookup counted as one, starting or extending the unanswered
// run; an answered one ending it: R18, R20), and a found operation applied
// as the resolver's lookup applies it (applyProviderState, with R17's
// checks): processing kept as the provider's acknowledgement, so that a
// later "not found" proves nothing (R16); succeeded or failed resolving
// the attempt, the provider's word (an attempt in review is resolved by no
// resolver, so the operator's lookup must).
func (s *Service) recordManualLookup(ctx context.Context, tx pgx.Tx, after *afterCommit, a Attempt, lr providers.LookupResult,
	asked time.Time) (Attempt, error) {
	now := s.clock.Now()
	class := classifyLookup(lr)
	if err := insertEvent(ctx, tx, lookupEvent(a, lr, class, ActorOperator, now, asked)); err != nil {
		return a, err
	}
	var inRun int
	la, err := scanAttemptAfter(tx.QueryRow(ctx, countResendLookupSQL, a.ID, now, class.answered(), foundProcessing(lr, class)), &inRun)
	if err != nil {
		return a, fmt.Errorf("attempts: count the operator's lookup of %s: %w", a.ID, err)
	}
	after.add(func() { s.metrics.lookup(la, class) })
	if class != lookupFound {
		return la, nil
	}
	return s.applyProviderState(ctx, tx, after, la, ActorOperator, lookupState(lr), "the operator's lookup")
}

// ReviewQueueParams pages the review queue.
type ReviewQueueParams struct {
	// After is the cursor returned by the previous page ("" for the first).
	After string
	// Limit defaults to 50, at most 500.
	Limit int
}

// ReviewQueue lists open attempts flagged for review, and failed attempts a
// provider later reported succeeded (divergences, DivergedAt set), oldest
// flag first, and the cursor of the next page ("" when this is the last).
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
		WHERE review AND (status IN ('pending', 'unknown') OR (diverged_at IS NOT NULL AND divergence_settled_at IS NULL))
			AND (review_at, id) > ($1, $2)
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

// lookup is every lookup of an attempt by its reference (one exchange):
// a provider that wants the attempt's stored payload first
// (providers.Recaller) gets it.
func lookup(ctx context.Context, p providers.Provider, a Attempt) (providers.LookupResult, error) {
	if r, ok := p.(providers.Recaller); ok {
		r.Recall(providers.Operation(a.Operation), a.Reference, a.Payload)
	}
	return p.Lookup(ctx, providers.Operation(a.Operation), a.Reference)
}

// SettleDivergence records that an operator has booked what a divergence
// means (a provider success after the attempt was resolved failed: the money
// left although the ledger released it; a reversal, a dispute, a second
// operation) and settles it with a reason. The status stays and the
// divergence stays on the attempt as evidence; the audit's
// attempts/diverged check, the review queue, its gauge and the payout's
// needs_attention leave a settled divergence alone. ErrNotDiverged when the
// attempt has no divergence or it is already settled.
//
// When the divergence still holds a merchant's money (its owner is a
// DivergenceSettleOwner: package holds), hold says what becomes of it, in
// the same transaction: HoldRelease gives it back to available, HoldBook
// books it as gone; HoldNone is refused (ErrHoldUndecided, naming the
// amount; nothing changes). A decision with nothing held is accepted and
// moves nothing. The settlement note says what was held and what was done.
func (s *Service) SettleDivergence(ctx context.Context, attemptID uuid.UUID, operatorID, reason string, hold HoldDecision) (Attempt, error) {
	return s.SettleDivergenceWith(ctx, attemptID, operatorID, reason, hold, nil)
}

// SettleDivergenceWith is SettleDivergence with also run inside the
// settlement's transaction, after it is recorded and before its COMMIT,
// with the settled attempt: what also writes in tx commits with the
// settlement, and an error from it rolls the settlement (and the hold's
// release or booking) back and is returned as it is. The caller records
// there what must commit with the settlement and never without it (the
// API's idempotent answer: after a COMMIT whose answer was lost the retry
// gets the settlement's answer, not ErrNotDiverged, R4, R5); also may run
// again when the transaction is a deadlock's victim (runTx). A nil also is
// SettleDivergence.
func (s *Service) SettleDivergenceWith(ctx context.Context, attemptID uuid.UUID, operatorID, reason string, hold HoldDecision,
	also func(ctx context.Context, tx pgx.Tx, a Attempt) error) (Attempt, error) {
	reason = strings.TrimSpace(reason)
	if operatorID == "" || reason == "" || utf8.RuneCountInString(reason) > 2000 {
		return Attempt{}, fmt.Errorf("%w: settling a divergence needs an operator id and a reason of 1-2000 characters", ErrInvalid)
	}
	if !hold.Valid() {
		return Attempt{}, fmt.Errorf("%w: hold %q: release or book", ErrInvalid, hold)
	}
	var out Attempt
	err := s.inTx(ctx, func(tx pgx.Tx, after *afterCommit) error {
		a, err := lockAttempt(ctx, tx, attemptID)
		if err != nil {
			return err
		}
		if a.DivergedAt == nil || a.DivergenceSettledAt != nil {
			return fmt.Errorf("%w: attempt %s", ErrNotDiverged, a.ID)
		}
		holdNote := ""
		if o, ok := s.owner(a.Kind).(DivergenceSettleOwner); ok {
			if holdNote, err = o.SettleDivergenceHold(ctx, tx, a, hold); err != nil {
				return err
			}
		} else if hold != HoldNone {
			holdNote = fmt.Sprintf("hold %s asked; nothing was held", hold)
		}
		// The settlement keeps the reason and what became of the hold
		// (at most 2000 characters: the reason gives way).
		settlement := reason
		if holdNote != "" {
			holdNote = pgtext.Truncate(holdNote, 1000)
			suffix := " [" + holdNote + "]"
			settlement = pgtext.Truncate(reason, 2000-len(suffix)) + suffix
		}
		note := "divergence settled: " + settlement
		now := s.clock.Now()
		if out, err = scanAttempt(tx.QueryRow(ctx, `UPDATE attempts SET divergence_settled_at = $2,
			divergence_settled_by = $3, divergence_settlement = $4, updated_at = $2
			WHERE id = $1 RETURNING `+attemptColumns, a.ID, now, operatorID, settlement)); err != nil {
			return err
		}
		if err := insertEvent(ctx, tx, Event{AttemptID: a.ID, At: now, Type: EventNote, Actor: ActorOperator,
			ActorID: operatorID, Reason: note}); err != nil {
			return err
		}
		after.add(func() {
			s.log.InfoContext(ctx, "attempt divergence settled", "attempt_id", a.ID, "kind", a.Kind, "provider", a.Provider,
				"reference", a.Reference, "operator", operatorID, "hold", string(hold), "hold_note", holdNote)
		})
		if also == nil {
			return nil
		}
		return also(ctx, tx, out)
	})
	return out, err
}
