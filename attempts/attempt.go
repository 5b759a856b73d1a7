package attempts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/saldo/saldo/internal/pgtext"
	"github.com/saldo/saldo/internal/sqlcols"
)

// DB is what read functions need: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Sentinel errors. Match with errors.Is.
var (
	// ErrAttemptOpen: the subject already has an open (pending or unknown)
	// attempt; Open returns it alongside this error (R8).
	ErrAttemptOpen = errors.New("attempts: subject already has an open attempt")
	// ErrSubjectSucceeded: the subject already has a succeeded attempt; a new
	// one would realise it twice.
	ErrSubjectSucceeded = errors.New("attempts: subject already has a succeeded attempt")
	// ErrNotFound: no attempt with that id or reference.
	ErrNotFound = errors.New("attempts: attempt not found")
	// ErrTransition: a transition the state machine forbids (R9).
	ErrTransition = errors.New("attempts: transition not allowed")
	// ErrNotDiverged: SettleDivergence on an attempt with no divergence, or
	// one already settled.
	ErrNotDiverged = errors.New("attempts: no unsettled divergence on this attempt")
	// ErrHoldUndecided: SettleDivergence without a hold decision
	// (HoldRelease or HoldBook) for an attempt whose divergence still holds
	// a merchant's money (package holds). It is ErrInvalid too (errors.Is);
	// the error names the amount held. Nothing was written.
	ErrHoldUndecided = errors.New("attempts: the settlement needs a hold decision")
	// ErrInvalid: bad input (unknown kind, empty subject, unknown provider,
	// unsupported operation, missing operator or reason). Nothing was written.
	ErrInvalid = errors.New("attempts: invalid input")
	// ErrInvalidEvidence: an operator's evidence is not JSON that
	// PostgreSQL's jsonb stores (ResolveManually). It is ErrInvalid too
	// (errors.Is), naming the field. Nothing was written.
	ErrInvalidEvidence = fmt.Errorf("%w: evidence must be JSON that PostgreSQL's jsonb accepts", ErrInvalid)
	// ErrPayloadTampered: the stored payload no longer matches its sha256;
	// nothing is sent (R5).
	ErrPayloadTampered = errors.New("attempts: payload does not match its sha256")
	// ErrProviderIDMismatch: a webhook or lookup names a different provider
	// id for our reference than the one recorded. The attempt is flagged for
	// review; nothing transitions.
	ErrProviderIDMismatch = errors.New("attempts: provider id differs from the recorded one")
	// ErrNoOwner: no Owner is registered for the attempt's kind; a final
	// transition cannot be recorded without one.
	ErrNoOwner = errors.New("attempts: no owner registered for kind")
	// ErrManualFailRefused: an operator asked to resolve an attempt failed
	// while the provider may still complete it (a call in flight, or no
	// lookup past the consistency window has come back not found). Nothing
	// changed; the decision may be recorded again once it is allowed. The
	// error is a *ManualFailRefusedError saying why (issue 13 finding 5).
	ErrManualFailRefused = errors.New("attempts: manual failed refused: the provider may still complete this operation")
	// ErrReportMismatch: a provider's report (webhook, lookup, poll) names
	// one of our references but another provider, operation, amount or
	// currency than the attempt's. Nothing moved; the attempt is flagged
	// for review with an alert (issue 13 finding 4).
	ErrReportMismatch = errors.New("attempts: provider report contradicts the attempt")
)

// ManualFailRefusedError is ErrManualFailRefused with the reason, for the
// operator (the API answers it as a 409 problem with Reason as detail).
type ManualFailRefusedError struct {
	AttemptID uuid.UUID
	Reason    string
}

func (e *ManualFailRefusedError) Error() string {
	return fmt.Sprintf("attempts: manual failed refused for attempt %s: %s", e.AttemptID, e.Reason)
}

// Is makes errors.Is(err, ErrManualFailRefused) match.
func (e *ManualFailRefusedError) Is(target error) bool { return target == ErrManualFailRefused }

