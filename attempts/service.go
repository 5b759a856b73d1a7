package attempts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/internal/dbfault"
	"github.com/saldo/saldo/internal/groupcommit"
	"github.com/saldo/saldo/internal/pgplan"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/providers"
)

// Clock tells the time. Every decision about time (backoff, key expiry,
// consistency windows, stale calls) reads it, so tests move time instead of
// sleeping.
type Clock interface{ Now() time.Time }

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Owner is the domain that owns attempts of a kind (payouts, charges). It is
// told exactly once, inside the transaction that records the transition,
// when an attempt reaches succeeded or failed; returning an error rolls the
// transition back (it will be retried by whoever made it).
type Owner interface {
	AttemptFinal(ctx context.Context, tx pgx.Tx, a Attempt) error
}

// DivergenceOwner is an Owner told, inside the transaction that records it,
// that the provider contradicted one of its final attempts (a divergence:
// lateConflict): succeeded after it was resolved failed (the money left
// although its owner was told failed), or failed after it succeeded (a
// reversal: a.Status is succeeded). The owner moves nothing (a human
// settles it, R9, R19); it tells whoever it told the first outcome (its
// notifications, R24). Returning an error rolls the record back.
type DivergenceOwner interface {
	Owner
	AttemptDiverged(ctx context.Context, tx pgx.Tx, a Attempt) error
}

// SubjectLocker is an Owner whose subject has a row that serializes its
// attempts' outcomes (a payout's row, R6, R9, R22): LockSubject locks it
// (FOR UPDATE) in tx. The transaction that records a divergence of a calls
// it after a's row (lock order: attempt, then subject, as every
// transaction that makes an attempt final and then moves its owner's
// row), before it holds a's unsent siblings (a second time) and runs the
// owner's hooks. So a concurrent transaction that makes another attempt
// of the subject final and decides from the subject's other attempts
// (opens a next one, releases the reserve) either committed before and is
// seen by the divergence's later statements (its next attempt held in
// review, its release held), or waits and then sees the divergence.
type SubjectLocker interface {
	Owner
	LockSubject(ctx context.Context, tx pgx.Tx, a Attempt) error
}

// HoldOwner is a DivergenceOwner that holds a merchant's money while a
// divergence of one of its attempts is open, when the divergence means the
// merchant's available balance overstates what it has (a payout paid after
// it was failed and its reserve released; a charge's credit the card
// network took back): R9, R19, R22. DivergenceHold adds the hold (available
// -> held, capped at what is available: ledger.Deferred.AddLocked) to
// postings, or nothing when the divergence's kind holds nothing; it runs in
// the transaction that records the divergence, a locked in it with its
// divergence recorded, after AttemptDiverged. The attempts core posts
// postings with every other ledger effect of the transaction in one
// PostMany (a record batch's: one lock order), or at once. Returning an
// error rolls the record back.
type HoldOwner interface {
	DivergenceOwner
	DivergenceHold(ctx context.Context, tx pgx.Tx, a Attempt, postings *ledger.Deferred) error
}

// HoldDecision is what an operator's settlement of a divergence does with
// the money its hold still holds (SettleDivergence).
type HoldDecision string

// Hold decisions.
const (
	// HoldNone: no decision; refused (ErrHoldUndecided) while the
	// divergence holds money.
	HoldNone HoldDecision = ""
	// HoldRelease gives the held money back to the merchant's available
	// balance (the money did not go: a dispute won, a return received).
	HoldRelease HoldDecision = "release"
	// HoldBook books the held money as gone: held -> the attempt's
	// provider clearing account (a payout paid twice, a dispute lost).
	HoldBook HoldDecision = "book"
)

// Valid reports whether d is one of the decisions.
func (d HoldDecision) Valid() bool { return d == HoldNone || d == HoldRelease || d == HoldBook }

// DivergenceSettleOwner is an Owner whose divergences may hold money
// (HoldOwner): SettleDivergenceHold runs in the settlement's transaction,
// a locked in it and not settled yet, and does with what a's hold still
// holds what the operator decided. It returns the settlement note's words
// on the hold (what was held, what was done), and an error matching
// ErrHoldUndecided (nothing done) when money is held and decision is
// HoldNone. A decision with nothing held moves nothing and says so.
type DivergenceSettleOwner interface {
	Owner
	SettleDivergenceHold(ctx context.Context, tx pgx.Tx, a Attempt, decision HoldDecision) (note string, err error)
}

