// Package payouts moves money out of the platform: bank payouts, Pix
// transfers, refunds and split payouts (docs/rules.md R21-R23).
//
// The rule that defines it: the merchant's available balance is debited into
// a reserve in the SAME database transaction that opens the attempt; the
// reserve moves to the provider's clearing account when the attempt
// succeeds, and back to available only when it is resolved failed. An
// unknown attempt holds its reserve, so it can never free money for a second
// operation (R22). The no-overdraft rule is the ledger's CHECK on the
// available account, evaluated under the account row lock, so however many
// payouts race, the balance never goes negative (R23).
//
// A payout is the intent; each conversation with the provider is an attempt
// (package attempts) whose subject is the payout id. When an attempt reaches
// a final status the attempts core calls AttemptFinal inside its transition
// transaction, and the ledger effect (settle or release) commits with it.
package payouts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/saldo/saldo/internal/groupcommit"
	"github.com/saldo/saldo/internal/intent"
	"github.com/saldo/saldo/internal/keyset"
	"github.com/saldo/saldo/ledger"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/sqlcols"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers"
)

// Errors. Match with errors.Is. Validation errors are *FieldError and match
// ErrInvalid.
var (
	// ErrNotFound: no such payout (or not the caller's merchant's).
	ErrNotFound = errors.New("payouts: not found")
	// ErrIdempotencyConflict: the client key was used before with a
	// different request. Nothing was written.
	ErrIdempotencyConflict = errors.New("payouts: client key reused with a different request")
	// ErrNotRetryable: only a payout whose last attempt failed definitively
	// may be retried.
	ErrNotRetryable = errors.New("payouts: payout is not in a retryable state")
	// ErrUnknownMerchant: the merchant does not exist.
	ErrUnknownMerchant = errors.New("payouts: unknown merchant")
)

// Status is what a caller sees.
type Status string

// Statuses (R24): processing covers a pending or unknown attempt.
const (
	StatusProcessing Status = "processing"
	StatusSucceeded  Status = "succeeded"
	StatusFailed     Status = "failed"
)

// Kind of a payout; it is also the attempts kind of its attempts.
type Kind = attempts.Kind

// Clock tells the time (tests move it).
type Clock interface{ Now() time.Time }

// Config configures a Service.
type Config struct {
	Pool     *pgxpool.Pool
	Attempts *attempts.Service
	// Provider is the name of the provider outgoing money goes through
	// when Routes names none for its operation.
	Provider string
	// Routes names the provider of each operation (providers.Routes); an
	// operation without a route goes to Provider. Refunds go to their
	// charge's provider whatever the routes say.
	Routes providers.Routes
	Clock  Clock
	Logger *slog.Logger
	// OnFinal, optional, is called inside the transaction that records a
	// payout attempt's final status, after the payout row was updated, with
	// the payout as it now stands. It is the notification hook (R24): insert
	// a job with River's InsertTx on tx so the notice commits with the
	// status. Returning an error rolls the transition back.
	OnFinal func(ctx context.Context, tx pgx.Tx, p Payout) error
	// OnFinalMany, optional, is OnFinal for the payouts made final together
	// (the attempts core records concurrent calls in one transaction): when
	// set it is called once for them instead of OnFinal for each, and must
	// do for each what OnFinal does. Set alone, it also serves the payouts
	// made final one at a time.
	OnFinalMany func(ctx context.Context, tx pgx.Tx, ps []Payout) error
	// OnDiverged, optional, is called inside the transaction that records
	// a divergence on attempt a of payout p: the provider paid it after
	// saldo resolved it failed (the merchant was told failed, or a
	// successor is held: the money left), or failed it after it succeeded
	// (a reversal: the money came back); the notification hook says so.
	// Returning an error rolls the record back.
	OnDiverged func(ctx context.Context, tx pgx.Tx, p Payout, a attempts.Attempt) error
	// Charges, optional, enables refunds of its charges.
	Charges *charges.Service
	// Retry opens a payout's next attempt by itself after a transient
	// failure, the reserve held (RetryPolicy). The zero value never retries.
	Retry RetryPolicy
}