// Attempt is one conversation with a provider to realise a subject.
type Attempt struct {
	ID             uuid.UUID
	Kind           Kind
	SubjectID      string
	Provider       string
	Operation      string
	IdempotencyKey string
	// Reference is our external reference, 32 lowercase hex characters (R13).
	Reference     string
	Payload       []byte
	PayloadSHA256 []byte
	Status        Status
	// ProviderState is the provider's last reported state; "processing"
	// while a pending attempt is accepted but not final.
	ProviderState string
	ProviderID    string
	FailureCode   string
	FailureReason string
	// CallCount is how many calls were started (durably, before the call);
	// CallsRecorded how many had their result recorded.
	CallCount     int
	CallsRecorded int
	CallStartedAt *time.Time
	CallEndedAt   *time.Time
	// CallDeadlineAt: when the call in flight is over at the latest, as the
	// process that made it stamped it (its StaleCallAfter); callOverAt.
	CallDeadlineAt *time.Time
	NextSendAt     *time.Time
	LastError      string
	KeyExpiresAt   *time.Time
	LookupCount    int
	// LookupsUnanswered counts the lookups the provider did not answer
	// (transport error, 5xx, 429, unreadable): they prove nothing and do
	// not move the attempt along the resolve schedule. UnansweredSince is
	// when the current run of them began (nil after an answered lookup).
	LookupsUnanswered int
	UnansweredSince   *time.Time
	// LookupsProcessing counts the answered lookups that found the
	// operation processing: they move the attempt along the resolve
	// schedule but not toward MaxLookups (LookupsUndecided, R18).
	LookupsProcessing int
	LastLookupAt      *time.Time
	NextLookupAt      *time.Time
	ProcessingFrom    *time.Time
	// ProcessingExpectedBy is when the provider last said it expects the
	// operation it reports processing to end (providers'
	// ExpectedBy), capped at ProcessingFrom + MaxProcessingExpectedAfter;
	// nil when it stated none. The review of a long "processing" ages
	// from it (ProcessingReviewAt, R18).
	ProcessingExpectedBy *time.Time
	Review               bool
	ReviewReason         string
	ReviewAt             *time.Time
	UnknownAt            *time.Time
	ResolvedAt           *time.Time
	ResolvedBy           string
	// AcknowledgedAt is when the provider first showed it holds the
	// operation (a 2xx, a provider id, a 409 "key in use", a processing
	// report); Acknowledgement says what it said. After it, "not found"
	// proves nothing (R16): the attempt never fails on a lookup.
	AcknowledgedAt  *time.Time
	Acknowledgement string
	// DivergedAt is when a provider reported succeeded for this attempt
	// after it was resolved failed (Divergence says who and how): money
	// may have left while the reserve went back. Review and audit report it.
	DivergedAt *time.Time
	Divergence string
	// DivergenceKind is which way (Divergence*: paid_after_failure,
	// reversal, dispute, second_operation); "" without a divergence.
	DivergenceKind string
	// DivergenceSettledAt, By and Settlement: a human booked what the
	// divergence means and settled it (SettleDivergence); the evidence
	// stays.
	DivergenceSettledAt  *time.Time
	DivergenceSettledBy  string
	DivergenceSettlement string
	// Data is operation output worth keeping (pix_charge: copy-and-paste).
	Data      json.RawMessage
	CreatedAt time.Time
	UpdatedAt time.Time
}

// CallInFlight reports whether a call was started and its result never
// recorded: the request may have left (crash, or a call still running).
func (a Attempt) CallInFlight() bool { return a.CallCount > a.CallsRecorded }

// LookupsAnswered is how many lookups the provider answered (found or not
// found): the attempt's step on the resolve schedule.
func (a Attempt) LookupsAnswered() int { return a.LookupCount - a.LookupsUnanswered }

// LookupsUndecided is how many answered lookups could not tell the
// outcome (not found while that proves nothing yet): the answered ones
// less those that found the operation processing. It is what MaxLookups
// bounds (R18); a provider that keeps saying "processing" is bounded by
// the processing deadline instead (ProcessingReviewAt). It never goes
// down: an attempt unknown for many lookups, then processing, then
// unknown again keeps every undecided lookup counted.
func (a Attempt) LookupsUndecided() int { return a.LookupsAnswered() - a.LookupsProcessing }