// OwnerFunc adapts a function to Owner.
type OwnerFunc func(ctx context.Context, tx pgx.Tx, a Attempt) error

// AttemptFinal calls f.
func (f OwnerFunc) AttemptFinal(ctx context.Context, tx pgx.Tx, a Attempt) error {
	return f(ctx, tx, a)
}

// AmountOwner is an Owner that knows the amount and currency its attempts
// move (payouts, charges). When an attempt's owner is one, every provider
// report that names an amount or a currency (webhook, lookup, poll) must
// match them before it may move the attempt: a report that does not is
// flagged for review with an alert and moves nothing (issue 13 finding 4).
// AttemptAmount runs inside the transaction that applies the report, with
// the attempt row locked.
type AmountOwner interface {
	Owner
	AttemptAmount(ctx context.Context, db DB, a Attempt) (amount decimal.Decimal, currency string, err error)
}

// AmountsOwner is an AmountOwner that also reads the amounts and
// currencies of many attempts at once (one statement for a batch of
// lookups that found their operations, instead of one per attempt).
// AttemptAmounts runs inside the transaction that applies the reports,
// with the attempt rows locked; it answers every attempt of as.
type AmountsOwner interface {
	AmountOwner
	AttemptAmounts(ctx context.Context, db DB, as []Attempt) (map[uuid.UUID]OwnedAmount, error)
}

// OwnedAmount is the amount and currency an attempt moves (AmountsOwner).
type OwnedAmount struct {
	Amount   decimal.Decimal
	Currency string
}

// AmountsBySubject is AttemptAmounts for owners whose subjects are rows of
// one table: sql takes the attempts' subject ids ($1, text[]) and returns
// (id, amount, currency) rows; every attempt of as must have its row.
func AmountsBySubject(ctx context.Context, db DB, sql string, as []Attempt) (map[uuid.UUID]OwnedAmount, error) {
	ids := make([]string, len(as))
	for i, a := range as {
		ids[i] = a.SubjectID
	}
	rows, err := db.Query(ctx, sql, pgplan.PerCall, ids)
	if err != nil {
		return nil, err
	}
	bySubject := make(map[string]OwnedAmount, len(as))
	var id string
	var oa OwnedAmount
	if _, err := pgx.ForEachRow(rows, []any{&id, &oa.Amount, &oa.Currency}, func() error {
		bySubject[id] = oa
		return nil
	}); err != nil {
		return nil, err
	}
	out := make(map[uuid.UUID]OwnedAmount, len(as))
	for _, a := range as {
		oa, ok := bySubject[a.SubjectID]
		if !ok {
			return nil, fmt.Errorf("%s %s (attempt %s): %w", a.Kind, a.SubjectID, a.ID, pgx.ErrNoRows)
		}
		out[a.ID] = oa
	}
	return out, nil
}