// Service creates payouts and owns their ledger effects.
type Service struct {
	pool      *pgxpool.Pool
	attempts  *attempts.Service
	provider  string           // default provider
	routes    providers.Routes // provider by operation, over provider
	clock     Clock
	log       *slog.Logger
	onFinal   func(ctx context.Context, tx pgx.Tx, p Payout) error
	onFinals  func(ctx context.Context, tx pgx.Tx, ps []Payout) error
	onDiverge func(ctx context.Context, tx pgx.Tx, p Payout, a attempts.Attempt) error
	accounts  accountCache
	merchants sync.Map // merchant id -> true, once seen
	charges   *charges.Service
	retry     RetryPolicy
	// creator group-commits CreatePayout (batch.go).
	creator *groupcommit.Batcher[createReq, Payout]
}

// New builds a Service and registers it as the owner of the outgoing
// attempt kinds (payout, pix_transfer, split_leg, and refund when
// Config.Charges is set).
func New(cfg Config) (*Service, error) {
	if cfg.Pool == nil || cfg.Attempts == nil {
		return nil, errors.New("payouts: Config.Pool and Config.Attempts are required")
	}
	for _, op := range payoutOperations {
		name := providerFor(cfg.Routes, cfg.Provider, op)
		if name == "" {
			continue // refused at request time: no provider takes op
		}
		p, ok := cfg.Attempts.Provider(name)
		if !ok {
			return nil, fmt.Errorf("payouts: provider %q (%s) is not registered with attempts", name, op)
		}
		if !p.Capabilities().Supports(op) {
			if _, routed := cfg.Routes.Provider(op); !routed && op == providers.OpAccountTransfer {
				// Only a provider holding accounts (Stripe Connect) takes
				// it; unrouted, it is refused at request time.
				continue
			}
			return nil, fmt.Errorf("payouts: provider %q does not support %s", name, op)
		}
	}
	if cfg.Clock == nil {
		cfg.Clock = attempts.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{pool: cfg.Pool, attempts: cfg.Attempts, provider: cfg.Provider, routes: cfg.Routes,
		clock: cfg.Clock, log: cfg.Logger,
		onFinal: cfg.OnFinal, onFinals: cfg.OnFinalMany, onDiverge: cfg.OnDiverged, charges: cfg.Charges, retry: cfg.Retry}
	// Linger: the callers that just got their payouts usually ask again
	// within it, so the next opening transaction carries them together (at 8
	// concurrent callers, 7.8 payouts per transaction instead of 4.0, and
	// +30-40% payouts/s), for at most half a millisecond of latency.
	s.creator = groupcommit.New(groupcommit.Options{Name: "payouts_open", MaxBatch: 64, Flushers: 1,
		Linger: 500 * time.Microsecond}, s.createMany)
	kinds := []attempts.Kind{attempts.KindPayout, attempts.KindPixTransfer, attempts.KindSplitLeg}
	if cfg.Charges != nil {
		kinds = append(kinds, attempts.KindRefund)
	}
	for _, k := range kinds {
		cfg.Attempts.RegisterOwner(k, s)
	}
	return s, nil
}

// Payout is an outgoing money intent as a caller sees it.
type Payout struct {
	ID               string                 `json:"id"`
	MerchantID       string                 `json:"merchant_id"`
	Kind             Kind                   `json:"kind"`
	Operation        providers.Operation    `json:"operation"`
	Provider         string                 `json:"provider"`
	Amount           money.Amount           `json:"amount"`
	Destination      *providers.Destination `json:"destination,omitempty"`
	Description      string                 `json:"description,omitempty"`
	Metadata         map[string]string      `json:"metadata,omitempty"`
	ChargeID         string                 `json:"charge_id,omitempty"`
	SplitID          string                 `json:"split_id,omitempty"`
	LegIndex         *int                   `json:"leg_index,omitempty"`
	Status           Status                 `json:"status"`
	FailureCode      string                 `json:"failure_code,omitempty"`
	FailureReason    string                 `json:"failure_reason,omitempty"`
	CurrentAttemptID *uuid.UUID             `json:"current_attempt_id,omitempty"`
	AttemptCount     int                    `json:"attempt_count"`
	CreatedAt        time.Time              `json:"created_at"`
	UpdatedAt        time.Time              `json:"updated_at"`
}

// PayoutRequest asks for one bank payout or Pix transfer.
type PayoutRequest struct {
	MerchantID string
	// ClientKey makes creation idempotent for the caller: the same key with
	// the same request returns the same payout; with a different request,
	// ErrIdempotencyConflict. Optional at this level (the HTTP API requires it).
	ClientKey   string
	Operation   providers.Operation // pix_transfer, bank_payout or account_transfer
	Amount      money.Amount
	Destination *providers.Destination
	Description string
	Metadata    map[string]string
}

func (r PayoutRequest) kind() Kind {
	if r.Operation == providers.OpBankPayout || r.Operation == providers.OpAccountTransfer {
		return attempts.KindPayout
	}
	return attempts.KindPixTransfer
}

func validateCommon(amount money.Amount, description string, metadata map[string]string) error {
	if !amount.IsValid() {
		return invalid("amount", "required")
	}
	if !amount.IsPositive() {
		return invalid("amount", "must be greater than zero")
	}
	if chars(description) > MaxDescription {
		return invalid("description", "longer than %d characters", MaxDescription)
	}
	if len(metadata) > 20 {
		return invalid("metadata", "at most 20 keys")
	}
	for k, v := range metadata {
		if k == "" || chars(k) > 40 || chars(v) > 500 {
			return invalid("metadata", "keys 1-40 characters, values up to 500")
		}
	}
	return nil
}

// CreatePayout validates the request and, in ONE database transaction,
// inserts the payout, opens its first attempt, reserves the amount from the
// merchant's available balance and enqueues the submit job (R11, R22).
// Insufficient balance returns an error matching ledger.ErrInsufficientFunds
// and writes nothing.
//
// Concurrent calls share that transaction (group commit, batch.go); each
// gets the answer it would have got alone. If ctx ends while the shared
// transaction is being written, CreatePayout returns ctx's error and the
// payout may or may not exist: call again with the same ClientKey to learn
// which (the same request returns the payout made).
func (s *Service) CreatePayout(ctx context.Context, req PayoutRequest) (Payout, error) {
	r, err := s.prepareCreate(ctx, req)
	if err == nil {
		err = s.readyCreate(ctx, r)
	}
	if err != nil {
		if r.hash == nil {
			return Payout{}, err // refused by its shape, which no repeat of an accepted request has
		}
		// The balance its own reserve took, the routes or a provider's
		// encoding may have changed since a first request with this key.
		return answerFromKey(ctx, s, req.MerchantID, req.ClientKey, r.hash, "payout", err, s.get)
	}
	return s.creator.Do(ctx, r)
}

// answerFromKey answers a create refused before its transaction (refusal)
// for something that may have changed since a first request with the same
// client key was accepted (R4): what that request created, read by get,
// when the key holds the same request; ErrIdempotencyConflict when it holds
// another; else the refusal. Asked only on a refusal, so an accepted
// request costs no extra statement; a repeat that passes the checks is
// answered by the claim, the first statement of the opening transaction.
func answerFromKey[T any](ctx context.Context, s *Service, merchantID, key string, hash []byte, kind string, refusal error,
	get func(context.Context, dbtx, string, string) (T, error)) (T, error) {
	var zero T
	existing, err := s.replayClientKey(ctx, s.pool, merchantID, key, hash, kind)
	if err != nil {
		return zero, err
	}
	if existing != "" {
		return get(ctx, s.pool, merchantID, existing)
	}
	return zero, refusal
}

// prepareCreate validates a CreatePayout request (its shape, route and
// encoding: nothing that depends on the merchant's state). A request refused
// by its route or encoding, which configuration may change between a
// request and its repeat, comes back with its hash, so that its key can
// answer it; one refused by its shape, without.
func (s *Service) prepareCreate(ctx context.Context, req PayoutRequest) (createReq, error) {
	if !payoutOperation(req.Operation) {
		return createReq{}, invalid("operation", "must be pix_transfer, bank_payout or account_transfer")
	}
	if !req.kind().Allows(req.Operation) {
		return createReq{}, invalid("operation", "%s cannot realise a %s here", req.Operation, req.kind())
	}
	if err := validateCommon(req.Amount, req.Description, req.Metadata); err != nil {
		return createReq{}, err
	}
	dest, err := ValidateDestination(req.Operation, req.Destination)
	if err != nil {
		return createReq{}, err
	}
	req.Destination = dest
	if err := checkClientKey(req.ClientKey); err != nil {
		return createReq{}, err
	}
	if err := checkCurrency("currency", req.Operation, dest, req.Amount.Currency()); err != nil {
		return createReq{}, err
	}
	hash := intent.RequestHash("payout", req.Operation, req.Amount.String(), req.Amount.Currency().Code(), dest, req.Description, req.Metadata)
	provider, err := s.providerFor("", req.Operation, dest)
	if err != nil {
		return createReq{req: req, hash: hash}, err
	}
	if err := s.checkEncodable(provider, operationInput(&Payout{ID: "po_check", MerchantID: req.MerchantID,
		Operation: req.Operation, Amount: req.Amount, Destination: dest, Description: req.Description})); err != nil {
		return createReq{req: req, hash: hash}, err
	}
	return createReq{req: req, hash: hash, provider: provider}, nil
}

// readyCreate makes sure a prepared request's merchant and accounts exist,
// before it joins a batch.
func (s *Service) readyCreate(ctx context.Context, r createReq) error {
	if err := s.requireMerchant(ctx, r.req.MerchantID); err != nil {
		return err
	}
	// Nothing is written before this point; a merchant that never held
	// money in the currency is refused before its accounts would be made.
	if err := s.requireFunded(ctx, r.req.MerchantID, r.req.Amount.Currency(), &r.req.Amount); err != nil {
		return err
	}
	return s.prepareAccounts(ctx, r.req.MerchantID, r.provider, r.req.Amount.Currency())
}

// AttemptDiverged implements attempts.DivergenceOwner: the payout as it
// stands goes to OnDiverged (its notification), in the divergence's
// transaction; nothing moves.
func (s *Service) AttemptDiverged(ctx context.Context, tx pgx.Tx, a attempts.Attempt) error {
	if s.onDiverge == nil {
		return nil
	}
	p, err := s.get(ctx, tx, "", a.SubjectID)
	if err != nil {
		return fmt.Errorf("payouts: payout %s of diverged attempt %s: %w", a.SubjectID, a.ID, err)
	}
	return s.onDiverge(ctx, tx, p, a)
}

var _ attempts.DivergenceOwner = (*Service)(nil)

// anyDiverged reports whether the provider reported any attempt of payout
// id paid after it was resolved failed (a divergence, settled or not): the
// money left, and no new attempt may be opened for it (R6, R9).
func anyDiverged(ctx context.Context, tx pgx.Tx, id string) (bool, error) {
	var diverged bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM attempts
		WHERE direction = 'out' AND subject_id = $1 AND diverged_at IS NOT NULL)`, id).Scan(&diverged)
	return diverged, err
}

// Retry opens a new attempt, with a NEW key, for a payout whose last attempt
// failed definitively (R6), reserving the amount again in the same
// transaction. It fails with ErrNotRetryable unless the payout is failed,
// and when the provider reported any attempt of it paid after it was
// resolved failed (a divergence).
func (s *Service) Retry(ctx context.Context, merchantID, payoutID string) (Payout, error) {
	return s.RetryWith(ctx, merchantID, payoutID, nil)
}

// RetryWith is Retry with also run inside the retry's transaction, after
// the new attempt is opened and reserved and before its COMMIT, with the
// payout as it then is: what also writes in tx commits with the retry, and
// an error from it rolls the retry back and is returned as it is. The
// caller records there what must commit with the retry and never without
// it (the API's idempotent answer, R4, R5: a retry has no client key of its
// own below the API). A nil also is Retry.
func (s *Service) RetryWith(ctx context.Context, merchantID, payoutID string,
	also func(ctx context.Context, tx pgx.Tx, p Payout) error) (Payout, error) {
	var out Payout
	before := -1        // the payout's attempt count when this retry opened one
	committing := false // the transaction's work is done: an error now is its COMMIT's
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		p, err := s.getForUpdate(ctx, tx, merchantID, payoutID)
		if err != nil {
			return err
		}
		if p.Status != StatusFailed {
			return fmt.Errorf("%w: payout %s is %s", ErrNotRetryable, p.ID, p.Status)
		}
		// A failed attempt the provider later reported paid (a divergence,
		// settled or not) is no definitive failure (R6): the money left.
		// A new attempt would pay the recipient twice.
		diverged, err := anyDiverged(ctx, tx, p.ID)
		if err != nil {
			return err
		}
		if diverged {
			return fmt.Errorf("%w: payout %s: the provider reported an attempt of it paid after it was resolved failed (a divergence for review); a new attempt could pay twice",
				ErrNotRetryable, p.ID)
		}
		in := operationInput(&p)
		if p.Kind == attempts.KindRefund {
			if in, err = s.retryRefundInput(ctx, tx, &p); err != nil {
				return err
			}
		}
		before = p.AttemptCount
		if err := s.openAttempt(ctx, tx, &p, in); err != nil {
			return err
		}
		if also != nil {
			if err := also(ctx, tx, p); err != nil {
				return err
			}
		}
		out, committing = p, true
		return nil
	})
	if err != nil && committing {
		// An error from the COMMIT of the opened attempt may mean it
		// committed (a lost COMMIT answer): the retry that did is the
		// answer, not a 409 not_retryable for the caller who asks again
		// (R22). An error before it rolled everything back: an attempt
		// counted now is another retry's (one that waited for our lock).
		if p, gerr := s.get(context.WithoutCancel(ctx), s.pool, merchantID, payoutID); gerr == nil && p.AttemptCount > before {
			s.log.WarnContext(ctx, "payouts: a retry's transaction answered an error but committed; answering what it made",
				"payout_id", payoutID, "error", err)
			return p, nil
		}
	}
	return out, err
}

// operationInput is what the provider is asked to do for p.
func operationInput(p *Payout) providers.OperationInput {
	return providers.OperationInput{
		Operation:   p.Operation,
		Amount:      p.Amount.Format(),
		Currency:    p.Amount.Currency().Code(),
		Destination: p.Destination,
		Description: p.Description,
		Metadata:    map[string]string{"saldo_payout_id": p.ID, "saldo_merchant_id": p.MerchantID},
	}
}

// open opens p's next attempt in tx (key, reference, payload, submit job).
func (s *Service) open(ctx context.Context, tx pgx.Tx, p *Payout, in providers.OperationInput) (attempts.Attempt, error) {
	a, err := s.attempts.Open(ctx, tx, attempts.OpenParams{Kind: p.Kind, SubjectID: p.ID, Provider: p.Provider, Input: in})
	if errors.Is(err, attempts.ErrInvalid) {
		return a, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return a, err
}

// insertWithAttempt creates a new payout inside tx: its first attempt, the
// payout row pointing at it, and the reserve (R22). The reserve comes last:
// it locks the merchant's balance rows, which should be held for as short a
// time as possible before COMMIT.
func (s *Service) insertWithAttempt(ctx context.Context, tx pgx.Tx, p *Payout, in providers.OperationInput) error {
	a, err := s.open(ctx, tx, p, in)
	if err != nil {
		return err
	}
	p.CurrentAttemptID, p.AttemptCount = &a.ID, 1
	if err := s.insertPayout(ctx, tx, p); err != nil {
		return err
	}
	return s.reserve(ctx, tx, *p, a.ID)
}

// openAttempt opens a failed payout's next attempt, records it as current
// and reserves its amount again, inside tx. p is updated in place.
func (s *Service) openAttempt(ctx context.Context, tx pgx.Tx, p *Payout, in providers.OperationInput) error {
	a, err := s.open(ctx, tx, p, in)
	if err != nil {
		return err
	}
	now := s.clock.Now()
	p.Status, p.FailureCode, p.FailureReason = StatusProcessing, "", ""
	p.CurrentAttemptID = &a.ID
	p.AttemptCount++
	p.UpdatedAt = now
	if _, err := tx.Exec(ctx, `UPDATE payouts SET status = 'processing', failure_code = NULL, failure_reason = NULL,
		current_attempt_id = $2, attempt_count = attempt_count + 1, updated_at = $3 WHERE id = $1`, p.ID, a.ID, now); err != nil {
		return err
	}
	return s.reserve(ctx, tx, *p, a.ID)
}

// AttemptFinal is called by the attempts core inside the transaction that
// moves an attempt to succeeded or failed: settle the reserve on success,
// release it on failure (or carry it to the payout's next attempt, under
// the RetryPolicy), and update the payout the caller sees. Exactly once per
// attempt (the transition is conditional), and the ledger keys make a
// repeat harmless anyway. It is AttemptsFinal for one attempt, its ledger
// transactions posted at once: one place decides a final attempt's effects.
func (s *Service) AttemptFinal(ctx context.Context, tx pgx.Tx, a attempts.Attempt) error {
	var postings ledger.Deferred
	if err := s.AttemptsFinal(ctx, tx, []attempts.Attempt{a}, &postings); err != nil {
		return err
	}
	return postings.Post(ctx, tx)
}

// inTx runs f in a transaction, committing when it returns nil.
func (s *Service) inTx(ctx context.Context, f func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, f)
}

// maxClientKey is the longest client key (Idempotency-Key) a create takes.
const maxClientKey = 255

// checkClientKey refuses a client key longer than maxClientKey, before
// anything is written or looked up.
func checkClientKey(key string) error {
	if len(key) > maxClientKey {
		return invalid("client_key", "longer than %d characters", maxClientKey)
	}
	return nil
}

// claimClientKey records (merchant, key, hash) or finds what the key
// created before. It returns the existing object id when the same request
// was made before, ErrIdempotencyConflict for a different request, and ""
// when the caller should create. A concurrent creator with the same key
// blocks on the row until the first commits (then sees it) or rolls back
// (then creates).
func (s *Service) claimClientKey(ctx context.Context, tx pgx.Tx, merchantID, key string, hash []byte, kind, newID string) (string, error) {
	if key == "" {
		return "", nil
	}
	if err := checkClientKey(key); err != nil {
		return "", err
	}
	tag, err := tx.Exec(ctx, `INSERT INTO payout_requests (merchant_id, client_key, request_hash, object_kind, object_id, created_at)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`, merchantID, key, hash, kind, newID, s.clock.Now())
	if err != nil {
		return "", err
	}
	if tag.RowsAffected() == 1 {
		return "", nil
	}
	objectID, err := s.replayClientKey(ctx, tx, merchantID, key, hash, kind)
	if err == nil && objectID == "" {
		err = fmt.Errorf("payouts: client key %q conflicted but its row is not visible", key)
	}
	return objectID, err
}

// replayClientKey finds what an earlier request with this client key
// created: its object id when the request was the same, "" when the key
// was never used, ErrIdempotencyConflict for another request. Create paths
// ask it (answerFromKey) when a check that depends on the merchant's state
// or on configuration (balance, routing) refuses: a repeat of a request
// that was accepted must get what it created, even though the first
// request's own reserve has since taken the balance it was checked against
// (a retry after a 503 on another process, whose account cache is empty).
// The claim in the opening transaction stays what settles races.
func (s *Service) replayClientKey(ctx context.Context, db dbtx, merchantID, key string, hash []byte, kind string) (string, error) {
	if key == "" {
		return "", nil
	}
	if err := checkClientKey(key); err != nil {
		return "", err
	}
	var prevHash []byte
	var prevKind, objectID string
	err := db.QueryRow(ctx, `SELECT request_hash, object_kind, object_id FROM payout_requests
		WHERE merchant_id = $1 AND client_key = $2`, merchantID, key).Scan(&prevHash, &prevKind, &objectID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if prevKind != kind || !bytes.Equal(prevHash, hash) {
		return "", fmt.Errorf("%w (key %q)", ErrIdempotencyConflict, key)
	}
	return objectID, nil
}

// requireMerchant checks the merchant exists (merchants are never deleted,
// so a merchant seen once is remembered).
func (s *Service) requireMerchant(ctx context.Context, merchantID string) error {
	if _, ok := s.merchants.Load(merchantID); ok {
		return nil
	}
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM merchants WHERE id = $1)`, merchantID).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownMerchant, merchantID)
	}
	s.merchants.Store(merchantID, true)
	return nil
}