// Acknowledged reports whether the provider ever named or acknowledged the
// operation: a provider id, a provider state, or a recorded acknowledgement
// (any 2xx, a 409 "key in use"). A lookup's "not found" after it is a
// contradiction, never proof of absence (R16).
func (a Attempt) Acknowledged() bool {
	return a.AcknowledgedAt != nil || a.ProviderID != "" || a.ProviderState != ""
}

// AwaitingResolution reports whether the attempt waits for a lookup or a
// webhook: unknown, or pending and reported processing by the provider with
// no call in flight.
func (a Attempt) AwaitingResolution() bool {
	return a.Status == StatusUnknown ||
		(a.Status == StatusPending && a.ProviderState == "processing" && !a.CallInFlight())
}

const attemptColumns = `id, kind, subject_id, provider, operation, idempotency_key, reference,
	payload, payload_sha256, status, provider_state, provider_id, failure_code, failure_reason,
	call_count, calls_recorded, call_started_at, call_ended_at, next_send_at, last_error,
	key_expires_at, lookup_count, last_lookup_at, next_lookup_at, processing_since, review,
	review_reason, review_at, unknown_at, resolved_at, resolved_by, data, created_at, updated_at,
	acknowledged_at, acknowledgement, diverged_at, divergence, divergence_settled_at, divergence_settled_by,
	divergence_settlement, lookups_unanswered, unanswered_since, call_deadline_at, lookups_processing,
	processing_expected_by, divergence_kind`

// qualifiedAttemptColumns is attemptColumns of the table aliased a.
var qualifiedAttemptColumns = sqlcols.Qualify("a", attemptColumns)

func scanAttempt(row pgx.Row) (Attempt, error) {
	return scanAttemptAfter(row)
}

// scanAttemptAfter scans a row of the columns of before, then attemptColumns.
func scanAttemptAfter(row pgx.Row, before ...any) (Attempt, error) {
	var a Attempt
	var providerState, providerID, failureCode, failureReason, lastError, reviewReason, resolvedBy, ack, divergence,
		settledBy, settlement, divergenceKind *string
	var data []byte
	err := row.Scan(append(before, &a.ID, &a.Kind, &a.SubjectID, &a.Provider, &a.Operation, &a.IdempotencyKey, &a.Reference,
		&a.Payload, &a.PayloadSHA256, &a.Status, &providerState, &providerID, &failureCode, &failureReason,
		&a.CallCount, &a.CallsRecorded, &a.CallStartedAt, &a.CallEndedAt, &a.NextSendAt, &lastError,
		&a.KeyExpiresAt, &a.LookupCount, &a.LastLookupAt, &a.NextLookupAt, &a.ProcessingFrom, &a.Review,
		&reviewReason, &a.ReviewAt, &a.UnknownAt, &a.ResolvedAt, &resolvedBy, &data, &a.CreatedAt, &a.UpdatedAt,
		&a.AcknowledgedAt, &ack, &a.DivergedAt, &divergence, &a.DivergenceSettledAt, &settledBy, &settlement,
		&a.LookupsUnanswered, &a.UnansweredSince, &a.CallDeadlineAt, &a.LookupsProcessing, &a.ProcessingExpectedBy,
		&divergenceKind)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, ErrNotFound
	}
	if err != nil {
		return a, err
	}
	a.ProviderState = sqlcols.Deref(providerState)
	a.ProviderID = sqlcols.Deref(providerID)
	a.FailureCode = sqlcols.Deref(failureCode)
	a.FailureReason = sqlcols.Deref(failureReason)
	a.LastError = sqlcols.Deref(lastError)
	a.ReviewReason = sqlcols.Deref(reviewReason)
	a.ResolvedBy = sqlcols.Deref(resolvedBy)
	a.Acknowledgement = sqlcols.Deref(ack)
	a.Divergence = sqlcols.Deref(divergence)
	a.DivergenceKind = sqlcols.Deref(divergenceKind)
	a.DivergenceSettledBy, a.DivergenceSettlement = sqlcols.Deref(settledBy), sqlcols.Deref(settlement)
	if len(data) > 0 {
		a.Data = data
	}
	return a, nil
}