// Config configures a Service. Pool and Providers are required.
type Config struct {
	// Pool is the database (also River's).
	Pool *pgxpool.Pool
	// Providers by name (providers.Provider.Name()).
	Providers map[string]providers.Provider
	// Clock defaults to SystemClock.
	Clock Clock
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// Metrics, optional (NewMetrics; register its Collectors yourself).
	Metrics *Metrics
	// River is the client used to enqueue jobs outside a worker. Optional:
	// when nil an insert-only client is built on Pool. SetRiverClient
	// replaces it. Inside a worker the job's own client is used.
	River *river.Client[pgx.Tx]
	// Queue for attempts jobs; default river.QueueDefault.
	Queue string

	// SendBackoffBase and SendBackoffMax bound the re-send backoff after not
	// sent / rate limited (exponential, with jitter). Defaults 1s and 5m.
	SendBackoffBase time.Duration
	SendBackoffMax  time.Duration
	// MaxSends is how many calls an attempt may start before it stops
	// re-sending and becomes unknown (resolved by lookup). Default 20.
	// Calls whose credentials the provider refused (OutcomeAuthRefused)
	// do not count: nothing was processed, and the attempt waits for an
	// operator, however long that takes (the key lifetime, R14, still
	// bounds it).
	MaxSends int
	// AuthRefusedWait is how long an attempt waits after the provider
	// refused saldo's credentials (401, 403) before the same request goes
	// out again (half-jittered: between half of it and all of it). An
	// operator must fix the key: re-sending at the rate-limit pace would
	// only hammer the provider with refused requests. Default 10m.
	AuthRefusedWait time.Duration
	// ResolveSchedule is the delay before each answered lookup of an
	// unknown attempt; the last one repeats (R15). Default 30s, 1m, 2m, 5m,
	// 10m, 30m. A lookup the provider did not answer (transport error,
	// 5xx, 429, unreadable) does not move the attempt along it: the next
	// lookup comes after the same step's delay again, or after the
	// provider's Retry-After when longer (capped at the schedule's longest
	// delay).
	ResolveSchedule []time.Duration
	// MaxLookups answered lookups that could not tell the outcome (not
	// found while that proves nothing yet) before an unresolved attempt
	// goes to review (R18). Default 60 (about a day with the default
	// schedule). Lookups that found the operation processing do not count
	// (Attempt.LookupsUndecided): the processing deadline bounds them.
	MaxLookups int
	// ProcessingReviewAfter: an attempt the provider keeps reporting as
	// processing for this long goes to review, unless the provider said it
	// expects the operation to end later (ProcessingExpectedMargin).
	// Default 24h.
	ProcessingReviewAfter time.Duration
	// ProcessingExpectedMargin: an attempt whose provider stated when it
	// expects the processing operation to end (a Stripe payout's arrival
	// date, a Pix cob's expiry: providers' ExpectedBy) goes to review only
	// once that date plus this margin has passed too (and never later
	// than MaxProcessingExpectedAfter after processing began, plus this
	// margin). Default 6h.
	ProcessingExpectedMargin time.Duration
	// UnansweredReviewAfter: an attempt whose lookups have gone unanswered
	// this long in a row (the provider's lookups down, or refusing saldo)
	// goes to review (R18). Default 24h.
	UnansweredReviewAfter time.Duration
	// StaleCallAfter: a pending attempt whose call started this long ago and
	// recorded nothing is turned unknown by the sweeper, and a lookup's
	// "not found" proves nothing before it has passed. Must exceed the
	// longest provider call: connect + TLS handshake + read per exchange,
	// and a Pix call may be up to four exchanges (saldo serve refuses
	// less). Default 5m.
	StaleCallAfter time.Duration
	// SweepInterval of the periodic sweeper. Default 1m.
	SweepInterval time.Duration
	// SweepBatch bounds how many attempts one sweep handles per step. Default 500.
	SweepBatch int
	// JobTimeout for submit and resolve jobs (must exceed a provider's
	// connect + read timeout). Default 2m.
	JobTimeout time.Duration
	// OnReview is called after an attempt is flagged for review (alert hook),
	// outside any transaction.
	OnReview func(a Attempt, reason string)
	// Breaker configures the circuit breakers per provider and operation
	// (BreakerConfig; the zero value turns them off).
	Breaker BreakerConfig
}

// DefaultProcessingExpectedMargin is Config.ProcessingExpectedMargin when
// zero: a payout expected on a day is late some hours after it, not at
// midnight.
const DefaultProcessingExpectedMargin = 6 * time.Hour

// MaxProcessingExpectedAfter caps the date a provider can give for the end
// of a processing operation (ExpectedBy): at most this long after the
// attempt was first reported processing. A bogus or far-future date (a
// provider's bug, a cob created with a year-long expiracao) thus delays
// the review of a stuck attempt, and the reserve it holds, by a month at
// most, never for ever (R18).
const MaxProcessingExpectedAfter = 30 * 24 * time.Hour

// DefaultJobTimeout bounds one submit or resolve job when Config.JobTimeout
// is zero; it must exceed a provider's connect + TLS + read timeouts.
const DefaultJobTimeout = 2 * time.Minute

// Service is the attempts core.
type Service struct {
	cfg       Config
	pool      *pgxpool.Pool
	clock     Clock
	log       *slog.Logger
	metrics   *Metrics
	providers map[string]providers.Provider
	// providerNames are the keys of providers (firstSendSQL's argument).
	providerNames []string

	mu     sync.RWMutex
	owners map[Kind]Owner

	river atomic.Pointer[river.Client[pgx.Tx]]

	// Group commit of Execute's phases (batch.go).
	firstSender *groupcommit.Batcher[uuid.UUID, Attempt]
	getter      *groupcommit.Batcher[uuid.UUID, Attempt]
	starter     *groupcommit.Batcher[startReq, bool]
	// results records calls' results and lookups' answers
	// (results_batch.go); recordStats and lookupStats count each kind.
	results                  *groupcommit.Batcher[resultReq, resultRes]
	recordStats, lookupStats kindStats
	sharedBatches            atomic.Int64
	// scheduleMicros is cfg.ResolveSchedule in microseconds, for
	// countLookupsSQL.
	scheduleMicros []int64

	// breakers hold the circuit of each provider and operation (breaker.go).
	breakers *breakers

	// hookAfterCall, when set (tests), runs after the provider call and
	// before its result is recorded; an error aborts Execute there, as a
	// crash would.
	hookAfterCall func(a Attempt) error
}