func (s *Service) insertPayout(ctx context.Context, tx pgx.Tx, p *Payout) error {
	now := s.clock.Now()
	p.CreatedAt, p.UpdatedAt = now, now
	dest, err := json.Marshal(p.Destination)
	if err != nil {
		return err
	}
	if p.Destination == nil {
		dest = nil
	}
	meta, err := json.Marshal(sqlcols.OrEmpty(p.Metadata))
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO payouts (id, merchant_id, kind, operation, provider, amount, currency,
		destination, description, metadata, charge_id, split_id, leg_index, status, current_attempt_id, attempt_count,
		created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 'processing', $15, $16, $14, $14)`,
		p.ID, p.MerchantID, p.Kind, p.Operation, p.Provider, p.Amount.Decimal(), p.Amount.Currency().Code(),
		dest, sqlcols.Nullable(p.Description), meta, sqlcols.Nullable(p.ChargeID), sqlcols.Nullable(p.SplitID), p.LegIndex, now, p.CurrentAttemptID, p.AttemptCount)
	return err
}

const payoutColumns = `id, merchant_id, kind, operation, provider, amount, currency, destination, description,
	metadata, charge_id, split_id, leg_index, status, failure_code, failure_reason, current_attempt_id,
	attempt_count, created_at, updated_at`

func scanPayout(row pgx.Row) (Payout, error) {
	return scanPayoutAfter(row)
}

// scanPayoutAfter scans a row of the columns of before, then payoutColumns.
func scanPayoutAfter(row pgx.Row, before ...any) (Payout, error) {
	var p Payout
	var amount decimal.Decimal
	var currency string
	var dest, meta []byte
	var description, chargeID, splitID, failureCode, failureReason *string
	err := row.Scan(append(before, &p.ID, &p.MerchantID, &p.Kind, &p.Operation, &p.Provider, &amount, &currency, &dest,
		&description, &meta, &chargeID, &splitID, &p.LegIndex, &p.Status, &failureCode, &failureReason,
		&p.CurrentAttemptID, &p.AttemptCount, &p.CreatedAt, &p.UpdatedAt)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, ErrNotFound
	}
	if err != nil {
		return p, err
	}
	if p.Amount, err = toAmount(amount, currency); err != nil {
		return p, fmt.Errorf("payouts: stored amount of %s: %w", p.ID, err)
	}
	if len(dest) > 0 && string(dest) != "null" {
		p.Destination = new(providers.Destination)
		if err := json.Unmarshal(dest, p.Destination); err != nil {
			return p, err
		}
	}
	if len(meta) > 0 {
		if err := json.Unmarshal(meta, &p.Metadata); err != nil {
			return p, err
		}
		if len(p.Metadata) == 0 {
			p.Metadata = nil
		}
	}
	p.Description, p.ChargeID, p.SplitID = sqlcols.Deref(description), sqlcols.Deref(chargeID), sqlcols.Deref(splitID)
	p.FailureCode, p.FailureReason = sqlcols.Deref(failureCode), sqlcols.Deref(failureReason)
	return p, nil
}

// get reads a payout; merchantID "" skips the ownership filter (internal use).
func (s *Service) get(ctx context.Context, db dbtx, merchantID, id string) (Payout, error) {
	return scanPayout(db.QueryRow(ctx, `SELECT `+payoutColumns+` FROM payouts
		WHERE id = $1 AND ($2 = '' OR merchant_id = $2)`, id, merchantID))
}

func (s *Service) getForUpdate(ctx context.Context, tx pgx.Tx, merchantID, id string) (Payout, error) {
	return scanPayout(tx.QueryRow(ctx, `SELECT `+payoutColumns+` FROM payouts
		WHERE id = $1 AND ($2 = '' OR merchant_id = $2) FOR UPDATE`, id, merchantID))
}

type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// View is a payout with its attempt timeline, for callers polling a
// processing payout (R24).
type View struct {
	Payout
	// NeedsAttention: the current attempt is in the human review queue.
	NeedsAttention bool          `json:"needs_attention"`
	Attempts       []AttemptView `json:"attempts"`
}

// AttemptView is one attempt as a caller sees it.
type AttemptView struct {
	ID            uuid.UUID        `json:"id"`
	Status        attempts.Status  `json:"status"`
	Reference     string           `json:"reference"`
	ProviderID    string           `json:"provider_id,omitempty"`
	FailureCode   string           `json:"failure_code,omitempty"`
	FailureReason string           `json:"failure_reason,omitempty"`
	CallCount     int              `json:"call_count"`
	Review        bool             `json:"review"`
	CreatedAt     time.Time        `json:"created_at"`
	ResolvedAt    *time.Time       `json:"resolved_at,omitempty"`
	Events        []attempts.Event `json:"events,omitempty"`
}

// Get returns a merchant's payout with its attempts and their events.
// Another merchant's payout is ErrNotFound.
func (s *Service) Get(ctx context.Context, merchantID, id string) (View, error) {
	if merchantID == "" {
		return View{}, ErrNotFound
	}
	p, err := s.get(ctx, s.pool, merchantID, id)
	if err != nil {
		return View{}, err
	}
	v := View{Payout: p}
	as, err := s.attempts.ForSubject(ctx, s.pool, p.ID)
	if err != nil {
		return View{}, err
	}
	for _, a := range as {
		if a.Kind != p.Kind {
			continue
		}
		evs, err := s.attempts.Events(ctx, s.pool, a.ID)
		if err != nil {
			return View{}, err
		}
		v.Attempts = append(v.Attempts, AttemptView{ID: a.ID, Status: a.Status, Reference: a.Reference,
			ProviderID: a.ProviderID, FailureCode: a.FailureCode, FailureReason: a.FailureReason,
			CallCount: a.CallCount, Review: a.Review, CreatedAt: a.CreatedAt, ResolvedAt: a.ResolvedAt, Events: evs})
		// In review and still open: a resolved attempt keeps its review flag
		// as history, but needs nobody's attention any more. A diverged
		// attempt (the provider paid after it was resolved failed) needs it
		// whichever attempt it is: money left that the ledger says did not.
		if (p.CurrentAttemptID != nil && a.ID == *p.CurrentAttemptID && a.Review && a.Status.Open()) ||
			(a.DivergedAt != nil && a.DivergenceSettledAt == nil) {
			v.NeedsAttention = true
		}
	}
	return v, nil
}

// ListParams filters a merchant's payouts. Cursor is opaque (from a
// previous page); Limit is capped at 100.
type ListParams struct {
	MerchantID string
	Status     Status
	Kind       Kind
	SplitID    string
	Cursor     string
	Limit      int
}

// List returns a page of a merchant's payouts, newest first, and the cursor
// of the next page ("" at the end).
func (s *Service) List(ctx context.Context, p ListParams) ([]Payout, string, error) {
	limit := keyset.Limit(p.Limit, 100)
	var afterAt time.Time
	afterID := ""
	if p.Cursor != "" {
		var err error
		if afterAt, afterID, err = keyset.Decode(p.Cursor); err != nil {
			return nil, "", invalid("cursor", "malformed")
		}
	}
	rows, err := s.pool.Query(ctx, `SELECT `+payoutColumns+` FROM payouts
		WHERE merchant_id = $1 AND ($2 = '' OR status = $2) AND ($3 = '' OR kind = $3) AND ($4 = '' OR split_id = $4)
		  AND ($5 = '' OR (created_at, id) < ($6, $5))
		ORDER BY created_at DESC, id DESC LIMIT $7`,
		p.MerchantID, string(p.Status), string(p.Kind), p.SplitID, afterID, afterAt, limit+1)
	if err != nil {
		return nil, "", err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Payout, error) { return scanPayout(r) })
	if err != nil {
		return nil, "", err
	}
	out, next := keyset.Trim(out, limit, func(x Payout) (time.Time, string) { return x.CreatedAt, x.ID })
	return out, next, nil
}

// toAmount rebuilds an amount read from the database.
func toAmount(d decimal.Decimal, code string) (money.Amount, error) {
	cur, err := money.LookupCurrency(code)
	if err != nil {
		return money.Amount{}, err
	}
	return money.New(d, cur)
}