// Actor is who caused an event.
type Actor string

// Actors.
const (
	ActorOpener         Actor = "opener"
	ActorWorker         Actor = "worker"
	ActorWebhook        Actor = "webhook"
	ActorResolver       Actor = "resolver"
	ActorReconciliation Actor = "reconciliation"
	ActorOperator       Actor = "operator"
	ActorSweeper        Actor = "sweeper"
)

// EventType is the kind of an attempt event.
type EventType string

// Event types.
const (
	EventOpened     EventType = "opened"
	EventCall       EventType = "call"       // one Submit exchange
	EventLookup     EventType = "lookup"     // one Lookup exchange
	EventTransition EventType = "transition" // a status change
	EventProcessing EventType = "processing" // the provider reported processing
	EventReview     EventType = "review"     // flagged for human review
	EventNote       EventType = "note"       // anything else worth keeping
)

// Event is one append-only row of an attempt's history.
type Event struct {
	ID                int64
	AttemptID         uuid.UUID
	At                time.Time
	Type              EventType
	Actor             Actor
	ActorID           string
	FromStatus        Status
	ToStatus          Status
	Reason            string
	CallNumber        int
	StartedAt         *time.Time
	EndedAt           *time.Time
	Outcome           string
	StatusCode        int
	ProviderRequestID string
	WireCalls         int
	Error             string
	Evidence          json.RawMessage
}

const eventColumns = `id, attempt_id, at, type, actor, actor_id, from_status, to_status, reason,
	call_number, started_at, ended_at, outcome, status_code, provider_request_id, wire_calls, error, evidence`

func scanEvent(row pgx.Row) (Event, error) {
	var e Event
	var actorID, from, to, reason, outcome, reqID, errText *string
	var callNo, code, wire *int
	var evidence []byte
	if err := row.Scan(&e.ID, &e.AttemptID, &e.At, &e.Type, &e.Actor, &actorID, &from, &to, &reason,
		&callNo, &e.StartedAt, &e.EndedAt, &outcome, &code, &reqID, &wire, &errText, &evidence); err != nil {
		return e, err
	}
	e.ActorID, e.FromStatus, e.ToStatus, e.Reason = sqlcols.Deref(actorID), Status(sqlcols.Deref(from)), Status(sqlcols.Deref(to)), sqlcols.Deref(reason)
	e.Outcome, e.ProviderRequestID, e.Error = sqlcols.Deref(outcome), sqlcols.Deref(reqID), sqlcols.Deref(errText)
	if callNo != nil {
		e.CallNumber = *callNo
	}
	if code != nil {
		e.StatusCode = *code
	}
	if wire != nil {
		e.WireCalls = *wire
	}
	if len(evidence) > 0 {
		e.Evidence = evidence
	}
	return e, nil
}

// maxErrorText bounds error text stored in events and last_error.
const maxErrorText = 2000

func insertEvent(ctx context.Context, db DB, e Event) error {
	var evidence any
	if len(e.Evidence) > 0 {
		evidence = []byte(e.Evidence)
	}
	var callNo, code, wire *int
	if e.CallNumber > 0 {
		callNo = &e.CallNumber
	}
	if e.StatusCode > 0 {
		code = &e.StatusCode
	}
	if e.Type == EventCall || e.Type == EventLookup {
		wire = &e.WireCalls
	}
	_, err := db.Exec(ctx, `INSERT INTO attempt_events (attempt_id, at, type, actor, actor_id, from_status,
		to_status, reason, call_number, started_at, ended_at, outcome, status_code, provider_request_id,
		wire_calls, error, evidence)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17)`,
		e.AttemptID, e.At, e.Type, e.Actor, sqlcols.Nullable(e.ActorID), sqlcols.Nullable(string(e.FromStatus)),
		sqlcols.Nullable(string(e.ToStatus)), sqlcols.Nullable(e.Reason), callNo, e.StartedAt, e.EndedAt,
		sqlcols.Nullable(e.Outcome), code, sqlcols.Nullable(e.ProviderRequestID), wire,
		sqlcols.Nullable(pgtext.Truncate(e.Error, maxErrorText)), evidence)
	return err
}