// New builds a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Pool == nil {
		return nil, fmt.Errorf("%w: Config.Pool is required", ErrInvalid)
	}
	if len(cfg.Providers) == 0 {
		return nil, fmt.Errorf("%w: Config.Providers is empty", ErrInvalid)
	}
	for name, p := range cfg.Providers {
		if p == nil || p.Name() != name {
			return nil, fmt.Errorf("%w: provider registered as %q must be non-nil and named %q", ErrInvalid, name, name)
		}
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Queue == "" {
		cfg.Queue = river.QueueDefault
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.SendBackoffBase, time.Second)
	def(&cfg.SendBackoffMax, 5*time.Minute)
	def(&cfg.AuthRefusedWait, 10*time.Minute)
	def(&cfg.ProcessingReviewAfter, 24*time.Hour)
	def(&cfg.ProcessingExpectedMargin, DefaultProcessingExpectedMargin)
	def(&cfg.UnansweredReviewAfter, 24*time.Hour)
	def(&cfg.StaleCallAfter, 5*time.Minute)
	def(&cfg.SweepInterval, time.Minute)
	def(&cfg.JobTimeout, DefaultJobTimeout)
	if cfg.MaxSends <= 0 {
		cfg.MaxSends = 20
	}
	if cfg.MaxLookups <= 0 {
		cfg.MaxLookups = 60
	}
	if cfg.SweepBatch <= 0 {
		cfg.SweepBatch = 500
	}
	if len(cfg.ResolveSchedule) == 0 {
		cfg.ResolveSchedule = []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute,
			5 * time.Minute, 10 * time.Minute, 30 * time.Minute}
	}
	for _, d := range cfg.ResolveSchedule {
		if d <= 0 {
			return nil, fmt.Errorf("%w: ResolveSchedule entries must be positive", ErrInvalid)
		}
	}
	s := &Service{cfg: cfg, pool: cfg.Pool, clock: cfg.Clock, log: cfg.Logger, metrics: cfg.Metrics,
		providers: cfg.Providers, owners: map[Kind]Owner{}}
	s.breakers = newBreakers(cfg.Breaker, cfg.Clock, cfg.Logger)
	s.newBatchers()
	if cfg.River != nil {
		s.river.Store(cfg.River)
	} else {
		c, err := river.NewClient(riverpgxv5.New(cfg.Pool), &river.Config{Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("attempts: insert-only river client: %w", err)
		}
		s.river.Store(c)
	}
	return s, nil
}

// SetRiverClient sets the client used to enqueue jobs outside workers (the
// process's working client, once built: it breaks the workers <-> client
// construction cycle).
func (s *Service) SetRiverClient(c *river.Client[pgx.Tx]) {
	if c != nil {
		s.river.Store(c)
	}
}

func (s *Service) riverClient(ctx context.Context) *river.Client[pgx.Tx] {
	if c, err := river.ClientFromContextSafely[pgx.Tx](ctx); err == nil {
		return c
	}
	return s.river.Load()
}

// RegisterOwner sets the owner of a kind. Registering a kind twice replaces
// the owner.
func (s *Service) RegisterOwner(kind Kind, o Owner) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.owners[kind] = o
}

func (s *Service) owner(kind Kind) Owner {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.owners[kind]
}

// Provider returns the registered provider by name.
func (s *Service) Provider(name string) (providers.Provider, bool) {
	p, ok := s.providers[name]
	return p, ok
}

func (k Kind) direction() string {
	if k == KindCardCharge || k == KindPixCharge {
		return "in"
	}
	return "out"
}

// NewReference returns a fresh external reference: a random UUID written as
// 32 lowercase hex characters, valid as a Stripe metadata value, a Pix txid
// (26-35), idEnvio and devolucao id (1-35).
func NewReference() string {
	u := uuid.New()
	return hex.EncodeToString(u[:])
}

