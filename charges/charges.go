// Package charges takes money in: card charges and Pix charges (cobs), on
// the same attempt and resolver core as the money that goes out (docs/rules.md
// R1-R20, docs/architecture.md "Charges (incoming money)").
//
// A Charge is the intent (merchant, amount, kind, the fee rule and split
// rules applied); each conversation with the provider is an attempt
// (package attempts, kinds card_charge and pix_charge, subject = charge id)
// with its key and reference made before any I/O, at most one open, unknown
// resolved by lookup, and the review queue when nothing else can decide.
//
//   - Card: one attempt; succeeded means captured, and the merchant is
//     credited in the SAME transaction that records the success (the
//     attempts core calls AttemptFinal inside it). Failed: the charge fails
//     with the provider's reason.
//   - Pix: the attempt creates the cob under a txid that is the attempt's
//     reference (32 lowercase hex characters, a valid BCB txid). The
//     attempts core keeps that attempt open ("processing") while the cob
//     waits for the payer, and the charge shows awaiting_payment with the
//     copy-and-paste payload and expiry. The payment is confirmed by the
//     provider's webhook (HandleProviderEvent), by the PollPixCharge job
//     (enqueued with the charge) or by the attempts resolver, all through
//     the attempt's conditional transition: paid is the attempt's success
//     and credits the charge inside it; an expired cob is its failure and
//     makes the charge expired.
//
// Charges executed at the same time are recorded together: the attempts
// core hands their final attempts to AttemptsFinal in one transaction,
// which posts all their credits with one ledger.PostMany (batch.go; the
// same results as AttemptFinal for each).
//
// A charge is credited at most once however many confirmations arrive
// (webhook, poll and resolver, duplicates, out of order): the attempt moves
// to succeeded once (a conditional update, R10), the credit locks the charge
// row and updates it only from processing or awaiting_payment, and the
// ledger transaction's idempotency key is derived from the charge id.
//
// The credit is ONE ledger transaction (cause_kind charge_credit, cause_id
// the charge id, metadata naming the attempt): the provider's clearing
// account is debited with the gross amount; the merchant's available
// balance is credited with what it keeps; the platform's fee account with
// the fee; each split recipient's available balance with its share. See
// Compute for the rounding rule.
package charges

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/saldo/saldo/internal/intent"
	"github.com/saldo/saldo/internal/keyset"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/sqlcols"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers"
)

// Errors. Match with errors.Is. Validation errors are *FieldError and match
// ErrInvalid.
var (
	// ErrInvalid: bad input; nothing was written.
	ErrInvalid = errors.New("charges: invalid input")
	// ErrNotFound: no such charge (or not the caller's merchant's).
	ErrNotFound = errors.New("charges: not found")
	// ErrIdempotencyConflict: the client key was used before with a
	// different request. Nothing was written.
	ErrIdempotencyConflict = errors.New("charges: client key reused with a different request")
	// ErrUnknownMerchant: the merchant (or a split recipient) does not exist.
	ErrUnknownMerchant = errors.New("charges: unknown merchant")
	// ErrNotRefundable: only a paid charge can be refunded. Returned as
	// *NotRefundableError.
	ErrNotRefundable = errors.New("charges: charge is not refundable")
	// ErrEventMismatch: a provider event names one of our references but
	// contradicts it (other provider, other operation, other amount).
	// Nothing was changed; the event is logged as an error.
	ErrEventMismatch = errors.New("charges: provider event contradicts the charge")
)

// FieldError is a validation error naming the offending field (JSON path).
// errors.Is(err, ErrInvalid) holds for it.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("charges: invalid %s: %s", e.Field, e.Reason) }

// Is makes every FieldError match ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// NotRefundableError says why a charge cannot be refunded.
type NotRefundableError struct {
	ChargeID string
	Status   Status
	// Reason, when set, is why a paid charge is not refundable.
	Reason string
	// Disputed: the charge is disputed (a chargeback); the API answers
	// charge_disputed.
	Disputed bool
}

func (e *NotRefundableError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("charges: charge %s is not refundable: %s", e.ChargeID, e.Reason)
	}
	return fmt.Sprintf("charges: charge %s is %s; only a paid charge is refundable", e.ChargeID, e.Status)
}

// Is matches ErrNotRefundable.
func (e *NotRefundableError) Is(target error) bool { return target == ErrNotRefundable }

// Kind of a charge.
type Kind string

// Kinds.
const (
	KindCard Kind = "card"
	KindPix  Kind = "pix"
)

func (k Kind) attemptKind() attempts.Kind {
	if k == KindPix {
		return attempts.KindPixCharge
	}
	return attempts.KindCardCharge
}

func (k Kind) operation() providers.Operation {
	if k == KindPix {
		return providers.OpPixCharge
	}
	return providers.OpCardCharge
}

// Status is what a caller sees.
type Status string

// Statuses. processing is R24's intermediate state: the attempt is pending
// or unknown. paid, failed and expired are final.
const (
	StatusProcessing      Status = "processing"
	StatusAwaitingPayment Status = "awaiting_payment"
	StatusPaid            Status = "paid"
	StatusFailed          Status = "failed"
	StatusExpired         Status = "expired"
)

// Final reports whether the status can no longer change.
func (s Status) Final() bool { return s == StatusPaid || s == StatusFailed || s == StatusExpired }

// Clock tells the time (tests move it).
type Clock interface{ Now() time.Time }

// Config configures a Service. Pool, Attempts and a provider for each kind
// of charge (Routes, else Provider) are required.
type Config struct {
	Pool     *pgxpool.Pool
	Attempts *attempts.Service
	// Provider is the name of the provider charges go through when Routes
	// names none for their operation (card_charge, pix_charge).
	Provider string
	// Routes names the provider of each operation (providers.Routes); an
	// operation without a route goes to Provider. A kind of charge with
	// neither is refused at Create.
	Routes providers.Routes
	Clock  Clock
	Logger *slog.Logger
	// River enqueues PollPixCharge outside workers; when nil an insert-only
	// client is built on Pool. Inside a worker the job's client is used.
	River *river.Client[pgx.Tx]
	// Queue for the poll job; default river.QueueDefault.
	Queue string
	// DefaultFeePercent applies when neither the merchant nor the platform
	// has a fee rule for the currency (fixed fees are per currency and come
	// only from rules). Default 0.
	DefaultFeePercent decimal.Decimal
	// PixExpiry is a cob's lifetime when the request names none. Default 1h.
	PixExpiry time.Duration
	// PollInterval between lookups of an awaiting cob. Default 30s.
	PollInterval time.Duration
	// SubmitInline: Create makes the first provider call itself (after its
	// transaction committed) so the caller gets the Pix payload or the card
	// result at once. The submit job still exists and does nothing more
	// than a pending attempt allows. Default false.
	SubmitInline bool
	// OnFinal, optional, is called inside the transaction that records a
	// charge's final status (paid, failed, expired), with the charge as it
	// now stands: the notification hook (R24). Returning an error rolls the
	// transition back.
	OnFinal func(ctx context.Context, tx pgx.Tx, c Charge) error
	// OnFinalMany, optional, is OnFinal for the charges made final together
	// (AttemptsFinal: the group-committed record of their attempts), called
	// once with them in the order of their attempts. When nil, OnFinal is
	// called for each.
	OnFinalMany func(ctx context.Context, tx pgx.Tx, cs []Charge) error
	// OnDiverged, optional, is called inside the transaction that records
	// a divergence on charge c's attempt a: the provider reported it paid
	// after saldo resolved it failed or expired (the payer's money arrived,
	// uncredited), or failed after it was paid (a reversal: credited money
	// that did not arrive); the notification hook says so. Returning an
	// error rolls it back.
	OnDiverged func(ctx context.Context, tx pgx.Tx, c Charge, a attempts.Attempt) error
}

// Service creates charges and owns their ledger effects.
type Service struct {
	pool         *pgxpool.Pool
	attempts     *attempts.Service
	provider     string           // default provider
	routes       providers.Routes // provider by operation, over provider
	clock        Clock
	log          *slog.Logger
	queue        string
	defaultFee   FeeRule
	pixExpiry    time.Duration
	pollInterval time.Duration
	inline       bool
	river        *river.Client[pgx.Tx]
	onFinal      func(ctx context.Context, tx pgx.Tx, c Charge) error
	onFinals     func(ctx context.Context, tx pgx.Tx, cs []Charge) error
	onDiverged   func(ctx context.Context, tx pgx.Tx, c Charge, a attempts.Attempt) error
	accounts     sync.Map // account code -> id, only accounts known committed
}