// OpenParams describes a new attempt.
type OpenParams struct {
	Kind      Kind
	SubjectID string
	Provider  string
	Input     providers.OperationInput
	// SendAfter, when set, is the earliest time of the first call: the
	// attempt's next_send_at and its submit job's schedule (a payout's
	// next attempt after a transient failure waits out its backoff).
	SendAfter time.Time
}

// Open creates an attempt inside the caller's transaction (phase 1, R11):
// it makes the idempotency key and the reference before any I/O (R4, R13),
// encodes the payload once and stores the exact bytes with their sha256
// (R5), inserts the attempt as pending with an "opened" event, and enqueues
// SubmitAttempt with InsertTx in the same transaction.
//
// If the subject already has an open attempt, Open returns that attempt and
// an error matching ErrAttemptOpen, and leaves the caller's transaction
// usable (R8). If it already has a succeeded attempt it returns
// ErrSubjectSucceeded. Every call that opens makes a new key: a new attempt
// after a definitive failure never reuses the old key (R6, R7).
func (s *Service) Open(ctx context.Context, tx pgx.Tx, p OpenParams) (Attempt, error) {
	o, err := s.prepareOpen(p)
	if err != nil {
		return Attempt{}, err
	}
	for range 3 {
		a, inserted, err := s.tryOpen(ctx, tx, p, o.id, o.key, o.ref, o.payload, o.sum[:], o.keyExpires, o.now)
		if err != nil || inserted {
			return a, err
		}
		// The conflicting open attempt was resolved between our insert and
		// our read: try again.
	}
	return Attempt{}, fmt.Errorf("attempts: open %s %s: open attempt kept changing", p.Kind, p.SubjectID)
}

// opening is a new attempt's row as Open makes it before any I/O.
type opening struct {
	id         uuid.UUID
	key, ref   string
	payload    []byte
	sum        [32]byte
	keyExpires *time.Time
	now        time.Time
}