// New builds a Service and registers it as the attempts owner of
// card_charge and pix_charge.
func New(cfg Config) (*Service, error) {
	if cfg.Pool == nil || cfg.Attempts == nil {
		return nil, errors.New("charges: Config.Pool and Config.Attempts are required")
	}
	for _, op := range []providers.Operation{providers.OpCardCharge, providers.OpPixCharge} {
		name := providerFor(cfg.Routes, cfg.Provider, op)
		if name == "" {
			continue
		}
		if _, ok := cfg.Attempts.Provider(name); !ok {
			return nil, fmt.Errorf("charges: provider %q (%s) is not registered with attempts", name, op)
		}
	}
	if cfg.Clock == nil {
		cfg.Clock = attempts.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Queue == "" {
		cfg.Queue = river.QueueDefault
	}
	if cfg.PixExpiry <= 0 {
		cfg.PixExpiry = time.Hour
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 30 * time.Second
	}
	if cfg.DefaultFeePercent.IsNegative() || cfg.DefaultFeePercent.GreaterThan(hundred) {
		return nil, errors.New("charges: DefaultFeePercent must be between 0 and 100")
	}
	rc := cfg.River
	if rc == nil {
		c, err := river.NewClient(riverpgxv5.New(cfg.Pool), &river.Config{Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("charges: insert-only river client: %w", err)
		}
		rc = c
	}
	s := &Service{pool: cfg.Pool, attempts: cfg.Attempts, provider: cfg.Provider, routes: cfg.Routes,
		clock: cfg.Clock, log: cfg.Logger,
		queue: cfg.Queue, defaultFee: FeeRule{Percent: cfg.DefaultFeePercent}, pixExpiry: cfg.PixExpiry,
		pollInterval: cfg.PollInterval, inline: cfg.SubmitInline, river: rc, onFinal: cfg.OnFinal, onDiverged: cfg.OnDiverged,
		onFinals: cfg.OnFinalMany}
	cfg.Attempts.RegisterOwner(attempts.KindCardCharge, s)
	cfg.Attempts.RegisterOwner(attempts.KindPixCharge, s)
	return s, nil
}

func (s *Service) riverClient(ctx context.Context) *river.Client[pgx.Tx] {
	if c, err := river.ClientFromContextSafely[pgx.Tx](ctx); err == nil {
		return c
	}
	return s.river
}

// Charge is an incoming money intent as a caller sees it.
type Charge struct {
	ID         string       `json:"id"`
	MerchantID string       `json:"merchant_id"`
	Kind       Kind         `json:"kind"`
	Provider   string       `json:"provider"`
	Amount     money.Amount `json:"amount"`
	// FeeRule applied at creation, and the fee it gave.
	FeeRule FeeRule      `json:"fee_rule"`
	Fee     money.Amount `json:"fee"`
	// MerchantNet is what the merchant is credited: amount - fee - splits.
	MerchantNet money.Amount      `json:"merchant_net"`
	Splits      []Split           `json:"splits,omitempty"`
	Description string            `json:"description,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Status      Status            `json:"status"`
	// FailureCode and FailureReason of a failed or expired charge (the
	// provider's decline reason for a card).
	FailureCode   string `json:"failure_code,omitempty"`
	FailureReason string `json:"failure_reason,omitempty"`
	// AttemptID, Reference and ProviderID of the charge's attempt. For Pix
	// the reference is the cob's txid.
	AttemptID  *uuid.UUID `json:"attempt_id,omitempty"`
	Reference  string     `json:"reference,omitempty"`
	ProviderID string     `json:"provider_id,omitempty"`
	// Pix is the payer's side of a Pix charge once the cob exists.
	Pix *PixPayment `json:"pix,omitempty"`
	// PixExpiresIn is the cob lifetime asked for (Pix only); callers read
	// Pix.ExpiresAt.
	PixExpiresIn time.Duration `json:"-"`
	PaidAt       *time.Time    `json:"paid_at,omitempty"`
	// PaidBy is who confirmed the payment (the attempts actor that resolved
	// the attempt): worker (the card capture answer), resolver (a lookup by
	// the resolver or the poll job), webhook, operator, reconciliation.
	PaidBy string `json:"paid_by,omitempty"`
	// CreditTransactionID is the ledger transaction that credited it.
	CreditTransactionID int64     `json:"credit_transaction_id,omitempty"`
	CreatedAt           time.Time `json:"created_at"`
	UpdatedAt           time.Time `json:"updated_at"`
	// NeedsAttention: the provider contradicted an attempt of the charge
	// (paid after it failed, failed after it was paid, disputed) and no
	// operator has settled that divergence yet (R9, R19). Set by Get, List
	// and the charge.diverged notification.
	NeedsAttention bool `json:"needs_attention"`
}

// PixPayment is what the payer needs: the BR Code copy-and-paste payload,
// the QR location and the expiry of the cob.
type PixPayment struct {
	TxID      string    `json:"txid"`
	CopyPaste string    `json:"copy_paste"`
	Location  string    `json:"location,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Split is a split rule of a charge and the amount it gives its recipient.
type Split struct {
	RecipientID string           `json:"recipient_id"`
	Percent     *decimal.Decimal `json:"percent,omitempty"`
	Fixed       *money.Amount    `json:"fixed,omitempty"`
	Amount      money.Amount     `json:"amount"`
}

// ChargeRequest asks for one charge.
type ChargeRequest struct {
	MerchantID string
	// ClientKey makes creation idempotent for the caller: the same key with
	// the same request returns the same charge; with a different request,
	// ErrIdempotencyConflict. Optional at this level.
	ClientKey string
	Kind      Kind
	Amount    money.Amount
	// CardToken is the tokenised card (card only; a token "tok_..." or a
	// Stripe PaymentMethod "pm_...", never a PAN). Whether the charge's
	// provider takes that kind is its adapter's call (EncodePayload).
	CardToken string
	// PixExpiresIn is the cob lifetime (Pix only; default Config.PixExpiry,
	// between 1 minute and 30 days).
	PixExpiresIn time.Duration
	// PayerName and PayerTaxID (CPF or CNPJ digits) for the cob, optional.
	PayerName   string
	PayerTaxID  string
	Description string
	Metadata    map[string]string
	// Splits give parts of the net amount to other merchants.
	Splits []SplitRule
}

// The request field names of a charge's Pix-only fields, as FieldError
// names them (the API's JSON names).
const (
	FieldPixExpiresIn = "pix_expires_in_seconds"
	// MaxPixExpiry is the longest cob a charge asks for: the API's
	// documented range (pix_expires_in_seconds up to 82800). It no longer
	// has to stay under the attempts core's ProcessingReviewAfter: the Pix
	// adapter states each cob's expiry plus its grace (ExpectedBy) and an
	// unpaid cob reaches review only once that, plus
	// ProcessingExpectedMargin, has passed (R18), whatever
	// ProcessingReviewAfter is; the core caps such a date at
	// attempts.MaxProcessingExpectedAfter (30 days) after the cob's
	// creation, so a longer limit would stay reviewable.
	MaxPixExpiry    = 23 * time.Hour
	FieldPayerName  = "payer_name"
	FieldPayerTaxID = "payer_tax_id"
)

var (
	tokenPattern = regexp.MustCompile(`^(tok|pm)_[A-Za-z0-9_]{1,100}$`)
	digits       = regexp.MustCompile(`^[0-9]+$`)
)

func (s *Service) validate(req *ChargeRequest) error {
	if req.MerchantID == "" {
		return invalid("merchant_id", "required")
	}
	if req.Kind != KindCard && req.Kind != KindPix {
		return invalid("kind", "must be card or pix")
	}
	if !req.Amount.IsValid() {
		return invalid("amount", "required")
	}
	if !req.Amount.IsPositive() {
		return invalid("amount", "must be greater than zero")
	}
	if utf8.RuneCountInString(req.Description) > 140 {
		return invalid("description", "longer than 140 characters")
	}
	if len(req.Metadata) > 20 {
		return invalid("metadata", "at most 20 keys")
	}
	for k, v := range req.Metadata {
		if k == "" || utf8.RuneCountInString(k) > 40 || utf8.RuneCountInString(v) > 500 {
			return invalid("metadata", "keys 1-40 characters, values up to 500")
		}
	}
	switch req.Kind {
	case KindCard:
		switch {
		case req.CardToken == "":
			return invalid("card_token", "required for a card charge")
		case digits.MatchString(req.CardToken):
			return invalid("card_token", "raw card numbers are never accepted; send a token")
		case !tokenPattern.MatchString(req.CardToken):
			return invalid("card_token", "must look like tok_... or pm_...")
		case req.PixExpiresIn != 0:
			return invalid(FieldPixExpiresIn, "an expiry applies only to Pix charges")
		case req.PayerName != "":
			return invalid(FieldPayerName, "a payer applies only to Pix charges")
		case req.PayerTaxID != "":
			return invalid(FieldPayerTaxID, "a payer applies only to Pix charges")
		}
	case KindPix:
		if req.CardToken != "" {
			return invalid("card_token", "a Pix charge takes no card")
		}
		if req.Amount.Currency().Code() != "BRL" {
			return invalid("currency", "Pix charges are in BRL, not %s", req.Amount.Currency().Code())
		}
		if req.PixExpiresIn == 0 {
			req.PixExpiresIn = s.pixExpiry
		}
		// At most MaxPixExpiry (the API's range). The Pix adapter reports
		// an unpaid cob "processing" until its expiry plus its grace, and
		// says so (ExpectedBy): the attempts core's review of it ages from
		// that date, not from ProcessingReviewAfter alone (R18).
		if req.PixExpiresIn < time.Minute || req.PixExpiresIn > MaxPixExpiry || req.PixExpiresIn%time.Second != 0 {
			return invalid(FieldPixExpiresIn, "whole seconds between 1 minute and 23 hours")
		}
		if req.PayerTaxID != "" && (!digits.MatchString(req.PayerTaxID) || (len(req.PayerTaxID) != 11 && len(req.PayerTaxID) != 14)) {
			return invalid(FieldPayerTaxID, "11 (CPF) or 14 (CNPJ) digits")
		}
		if utf8.RuneCountInString(req.PayerName) > 200 {
			return invalid(FieldPayerName, "longer than 200 characters")
		}
	}
	return validateSplits(req.MerchantID, req.Amount.Currency(), req.Splits)
}

// Create validates the request and, in ONE database transaction, inserts
// the charge with its fee and split breakdown and opens its attempt (key,
// reference and payload made before any I/O; submit job enqueued). The
// provider is called by the submit job (or right after commit with
// Config.SubmitInline). Errors name the field (*FieldError); a split that
// does not fit in the net amount is refused here, never at payment time.
func (s *Service) Create(ctx context.Context, req ChargeRequest) (Charge, error) {
	if err := s.validate(&req); err != nil {
		return Charge{}, err
	}
	cur := req.Amount.Currency()
	hash := intent.RequestHash(req.Kind, req.Amount.Format(), cur.Code(), req.CardToken, int64(req.PixExpiresIn/time.Second),
		req.PayerName, req.PayerTaxID, req.Description, req.Metadata, req.Splits)
	rule, b, err := s.prepareCreate(ctx, req, hash)
	if err != nil {
		// Refused before its transaction for something that may have
		// changed since a first request with this key was accepted (the
		// merchant's fee rule, routing): the key's charge, if any, is the
		// answer. Asked only on this path, so an accepted charge costs no
		// extra statement; a repeat that passes is answered by the claim
		// in the opening transaction.
		existing, rerr := s.replayClientKey(ctx, s.pool, req.MerchantID, req.ClientKey, hash)
		if rerr != nil {
			return Charge{}, rerr
		}
		if existing != "" {
			return s.get(ctx, s.pool, req.MerchantID, existing)
		}
		return Charge{}, err
	}

	var out Charge
	// The charge's id is made once, before the transaction: after an error
	// that may have committed (a lost COMMIT answer, a cut connection) it
	// is looked for, and what committed is the answer. Answering the error
	// would let a caller without a client key ask again and capture the
	// card twice (R22; as payouts' committedAfterError).
	id := intent.NewID("ch_")
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		existing, err := s.claimClientKey(ctx, tx, req.MerchantID, req.ClientKey, hash)
		if err != nil || existing != "" {
			if err == nil {
				out, err = s.get(ctx, tx, req.MerchantID, existing)
			}
			return err
		}
		c, err := s.insertCharge(ctx, tx, id, req, rule, b)
		if err != nil {
			return err
		}
		if req.ClientKey != "" {
			if _, err := tx.Exec(ctx, `UPDATE charge_requests SET charge_id = $3 WHERE merchant_id = $1 AND client_key = $2`,
				req.MerchantID, req.ClientKey, c.ID); err != nil {
				return err
			}
		}
		in := providers.OperationInput{
			Operation:   req.Kind.operation(),
			Amount:      req.Amount.Format(),
			Currency:    cur.Code(),
			CardToken:   req.CardToken,
			Description: req.Description,
			Metadata:    map[string]string{"saldo_charge_id": c.ID, "saldo_merchant_id": c.MerchantID},
		}
		if req.Kind == KindPix {
			in.ExpiresIn, in.PayerName, in.PayerTaxID = req.PixExpiresIn, req.PayerName, req.PayerTaxID
		}
		a, err := s.attempts.Open(ctx, tx, attempts.OpenParams{Kind: req.Kind.attemptKind(), SubjectID: c.ID,
			Provider: c.Provider, Input: in})
		if err != nil {
			if errors.Is(err, attempts.ErrInvalid) {
				return fmt.Errorf("%w: %w", ErrInvalid, err)
			}
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE charges SET attempt_id = $2, reference = $3 WHERE id = $1`,
			c.ID, a.ID, a.Reference); err != nil {
			return err
		}
		c.AttemptID, c.Reference = &a.ID, a.Reference
		if c.Kind == KindPix {
			if _, err := s.riverClient(ctx).InsertTx(ctx, tx, PollPixChargeArgs{ChargeID: c.ID}, s.pollOpts()); err != nil {
				return fmt.Errorf("charges: enqueue poll for %s: %w", c.ID, err)
			}
		}
		out = c
		return nil
	})
	if err != nil {
		c, gerr := s.get(context.WithoutCancel(ctx), s.pool, req.MerchantID, id)
		if gerr != nil {
			return Charge{}, err
		}
		s.log.WarnContext(ctx, "charges: the opening transaction answered an error but committed; answering what it made",
			"charge_id", id, "error", err)
		out = c
	}
	if s.inline && out.Status == StatusProcessing && out.AttemptID != nil {
		if _, err := s.attempts.Execute(ctx, *out.AttemptID); err != nil {
			// The attempt is durable and its submit job will carry on.
			s.log.WarnContext(ctx, "inline submit failed; the submit job carries on", "charge_id", out.ID,
				"attempt_id", *out.AttemptID, "error", err)
		}
		c, err := s.get(ctx, s.pool, out.MerchantID, out.ID)
		if err != nil {
			return Charge{}, err
		}
		return s.refresh(ctx, c)
	}
	return out, nil
}

func (s *Service) insertCharge(ctx context.Context, tx pgx.Tx, id string, req ChargeRequest, rule FeeRule, b Breakdown) (Charge, error) {
	cur := req.Amount.Currency()
	now := s.clock.Now()
	c := Charge{ID: id, MerchantID: req.MerchantID, Kind: req.Kind, Provider: s.providerFor(req.Kind),
		Amount: req.Amount, FeeRule: rule, Fee: mustAmount(b.Fee, cur), MerchantNet: mustAmount(b.MerchantNet, cur),
		Description: req.Description, Metadata: req.Metadata, Status: StatusProcessing, CreatedAt: now, UpdatedAt: now}
	var expiresIn *int64
	if req.Kind == KindPix {
		sec := int64(req.PixExpiresIn / time.Second)
		expiresIn = &sec
		c.PixExpiresIn = req.PixExpiresIn
	}
	meta, err := json.Marshal(sqlcols.OrEmpty(req.Metadata))
	if err != nil {
		return Charge{}, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO charges (id, merchant_id, kind, provider, amount, currency, fee_percent,
		fee_fixed, fee, merchant_net, description, metadata, pix_expires_in, status, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 'processing', $14, $14)`,
		c.ID, c.MerchantID, c.Kind, c.Provider, req.Amount.Decimal(), cur.Code(), rule.Percent, rule.Fixed,
		b.Fee, b.MerchantNet, sqlcols.Nullable(req.Description), meta, expiresIn, now); err != nil {
		return Charge{}, err
	}
	for i, sh := range b.Splits {
		var pct, fixed *decimal.Decimal
		if sh.Rule.Percent.IsPositive() {
			pct = &sh.Rule.Percent
		} else {
			fixed = &sh.Rule.Amount
		}
		if _, err := tx.Exec(ctx, `INSERT INTO charge_splits (charge_id, idx, recipient_id, percent, fixed, amount)
			VALUES ($1, $2, $3, $4, $5, $6)`, c.ID, i, sh.Rule.RecipientID, pct, fixed, sh.Amount); err != nil {
			return Charge{}, err
		}
		c.Splits = append(c.Splits, splitOf(sh.Rule.RecipientID, pct, fixed, sh.Amount, cur))
	}
	return c, nil
}

func splitOf(recipient string, pct, fixed *decimal.Decimal, amount decimal.Decimal, cur money.Currency) Split {
	sp := Split{RecipientID: recipient, Percent: pct, Amount: mustAmount(amount, cur)}
	if fixed != nil {
		f := mustAmount(*fixed, cur)
		sp.Fixed = &f
	}
	return sp
}

// claimClientKey records (merchant, key, hash) or finds what the key created
// before: the existing charge id for the same request, ErrIdempotencyConflict
// for a different one, "" when the caller should create. A concurrent
// creator with the same key waits on the row until the first commits.
func (s *Service) claimClientKey(ctx context.Context, tx pgx.Tx, merchantID, key string, hash []byte) (string, error) {
	if key == "" {
		return "", nil
	}
	if len(key) > 255 {
		return "", invalid("client_key", "longer than 255 characters")
	}
	tag, err := tx.Exec(ctx, `INSERT INTO charge_requests (merchant_id, client_key, request_hash, charge_id, created_at)
		VALUES ($1, $2, $3, '', $4) ON CONFLICT DO NOTHING`, merchantID, key, hash, s.clock.Now())
	if err != nil {
		return "", err
	}
	if tag.RowsAffected() == 1 {
		return "", nil
	}
	id, err := s.replayClientKey(ctx, tx, merchantID, key, hash)
	if err == nil && id == "" {
		err = fmt.Errorf("charges: client key %q conflicted but its charge is not visible", key)
	}
	return id, err
}

// prepareCreate checks what a validated request needs before its
// transaction (a provider that takes it, the merchant and split recipients,
// the fee rule and breakdown, the provider's encoding) and makes the
// accounts a credit touches. Nothing it refuses leaves a row (nor a ledger
// account) behind: before it creates an account it asks whether the
// request's client key (whose request hash is hash) was used, and a used
// key is an error, which Create answers from the key (a repeat, or a
// conflict that must not open accounts for another request's currency or
// recipients). Only a request that creates an account pays that statement.
func (s *Service) prepareCreate(ctx context.Context, req ChargeRequest, hash []byte) (FeeRule, Breakdown, error) {
	cur := req.Amount.Currency()
	provider := s.providerFor(req.Kind)
	if provider == "" {
		return FeeRule{}, Breakdown{}, invalid("kind", "no provider takes %s charges here", req.Kind)
	}
	p, ok := s.attempts.Provider(provider)
	if !ok || !p.Capabilities().Supports(req.Kind.operation()) {
		return FeeRule{}, Breakdown{}, invalid("kind", "provider %s does not support %s charges", provider, req.Kind)
	}
	if err := s.requireMerchant(ctx, "merchant_id", req.MerchantID); err != nil {
		return FeeRule{}, Breakdown{}, err
	}
	rule, err := s.FeeRuleFor(ctx, s.pool, req.MerchantID, cur)
	if err != nil {
		return FeeRule{}, Breakdown{}, err
	}
	b, err := Compute(req.Amount.Decimal(), cur, rule, req.Splits)
	if err != nil {
		return FeeRule{}, Breakdown{}, err
	}
	if err := s.checkEncodable(req); err != nil {
		return FeeRule{}, Breakdown{}, err
	}
	// Recipients last: every check that does not depend on them is made
	// first, so a refusal never says whether a merchant id exists (an
	// unknown id and an existing one with a split too large were told
	// apart by the field named; found by review).
	for i, sp := range req.Splits {
		if err := s.requireRecipient(ctx, fmt.Sprintf("splits[%d].recipient_id", i), sp.RecipientID); err != nil {
			return FeeRule{}, Breakdown{}, err
		}
	}
	keyUnused := func() error {
		id, err := s.replayClientKey(ctx, s.pool, req.MerchantID, req.ClientKey, hash)
		if err == nil && id != "" {
			err = errClientKeyUsed
		}
		return err
	}
	return rule, b, s.prepareAccounts(ctx, req.MerchantID, provider, cur, req.Splits, keyUnused)
}

// errClientKeyUsed: prepareCreate found the request's client key used by
// an earlier request; Create answers from the key.
var errClientKeyUsed = errors.New("charges: client key used before")

// replayClientKey finds the charge an earlier request with this client key
// created: its id when the request was the same, "" when the key was never
// used, ErrIdempotencyConflict for another request. Create asks it before
// anything that may have changed since (the merchant's fee rule): a repeat
// of an accepted request gets the charge it created. The claim in the
// opening transaction stays what settles races.
func (s *Service) replayClientKey(ctx context.Context, db dbtx, merchantID, key string, hash []byte) (string, error) {
	if key == "" {
		return "", nil
	}
	if len(key) > 255 {
		return "", invalid("client_key", "longer than 255 characters")
	}
	var prev []byte
	var id string
	err := db.QueryRow(ctx, `SELECT request_hash, charge_id FROM charge_requests
		WHERE merchant_id = $1 AND client_key = $2`, merchantID, key).Scan(&prev, &id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if !bytes.Equal(prev, hash) {
		return "", fmt.Errorf("%w (key %q)", ErrIdempotencyConflict, key)
	}
	return id, nil
}

func (s *Service) requireMerchant(ctx context.Context, field, merchantID string) error {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM merchants WHERE id = $1)`, merchantID).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %w", ErrUnknownMerchant, invalid(field, "no merchant %q", merchantID))
	}
	return nil
}

// prepareAccounts makes sure every account a credit of this charge touches
// exists, committed on its own BEFORE the opening transaction, and caches
// the ids: no transaction ever waits for a second pool connection. Before
// it creates the first one it calls mayCreate, whose error it returns.
func (s *Service) prepareAccounts(ctx context.Context, merchantID, provider string, cur money.Currency, splits []SplitRule,
	mayCreate func() error) error {
	specs := []ledger.AccountSpec{ledger.MerchantAvailable(merchantID, cur), ledger.ProviderClearing(provider, cur),
		ledger.PlatformFees(cur)}
	for _, sp := range splits {
		specs = append(specs, ledger.MerchantAvailable(sp.RecipientID, cur))
	}
	asked := false
	for _, spec := range specs {
		if _, ok := s.accounts.Load(spec.Code()); ok {
			continue
		}
		if !asked {
			asked = true
			if err := mayCreate(); err != nil {
				return err
			}
		}
		a, err := ledger.EnsureAccount(ctx, s.pool, spec)
		if err != nil {
			return err
		}
		s.accounts.Store(spec.Code(), a.ID)
	}
	return nil
}

// accountID resolves an account inside tx: from the cache, else read (and
// cached when a committed transaction wrote the row seen), else created
// inside tx and not cached (it could still roll back).
func (s *Service) accountID(ctx context.Context, tx pgx.Tx, spec ledger.AccountSpec) (int64, error) {
	code := spec.Code()
	if id, ok := s.accounts.Load(code); ok {
		return id.(int64), nil
	}
	id, committed, err := ledger.AccountIDByCode(ctx, tx, code)
	if err == nil {
		if committed {
			s.accounts.Store(code, id)
		}
		return id, nil
	}
	if !errors.Is(err, ledger.ErrAccountNotFound) {
		return 0, err
	}
	a, err := ledger.EnsureAccount(ctx, tx, spec)
	return a.ID, err
}

type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const chargeColumns = `id, merchant_id, kind, provider, amount, currency, fee_percent, fee_fixed, fee, merchant_net,
	description, metadata, pix_expires_in, status, failure_code, failure_reason, attempt_id, reference, provider_id,
	pix_copy_paste, pix_location, pix_expires_at, paid_at, paid_by, credit_tx_id, created_at, updated_at`

func scanCharge(row pgx.Row) (Charge, error) {
	var c Charge
	var amount, fee, net decimal.Decimal
	var currency string
	var meta []byte
	var expiresIn *int64
	var description, failureCode, failureReason, reference, providerID, copyPaste, location, paidBy *string
	var pixExpiresAt *time.Time
	var creditTx *int64
	err := row.Scan(&c.ID, &c.MerchantID, &c.Kind, &c.Provider, &amount, &currency, &c.FeeRule.Percent,
		&c.FeeRule.Fixed, &fee, &net, &description, &meta, &expiresIn, &c.Status, &failureCode, &failureReason,
		&c.AttemptID, &reference, &providerID, &copyPaste, &location, &pixExpiresAt, &c.PaidAt, &paidBy, &creditTx,
		&c.CreatedAt, &c.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, ErrNotFound
	}
	if err != nil {
		return c, err
	}
	cur, err := money.LookupCurrency(currency)
	if err != nil {
		return c, fmt.Errorf("charges: stored currency of %s: %w", c.ID, err)
	}
	if c.Amount, err = money.New(amount, cur); err != nil {
		return c, fmt.Errorf("charges: stored amount of %s: %w", c.ID, err)
	}
	c.Fee, c.MerchantNet = mustAmount(fee, cur), mustAmount(net, cur)
	if len(meta) > 0 {
		if err := json.Unmarshal(meta, &c.Metadata); err != nil {
			return c, err
		}
		if len(c.Metadata) == 0 {
			c.Metadata = nil
		}
	}
	if expiresIn != nil {
		c.PixExpiresIn = time.Duration(*expiresIn) * time.Second
	}
	c.Description, c.FailureCode, c.FailureReason = sqlcols.Deref(description), sqlcols.Deref(failureCode), sqlcols.Deref(failureReason)
	c.Reference, c.ProviderID, c.PaidBy = sqlcols.Deref(reference), sqlcols.Deref(providerID), sqlcols.Deref(paidBy)
	if copyPaste != nil && pixExpiresAt != nil {
		c.Pix = &PixPayment{TxID: c.Reference, CopyPaste: *copyPaste, Location: sqlcols.Deref(location), ExpiresAt: *pixExpiresAt}
	}
	if creditTx != nil {
		c.CreditTransactionID = *creditTx
	}
	return c, nil
}

func (s *Service) loadSplits(ctx context.Context, db dbtx, c *Charge) error {
	rows, err := db.Query(ctx, `SELECT recipient_id, percent, fixed, amount FROM charge_splits
		WHERE charge_id = $1 ORDER BY idx`, c.ID)
	if err != nil {
		return err
	}
	defer rows.Close()
	cur := c.Amount.Currency()
	for rows.Next() {
		var r string
		var pct, fixed *decimal.Decimal
		var amt decimal.Decimal
		if err := rows.Scan(&r, &pct, &fixed, &amt); err != nil {
			return err
		}
		c.Splits = append(c.Splits, splitOf(r, pct, fixed, amt, cur))
	}
	return rows.Err()
}

// get reads a charge with its splits; merchantID "" skips the ownership
// filter (internal use).
func (s *Service) get(ctx context.Context, db dbtx, merchantID, id string) (Charge, error) {
	c, err := scanCharge(db.QueryRow(ctx, `SELECT `+chargeColumns+` FROM charges
		WHERE id = $1 AND ($2 = '' OR merchant_id = $2)`, id, merchantID))
	if err != nil {
		return c, err
	}
	return c, s.loadSplits(ctx, db, &c)
}

func (s *Service) lock(ctx context.Context, tx pgx.Tx, merchantID, id string) (Charge, error) {
	c, err := scanCharge(tx.QueryRow(ctx, `SELECT `+chargeColumns+` FROM charges
		WHERE id = $1 AND ($2 = '' OR merchant_id = $2) FOR UPDATE`, id, merchantID))
	if err != nil {
		return c, err
	}
	return c, s.loadSplits(ctx, tx, &c)
}

// Get returns a merchant's charge with its splits. Another merchant's charge
// is ErrNotFound. A processing Pix charge whose cob already exists (its open
// attempt carries the cob) is first moved to awaiting_payment, so a caller
// polling Get sees the copy-and-paste payload as soon as the provider
// created it (R24).
func (s *Service) Get(ctx context.Context, merchantID, id string) (Charge, error) {
	if merchantID == "" {
		return Charge{}, ErrNotFound
	}
	c, err := s.get(ctx, s.pool, merchantID, id)
	if err != nil {
		return c, err
	}
	if c, err = s.refresh(ctx, c); err != nil {
		return c, err
	}
	cs := []Charge{c}
	err = markAttention(ctx, s.pool, cs)
	return cs[0], err
}

// markAttention sets NeedsAttention on the charges of cs with an attempt
// whose divergence is not settled, in one statement (attempts_subject).
func markAttention(ctx context.Context, db attempts.DB, cs []Charge) error {
	if len(cs) == 0 {
		return nil
	}
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	rows, err := db.Query(ctx, `SELECT DISTINCT subject_id FROM attempts WHERE subject_id = ANY ($1::text[])
		AND direction = 'in' AND diverged_at IS NOT NULL AND divergence_settled_at IS NULL`, ids)
	if err != nil {
		return fmt.Errorf("charges: divergences of %d charges: %w", len(cs), err)
	}
	diverged := map[string]bool{}
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		diverged[id] = true
		return nil
	}); err != nil {
		return fmt.Errorf("charges: divergences of %d charges: %w", len(cs), err)
	}
	for i := range cs {
		cs[i].NeedsAttention = diverged[cs[i].ID]
	}
	return nil
}

// LockForRefund locks the charge row FOR UPDATE inside the caller's
// transaction and returns it (amount, currency, status, provider, and the
// provider id and reference of its succeeded attempt), so a refund can
// compute what is still refundable and open its own attempt under the
// lock: two refunds of one charge serialise here. Another merchant's charge
// is ErrNotFound; a charge that is not paid is *NotRefundableError
// (matching ErrNotRefundable). The lock is held until tx ends.
func (s *Service) LockForRefund(ctx context.Context, tx pgx.Tx, merchantID, chargeID string) (Charge, error) {
	if merchantID == "" {
		return Charge{}, ErrNotFound
	}
	c, err := s.lock(ctx, tx, merchantID, chargeID)
	if err != nil {
		return Charge{}, err
	}
	if c.Status != StatusPaid {
		return c, &NotRefundableError{ChargeID: c.ID, Status: c.Status}
	}
	// A paid charge the provider later reported failed (a reversal, R9,
	// R19): the money may never have arrived, and a refund would pay out
	// what was not received. Refused while the divergence stands, and
	// after it is settled too: the operator booked it, and the charge stays
	// paid only as history (R9). A disputed charge (a chargeback: the card
	// network took the money back) likewise: the cardholder already has
	// the money or may get it, a refund would return it twice, and Stripe
	// refuses it (charge_disputed). A charge paid twice (a second operation
	// under its reference, R9, R19) is not reversed: its credited payment
	// arrived and may be refunded; the second one is the operator's.
	// Unless the card network took a payment of the charge back: any
	// withdrawn chargeback noted on one of its attempts
	// (attempts.WithdrawnDisputeEvidence) refuses it, whatever the
	// attempt's status or divergence was when it was reported (a charge
	// paid twice, then charged back; a chargeback reported before the
	// success) and after the dispute is won (R9, R19, R21).
	var kind *string
	var withdrawn bool
	err = tx.QueryRow(ctx, `SELECT (SELECT divergence_kind FROM attempts WHERE direction = 'in' AND subject_id = $1
			AND status = 'succeeded' AND diverged_at IS NOT NULL
			AND divergence_kind IS DISTINCT FROM '`+attempts.DivergenceSecondOperation+`'
			ORDER BY divergence_kind = '`+attempts.DivergenceDispute+`' DESC, diverged_at LIMIT 1),
		EXISTS (SELECT 1 FROM attempts a JOIN attempt_events e ON e.attempt_id = a.id
			WHERE a.direction = 'in' AND a.subject_id = $1 AND e.type = 'note' AND e.evidence @> $2::jsonb)`,
		c.ID, attempts.WithdrawnDisputeEvidence).Scan(&kind, &withdrawn)
	switch {
	case err != nil:
		return c, err
	case withdrawn || (kind != nil && *kind == attempts.DivergenceDispute):
		return c, &NotRefundableError{ChargeID: c.ID, Status: c.Status, Disputed: true,
			Reason: "the charge is disputed: the card network took its money back (a chargeback, a divergence an operator settles)"}
	case kind == nil:
		return c, nil
	}
	return c, &NotRefundableError{ChargeID: c.ID, Status: c.Status,
		Reason: "the provider reported it failed after it was paid (a divergence an operator settles)"}
}

// ListParams filters a merchant's charges. Cursor is opaque (from a previous
// page); Limit defaults to and is capped at 100.
type ListParams struct {
	MerchantID string
	Status     Status
	Kind       Kind
	Cursor     string
	Limit      int
}

// List returns a page of a merchant's charges, newest first, and the cursor
// of the next page ("" at the end). Splits are not loaded (Get has them).
func (s *Service) List(ctx context.Context, p ListParams) ([]Charge, string, error) {
	limit := keyset.Limit(p.Limit, 100)
	var afterAt time.Time
	afterID := ""
	if p.Cursor != "" {
		var err error
		if afterAt, afterID, err = keyset.Decode(p.Cursor); err != nil {
			return nil, "", invalid("cursor", "malformed")
		}
	}
	rows, err := s.pool.Query(ctx, `SELECT `+chargeColumns+` FROM charges
		WHERE merchant_id = $1 AND ($2 = '' OR status = $2) AND ($3 = '' OR kind = $3)
		  AND ($4 = '' OR (created_at, id) < ($5, $4))
		ORDER BY created_at DESC, id DESC LIMIT $6`,
		p.MerchantID, string(p.Status), string(p.Kind), afterID, afterAt, limit+1)
	if err != nil {
		return nil, "", err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Charge, error) { return scanCharge(r) })
	if err != nil {
		return nil, "", err
	}
	out, next := keyset.Trim(out, limit, func(x Charge) (time.Time, string) { return x.CreatedAt, x.ID })
	if err := markAttention(ctx, s.pool, out); err != nil {
		return nil, "", err
	}
	return out, next, nil
}

// mustAmount builds an amount from a value this package computed or stored
// in the currency's minor units. money.New cannot refuse a value already
// rounded to the currency's minor units with a non-zero currency.
func mustAmount(d decimal.Decimal, cur money.Currency) money.Amount {
	a, _ := money.New(d.Round(cur.MinorUnits()), cur)
	return a
}

// providerFor is the provider a charge of kind k goes to: its operation's
// route, else the default provider ("" when neither is set).
func (s *Service) providerFor(k Kind) string { return providerFor(s.routes, s.provider, k.operation()) }

func providerFor(routes providers.Routes, fallback string, op providers.Operation) string {
	if p, ok := routes.Provider(op); ok {
		return p
	}
	return fallback
}