// prepareOpen validates p and makes the key, the reference and the payload
// bytes (R4, R5, R13).
func (s *Service) prepareOpen(p OpenParams) (opening, error) {
	if !p.Kind.Valid() {
		return opening{}, fmt.Errorf("%w: unknown kind %q", ErrInvalid, p.Kind)
	}
	if p.SubjectID == "" || len(p.SubjectID) > 200 {
		return opening{}, fmt.Errorf("%w: subject id must be 1-200 characters", ErrInvalid)
	}
	prov, ok := s.providers[p.Provider]
	if !ok {
		return opening{}, fmt.Errorf("%w: unknown provider %q", ErrInvalid, p.Provider)
	}
	op := p.Input.Operation
	if !op.Valid() || !p.Kind.Allows(op) {
		return opening{}, fmt.Errorf("%w: operation %q cannot realise a %s", ErrInvalid, op, p.Kind)
	}
	caps := prov.Capabilities()
	if !caps.Supports(op) {
		return opening{}, fmt.Errorf("%w: provider %s does not support %s", ErrInvalid, p.Provider, op)
	}
	o := opening{id: uuid.New(), key: uuid.NewString(), ref: NewReference(), now: s.clock.Now()}
	var err error
	if o.payload, err = prov.EncodePayload(p.Input, o.ref); err != nil {
		return opening{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	o.sum = sha256.Sum256(o.payload)
	if caps.IdempotencyKeys && caps.KeyLifetime > 0 {
		t := o.now.Add(caps.KeyLifetime)
		o.keyExpires = &t
	}
	return o, nil
}

func (s *Service) tryOpen(ctx context.Context, tx pgx.Tx, p OpenParams, id uuid.UUID, key, ref string,
	payload, sum []byte, keyExpires *time.Time, now time.Time) (Attempt, bool, error) {
	sp, err := tx.Begin(ctx) // a savepoint: whatever happens here leaves tx usable
	if err != nil {
		return Attempt{}, false, err
	}
	defer sp.Rollback(ctx) //nolint:errcheck // no-op after Commit

	var sendAfter *time.Time
	if p.SendAfter.After(now) {
		sendAfter = &p.SendAfter
	}
	row := sp.QueryRow(ctx, `INSERT INTO attempts (id, kind, subject_id, provider, operation,
		idempotency_key, reference, payload, payload_sha256, key_expires_at, next_send_at, created_at, updated_at)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$12,$11,$11)
		ON CONFLICT (direction, subject_id) WHERE status IN ('pending', 'unknown') DO NOTHING
		RETURNING `+attemptColumns,
		id, p.Kind, p.SubjectID, p.Provider, string(p.Input.Operation), key, ref, payload, sum, keyExpires, now, sendAfter)
	a, err := scanAttempt(row)
	if errors.Is(err, ErrNotFound) {
		if err := sp.Rollback(ctx); err != nil {
			return Attempt{}, false, err
		}
		open, err := scanAttempt(tx.QueryRow(ctx, `SELECT `+attemptColumns+` FROM attempts
			WHERE direction = $1 AND subject_id = $2 AND status IN ('pending', 'unknown')`,
			p.Kind.direction(), p.SubjectID))
		if errors.Is(err, ErrNotFound) {
			return Attempt{}, false, nil
		}
		if err != nil {
			return Attempt{}, false, err
		}
		return open, true, fmt.Errorf("%w: attempt %s (%s) for %s %s", ErrAttemptOpen, open.ID, open.Status, p.Kind, p.SubjectID)
	}
	if err != nil {
		return Attempt{}, false, fmt.Errorf("attempts: insert: %w", err)
	}
	// Checked after the insert: a concurrent transition to succeeded that
	// our insert waited for is visible to this new statement.
	var succeeded bool
	if err := sp.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM attempts WHERE direction = $1
		AND subject_id = $2 AND status = 'succeeded')`, p.Kind.direction(), p.SubjectID).Scan(&succeeded); err != nil {
		return Attempt{}, false, err
	}
	if succeeded {
		return Attempt{}, true, fmt.Errorf("%w: %s %s", ErrSubjectSucceeded, p.Kind, p.SubjectID)
	}
	if err := insertEvent(ctx, sp, Event{AttemptID: a.ID, At: now, Type: EventOpened, Actor: ActorOpener,
		ToStatus: StatusPending, Reason: fmt.Sprintf("opened %s via %s (key and reference made before any I/O)", a.Operation, a.Provider)}); err != nil {
		return Attempt{}, false, err
	}
	opts := s.submitOpts()
	if sendAfter != nil {
		opts.ScheduledAt = *sendAfter
	}
	if _, err := s.riverClient(ctx).InsertTx(ctx, sp, SubmitAttemptArgs{AttemptID: a.ID}, opts); err != nil {
		return Attempt{}, false, fmt.Errorf("attempts: enqueue submit: %w", err)
	}
	if err := sp.Commit(ctx); err != nil {
		return Attempt{}, false, err
	}
	s.log.DebugContext(ctx, "attempt opened (effective when the caller commits)", "attempt_id", a.ID, "kind", a.Kind, "subject_id", a.SubjectID,
		"provider", a.Provider, "reference", a.Reference)
	return a, true, nil
}

// Get reads one attempt.
func (s *Service) Get(ctx context.Context, db DB, id uuid.UUID) (Attempt, error) {
	return scanAttempt(db.QueryRow(ctx, `SELECT `+attemptColumns+` FROM attempts WHERE id = $1`, id))
}

// GetByReference reads one attempt by our external reference.
func (s *Service) GetByReference(ctx context.Context, db DB, reference string) (Attempt, error) {
	return scanAttempt(db.QueryRow(ctx, `SELECT `+attemptColumns+` FROM attempts WHERE reference = $1`, reference))
}

// ForSubject lists a subject's attempts, oldest first.
func (s *Service) ForSubject(ctx context.Context, db DB, subjectID string) ([]Attempt, error) {
	return queryAttempts(ctx, db, `SELECT `+attemptColumns+` FROM attempts WHERE subject_id = $1
		ORDER BY created_at, id`, subjectID)
}

// Events lists an attempt's events in the order they were written.
func (s *Service) Events(ctx context.Context, db DB, attemptID uuid.UUID) ([]Event, error) {
	rows, err := db.Query(ctx, `SELECT `+eventColumns+` FROM attempt_events WHERE attempt_id = $1 ORDER BY id`, attemptID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

func queryAttempts(ctx context.Context, db DB, sql string, args ...any) ([]Attempt, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Attempt
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// inTx runs fn in a short transaction on the pool and then the after-commit
// functions fn registered.
func (s *Service) inTx(ctx context.Context, fn func(tx pgx.Tx, after *afterCommit) error) error {
	return s.runTx(ctx, false, fn)
}

// inTxFinals is inTx for batches: the attempts transition makes final and
// whose owner is a BatchOwner, and those fn adds with after.final, are not
// handed to their owner one at a time but collected, and go to their
// owners together, with every ledger effect in one PostMany, as the
// transaction's last statements (finalTogether), once fn has returned. So
// the batch locks the merchants' accounts once, in id order, for as short
// a time as possible before COMMIT, and no batch can leave an attempt
// final without its owner's effect.
func (s *Service) inTxFinals(ctx context.Context, fn func(tx pgx.Tx, after *afterCommit) error) error {
	return s.runTx(ctx, true, fn)
}

// deadlockTries is how many times runTx runs a transaction PostgreSQL
// chose as a deadlock's victim (40P01).
const deadlockTries = 3

// runTx runs fn in a transaction, again (up to deadlockTries in all) when
// PostgreSQL aborted it as a deadlock's victim: nothing of it committed,
// and fn reads what it decides from inside its transaction (a closure
// keeps no state across tries but what it assigns). A divergence locks its
// subject's row after its attempt, then holds the subject's unsent
// siblings again (recordDivergence): a transaction that locked such a
// sibling in that instant and waits for the subject's row is a cycle,
// which PostgreSQL breaks by aborting one of the two; each is an attempts
// transaction and runs again here, instead of an error to a provider's
// webhook, a job or an operator (docs/pitfalls.md).
func (s *Service) runTx(ctx context.Context, collectFinals bool, fn func(tx pgx.Tx, after *afterCommit) error) error {
	for try := 1; ; try++ {
		err := s.runTxOnce(ctx, collectFinals, fn)
		if try >= deadlockTries || !dbfault.Deadlock(err) || ctx.Err() != nil {
			return err
		}
		s.log.WarnContext(ctx, "attempts: transaction aborted by a deadlock; running it again", "try", try, "error", err)
	}
}

func (s *Service) runTxOnce(ctx context.Context, collectFinals bool, fn func(tx pgx.Tx, after *afterCommit) error) error {
	var after afterCommit
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		after = afterCommit{collectFinals: collectFinals}
		if err := fn(tx, &after); err != nil {
			return err
		}
		if !collectFinals {
			return nil
		}
		if err := s.finalTogether(ctx, tx, after.finals, after.holds); err != nil {
			return err
		}
		// From here on a divergence's hold is posted at once.
		after.collectFinals = false
		// After the owners credited them: a chargeback reported while a
		// charge's attempt was open becomes its dispute divergence now.
		if err := s.disputesAfterSuccess(ctx, tx, &after, after.finals); err != nil {
			return err
		}
		// And a second operation reported while one was open, its
		// divergence (NoteSecondOperation).
		return s.secondOperationsAfterFinal(ctx, tx, &after, after.finals)
	})
	if err != nil {
		return err
	}
	for _, f := range after.fns {
		f()
	}
	return nil
}

// afterCommit is what a transaction leaves for after its COMMIT, and, in
// inTxFinals, for its last statements.
type afterCommit struct {
	fns []func()
	// collectFinals: the transaction is an inTxFinals one; finals are the
	// final attempts its BatchOwners get at its end.
	collectFinals bool
	finals        []Attempt
	// holds are the attempts whose divergence this inTxFinals transaction
	// recorded before its owners' effects: their HoldOwner's holds go into
	// the same PostMany (finalTogether).
	holds []Attempt
}

// final adds a to the attempts handed to their owners at the end of an
// inTxFinals transaction.
func (a *afterCommit) final(at Attempt) { a.finals = append(a.finals, at) }

func (a *afterCommit) add(f func()) { a.fns = append(a.fns, f) }

func lockAttempt(ctx context.Context, tx pgx.Tx, id uuid.UUID) (Attempt, error) {
	return scanAttempt(tx.QueryRow(ctx, `SELECT `+attemptColumns+` FROM attempts WHERE id = $1 FOR UPDATE`, id))
}

// backoff is exponential from base, capped, with "equal jitter": half the
// delay fixed, half random, so synchronized retries spread out.
func backoff(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}

// firstLookupDelay is how long after an attempt goes unknown, or is first
// reported processing, its first lookup comes (R15). The delays after each
// lookup are countLookupsSQL's.
func (s *Service) firstLookupDelay() time.Duration {
	return s.cfg.ResolveSchedule[0]
}
