// Package providers defines what saldo needs from a payment service provider
// (PSP): the Provider interface every adapter implements, the capabilities an
// adapter declares, and the neutral result types the attempts classifier
// understands.
//
// The package knows nothing about attempts, the ledger or money movement. An
// adapter's job is narrow: turn a neutral OperationInput into the exact bytes
// it will send (once, when the attempt is opened), send those bytes in ONE
// HTTP exchange per Submit call (no hidden retries, docs/rules.md R12), look an
// operation up by our own reference (R13-R16), and verify and parse webhooks
// (R17).
package providers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/saldo/saldo/internal/pgtext"
)

// Operation is what we ask the provider to do.
type Operation string

// The operations saldo knows.
const (
	OpPixTransfer Operation = "pix_transfer" // money out, to a Pix key or bank account
	OpBankPayout  Operation = "bank_payout"  // money out, to a bank account
	OpRefund      Operation = "refund"       // money back to the payer of a charge
	OpCardCharge  Operation = "card_charge"  // money in, card captured at once
	OpPixCharge   Operation = "pix_charge"   // money in, a Pix cob the payer pays later
	// OpAccountTransfer: money out to an account held at the provider (a
	// Stripe Connect transfer to a connected account, issue 14).
	OpAccountTransfer Operation = "account_transfer"
)

// Direction is which way an operation moves money, as the attempts keep it:
// out (saldo sent it: a transfer, a payout, a refund) or in (saldo
// receives it: a charge).
type Direction string

// The directions.
const (
	DirectionOut Direction = "out"
	DirectionIn  Direction = "in"
)

// HasDestination reports whether o carries a Destination (outgoing money
// to someone: pix_transfer, bank_payout, account_transfer).
func (o Operation) HasDestination() bool {
	return o == OpPixTransfer || o == OpBankPayout || o == OpAccountTransfer
}

// Valid reports whether o is one of the known operations.
func (o Operation) Valid() bool {
	switch o {
	case OpPixTransfer, OpBankPayout, OpRefund, OpCardCharge, OpPixCharge, OpAccountTransfer:
		return true
	}
	return false
}

// Capabilities is what a provider can and cannot do; the attempts core reads it
// to choose between re-sending, querying and sending to review (R20, R25).
type Capabilities struct {
	// IdempotencyKeys: the provider honours an idempotency key, replaying the
	// first response for it. Without it, every re-send may create a new
	// operation (R20).
	IdempotencyKeys bool
	// KeyLifetime: how long the provider remembers a key. After that a re-send
	// with the same key may create a second operation, so saldo never
	// re-sends past it (R14). Zero means "forever" only if IdempotencyKeys.
	KeyLifetime time.Duration
	// LookupByReference: the provider can find an operation by our reference.
	// Without it, unknown falls to review and reconciliation (R25).
	LookupByReference bool
	// ConsistencyWindow: how long a fresh operation may stay invisible to a
	// lookup. "Not found" is proof of absence only after this window (R16).
	ConsistencyWindow time.Duration
	// Webhooks: the provider notifies final states by webhook.
	Webhooks bool
	// Statements: the provider lists a day's operations for reconciliation.
	Statements bool
	// TransientFailures are the failure codes with which the provider says
	// it did nothing and the same operation may succeed later (its own "try
	// again"): a payout whose attempt failed with one gets a new attempt
	// under the payout's retry policy. Every other failure code is
	// definitive. (The resolver's proof of absence, attempts.FailureNotFound,
	// is transient for every provider.)
	TransientFailures []string
	// Operations the provider supports.
	Operations []Operation
	// Destinations are the destination kinds the provider pays, for each
	// supported operation that carries a destination (HasDestination): a
	// Pix PSP pays Pix keys and Brazilian bank accounts, Stripe pays
	// connected accounts (account_transfer) and the bank accounts attached
	// to the platform's Stripe account (bank_payout). An operation that
	// carries a destination and names no kind here takes none. Routing
	// reads it (Takes, Routes.Takers, Routes.Next).
	Destinations map[Operation][]DestinationKind
}

// StatementDating is how a provider dates the lines of one operation on its
// statement, against the UTC day saldo recorded the operation final (its
// attempt's resolution, R19): the line may be listed on the statement of a
// day up to Before days before that day and up to After days after it.
type StatementDating struct {
	Before int `json:"before"`
	After  int `json:"after"`
}

// DefaultStatementDating is a day either side: a provider that lists an
// operation on the day it became final may still cut its day at another
// hour than midnight UTC, or record it a little before or after saldo.
var DefaultStatementDating = StatementDating{Before: 1, After: 1}

// StatementDater is implemented by a Provider whose statement (R19) dates
// an operation's line otherwise than on the day saldo records the
// operation final, or that says how it dates them: StatementDating
// declares it per operation (a provider that lists by creation day lists a
// payout paid days later before that day; a Pix PSP lists a devolucao on
// the day of the Pix it returns). Reconciliation looks for an operation on
// the statements of that window (StatementWindow). An operation it does
// not name, or a provider that is no StatementDater, is dated
// DefaultStatementDating.
type StatementDater interface {
	StatementDating() map[Operation]StatementDating
}

// StatementWindow is the dating reconciliation uses for p's op: the
// declared one, never narrower than DefaultStatementDating (a declaration
// widens or shifts the window, it never makes saldo look at fewer days).
func StatementWindow(p Provider, op Operation) StatementDating {
	w := DefaultStatementDating
	if sd, ok := p.(StatementDater); ok {
		if d, ok := sd.StatementDating()[op]; ok {
			w.Before, w.After = max(w.Before, d.Before), max(w.After, d.After)
		}
	}
	return w
}

// StatementAfter is the largest After of any of p's operations' windows:
// how many days after an operation became final its line may still
// appear, so how long reconciliation waits before it says it is missing.
func StatementAfter(p Provider) int {
	a := DefaultStatementDating.After
	if sd, ok := p.(StatementDater); ok {
		for op := range sd.StatementDating() {
			a = max(a, StatementWindow(p, op).After)
		}
	}
	return a
}

// Supports reports whether op is among c.Operations.
func (c Capabilities) Supports(op Operation) bool {
	for _, o := range c.Operations {
		if o == op {
			return true
		}
	}
	return false
}

// Takes reports whether the provider takes op to a destination of kind:
// it supports op and, when op carries a destination, kind is among
// Destinations[op]. An operation without a destination takes kind "".
func (c Capabilities) Takes(op Operation, kind DestinationKind) bool {
	if !c.Supports(op) {
		return false
	}
	if !op.HasDestination() {
		return kind == ""
	}
	for _, k := range c.Destinations[op] {
		if k == kind {
			return true
		}
	}
	return false
}

// DestinationKind names which of a Destination's kinds is set.
type DestinationKind string

// Destination kinds: the JSON names of Destination's fields.
const (
	DestPixKey            DestinationKind = "pix_key"
	DestBankAccount       DestinationKind = "bank_account"
	DestStripeAccount     DestinationKind = "stripe_account"
	DestStripeBankAccount DestinationKind = "stripe_bank_account"
)

// Kind is the kind of d: "" for a nil destination or one that sets no
// kind; the first set, in the order of the constants, when several are
// (validation refuses that).
func (d *Destination) Kind() DestinationKind {
	switch {
	case d == nil:
		return ""
	case d.PixKey != nil:
		return DestPixKey
	case d.BankAccount != nil:
		return DestBankAccount
	case d.StripeAccount != "":
		return DestStripeAccount
	case d.StripeBankAccount != "":
		return DestStripeBankAccount
	}
	return ""
}

// Destination is where outgoing money goes: a Pix key, a Brazilian bank
// account, an account held at the provider (a Stripe connected account,
// for account_transfer), or a bank account attached to the platform's
// Stripe account (for a Stripe bank_payout). Exactly one of PixKey,
// BankAccount, StripeAccount or StripeBankAccount is set.
type Destination struct {
	PixKey      *PixKey      `json:"pix_key,omitempty"`
	BankAccount *BankAccount `json:"bank_account,omitempty"`
	// StripeAccount is a Stripe connected account id ("acct_...").
	StripeAccount string `json:"stripe_account,omitempty"`
	// StripeBankAccount is the id ("ba_...") of an external bank account
	// attached to the platform's Stripe account: a Stripe payout's
	// destination.
	StripeBankAccount string `json:"stripe_bank_account,omitempty"`
	// Name and TaxID of the holder, when known (shown on statements).
	HolderName  string `json:"holder_name,omitempty"`
	HolderTaxID string `json:"holder_tax_id,omitempty"`
}

// PixKey is a DICT key and its type: cpf, cnpj, email, phone, evp (random).
type PixKey struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// BankAccount is a Brazilian bank account: ISPB (8 digits) of the bank,
// branch, account number and type (checking, savings, payment).
type BankAccount struct {
	ISPB    string `json:"ispb"`
	Branch  string `json:"branch"`
	Account string `json:"account"`
	Type    string `json:"type"`
}

// OperationInput is the provider-neutral description of one operation. The
// owning domain (payouts, charges) fills it; the adapter's EncodePayload turns
// it into the exact bytes sent on the wire, which the attempt stores with
// their sha256 before any I/O (R4, R5).
type OperationInput struct {
	Operation Operation `json:"operation"`
	// Amount is a decimal string in major units ("10.50"), Currency an ISO
	// 4217 code. Validation of amounts is the caller's job (package money).
	Amount   string `json:"amount"`
	Currency string `json:"currency"`
	// Destination of outgoing money (pix_transfer, bank_payout).
	Destination *Destination `json:"destination,omitempty"`
	// ChargeProviderID and ChargeReference name the charge a refund returns.
	ChargeProviderID string `json:"charge_provider_id,omitempty"`
	ChargeReference  string `json:"charge_reference,omitempty"`
	// CardToken is the tokenised card for card_charge (never a PAN).
	CardToken string `json:"card_token,omitempty"`
	// ExpiresIn is the lifetime of a Pix cob (pix_charge).
	ExpiresIn time.Duration `json:"expires_in,omitempty"`
	// PayerTaxID and PayerName for a Pix cob, when known.
	PayerTaxID string `json:"payer_tax_id,omitempty"`
	PayerName  string `json:"payer_name,omitempty"`
	// Description shown to the other party.
	Description string `json:"description,omitempty"`
	// Metadata travels with the operation (never secrets).
	Metadata map[string]string `json:"metadata,omitempty"`
}

// SubmitRequest is one send of an attempt. The same attempt always sends the
// same IdempotencyKey, Reference and Payload bytes (R5).
type SubmitRequest struct {
	Operation      Operation
	IdempotencyKey string
	// Reference is our external reference (32 lowercase hex characters), sent
	// in the provider's reference field so the operation can be found by
	// lookup (R13). For Pix it is the txid / idEnvio / devolucao id.
	Reference string
	// Payload is exactly what EncodePayload returned when the attempt opened.
	Payload []byte
}

// State is the provider's view of an operation, as an adapter reads it.
type State string

// Provider-side states.
const (
	// StateSucceeded: the money moved (transfer sent, charge captured, cob
	// created for pix_charge submit; cob paid for a pix_charge lookup).
	StateSucceeded State = "succeeded"
	// StateProcessing: accepted, not final yet. Still open on our side.
	StateProcessing State = "processing"
	// StateFailed: definitively not done (declined, insufficient funds,
	// invalid destination, cob expired unpaid).
	StateFailed State = "failed"
)

// Exchange is what happened on the wire during one HTTP exchange. It is filled
// by Client.Do (httptrace) and read by the attempts classifier (R2).
type Exchange struct {
	// Method and URL of the request (URL without credentials).
	Method string
	URL    string
	// Connected: a connection was obtained (httptrace GotConn).
	Connected bool
	// Wrote: the whole request was written without error (httptrace
	// WroteRequest with Err == nil). False means the provider cannot hold a
	// complete request, so a re-send with the same key is safe.
	Wrote bool
	// WireCalls counts requests actually written on the wire during this
	// exchange (net/http may replay a request on a dead keep-alive conn).
	WireCalls int
	// Err is the transport error, if any (connect refused, timeout, reset,
	// body read failure). Nil when a full response was read.
	Err error
	// Timeout: Err was a deadline/timeout.
	Timeout bool
	// StatusCode is 0 when no response head arrived.
	StatusCode int
	// Header of the response, when one arrived.
	Header http.Header
	// Body of the response, fully read under the deadline (capped).
	Body []byte
	// RetryAfter parsed from the response's Retry-After header, if any.
	RetryAfter time.Duration
	// ProviderRequestID is the provider's request id header, if any.
	ProviderRequestID string
	// Started and Ended bracket the exchange.
	Started time.Time
	Ended   time.Time
}

// Refinement is an adapter's reading of an error body that changes how the
// attempts classifier treats an otherwise generic status code.
type Refinement string

// Refinements an adapter may report. Empty means "no opinion".
const (
	RefineNone Refinement = ""
	// RefineDeclined: a 4xx that is a definitive business failure (card
	// declined, insufficient funds, invalid destination).
	RefineDeclined Refinement = "declined"
	// RefineInFlight: the key is being processed by another request (409).
	RefineInFlight Refinement = "in_flight"
	// RefineDuplicate: the provider says this reference/key already exists
	// (Pix 409 on a repeated PUT): query it, never make a new id.
	RefineDuplicate Refinement = "duplicate"
	// RefineKeyMisuse: the key was reused with a different payload: a bug on
	// our side. Never failed automatically; goes to review with an alert.
	RefineKeyMisuse Refinement = "key_misuse"
	// RefineRateLimited: the provider rate limited us; nothing processed.
	RefineRateLimited Refinement = "rate_limited"
	// RefineAuthRefused: the provider refused our credentials (a wrong,
	// revoked or expired key, or one lacking a permission: 401, 403) before
	// doing any work; nothing processed. The request itself is fine: an
	// operator must fix the configuration, then the same request (same key,
	// same bytes) may go out again.
	RefineAuthRefused Refinement = "auth_refused"
	// RefineUnknown: an error answer that does not say what happened to
	// the operation (Stripe's api_error, "any other type of problem",
	// whatever its status): never a definitive failure, whatever the
	// status code; resolved by lookup like a 5xx.
	RefineUnknown Refinement = "unknown"
)

// SubmitResult is the outcome of one Submit: the raw exchange plus what the
// adapter could read from the response body.
type SubmitResult struct {
	Exchange Exchange
	// ProviderID of the operation, when the response named it.
	ProviderID string
	// State reported by the response body, when it was readable.
	State State
	// Refinement of an error response (see Refinement).
	Refinement Refinement
	// FailureCode and FailureReason of a failed operation or error response.
	FailureCode   string
	FailureReason string
	// Data is operation-specific output worth keeping (for pix_charge: the
	// copy-and-paste payload and expiry), as JSON.
	Data []byte
	// ExpectedBy, when the provider states it, is when it expects an
	// operation it reports processing to end (a Stripe payout's
	// arrival_date, a Pix cob's expiry plus the adapter's grace). The
	// attempts core sends an attempt that stays processing to review only
	// once this instant plus a margin has passed (and its own
	// ProcessingReviewAfter), and caps how far a provider's date can push
	// that review (R18). Zero when the provider states none.
	ExpectedBy time.Time
}

// LookupResult is the outcome of a lookup by reference. Found == false with a
// nil error means the provider answered "not found", which is NOT proof of
// absence before the consistency window has passed (R16).
type LookupResult struct {
	Exchange      Exchange
	Found         bool
	ProviderID    string
	State         State
	Amount        string
	Currency      string
	FailureCode   string
	FailureReason string
	Data          []byte
	// ExpectedBy as SubmitResult.ExpectedBy.
	ExpectedBy time.Time
}

// WebhookEvent is a verified event from the provider.
type WebhookEvent struct {
	// ID is the provider's event id, for deduplication.
	ID string
	// Type is the provider's event type, for logs.
	Type      string
	Operation Operation
	// Direction, when the event cannot name its operation (a Pix send:
	// pix_transfer and bank_payout send alike, and a notice need not say
	// which), still says which way its operation moves money: it then
	// matches only attempts of that direction (R17). "" when it names its
	// Operation (which implies the direction) or says neither.
	Direction  Direction
	Reference  string
	ProviderID string
	State      State
	// FailureCode and FailureReason when State is failed.
	FailureCode   string
	FailureReason string
	Amount        string
	Currency      string
	OccurredAt    time.Time
	Data          []byte
	// ExpectedBy as SubmitResult.ExpectedBy.
	ExpectedBy time.Time
	// Dispute, when set, says the event is about a card dispute of the
	// payment ProviderID names (Amount and Currency are the disputed
	// amount's), not a report of an operation's state: Reference is then
	// the dispute's own id (never an attempt reference) and State
	// processing, so a consumer that does not know disputes moves nothing.
	Dispute *Dispute
}

// Dispute is a card dispute as a provider reports it: a cardholder asked
// the card network for a paid charge's money back.
type Dispute struct {
	// ID is the provider's dispute id; Status and Reason its words
	// (Stripe: needs_response, under_review, won, lost, warning_*;
	// fraudulent, product_not_received, ...).
	ID, Status, Reason string
	// Withdrawn: the provider took, or has taken, the disputed money from
	// the platform's balance (a chargeback, whatever became of it since),
	// not an inquiry that takes nothing.
	Withdrawn bool
	// Reinstated: the money came back (the dispute was won).
	Reinstated bool
	// Lost: the dispute is closed and the money stays withdrawn.
	Lost bool
}

// Storable reports a verified event that PostgreSQL could not store or
// look up (ErrMalformedWebhook): a text field with NUL or invalid UTF-8,
// or Data that is not JSON jsonb accepts (no \u0000). A signature proves
// who sent an event, not that its content is sane.
func (e WebhookEvent) Storable() error {
	for _, f := range []struct{ name, v string }{{"id", e.ID}, {"type", e.Type}, {"operation", string(e.Operation)},
		{"direction", string(e.Direction)},
		{"reference", e.Reference}, {"provider id", e.ProviderID}, {"state", string(e.State)},
		{"failure code", e.FailureCode}, {"failure reason", e.FailureReason}, {"amount", e.Amount}, {"currency", e.Currency},
		{"dispute", e.disputeText()}} {
		if !pgtext.Valid(f.v) {
			return fmt.Errorf("%w: its %s holds NUL or invalid UTF-8", ErrMalformedWebhook, f.name)
		}
	}
	if !utf8.Valid(e.Data) || bytes.IndexByte(e.Data, 0) >= 0 || escapesNUL(e.Data) {
		return fmt.Errorf("%w: its data holds NUL or invalid UTF-8", ErrMalformedWebhook)
	}
	// The provider id is indexed (unique per provider once an attempt
	// holds it): a btree entry holds at most about 2.7 KB, and a random
	// 4000-character id, which PostgreSQL cannot compress, failed the write
	// with a 500 on every redelivery. No provider's ids come near the
	// bound. (A long event id is kept by its hash.)
	if len(e.ProviderID) > MaxProviderIDLength {
		return fmt.Errorf("%w: its provider id is longer than %d bytes", ErrMalformedWebhook, MaxProviderIDLength)
	}
	return nil
}

// disputeText is the text fields of e's dispute, for Storable.
func (e WebhookEvent) disputeText() string {
	if e.Dispute == nil {
		return ""
	}
	return e.Dispute.ID + e.Dispute.Status + e.Dispute.Reason
}

// MaxProviderIDLength bounds the provider id a provider's event may carry.
const MaxProviderIDLength = 255

// escapesNUL reports whether JSON text holds the escape \u0000, which jsonb
// refuses. An escaped backslash followed by u0000 (\\u0000 in the JSON) is
// the six characters \u0000, not a NUL.
func escapesNUL(data []byte) bool {
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' || i+1 == len(data) {
			continue
		}
		if data[i+1] == 'u' && bytes.HasPrefix(data[i+2:], []byte("0000")) {
			return true
		}
		i++ // the escaped character
	}
	return false
}

// StatementEntry is one operation in a provider's daily statement (R19).
type StatementEntry struct {
	Operation  Operation
	Reference  string
	ProviderID string
	State      State
	Amount     string
	Currency   string
	At         time.Time
}

// Errors shared by adapters.
var (
	// ErrUnsupported: the provider does not support this operation or call.
	ErrUnsupported = errors.New("providers: operation not supported by this provider")
	// ErrInvalidInput: EncodePayload refused the input; nothing was sent.
	ErrInvalidInput = errors.New("providers: invalid operation input")
	// ErrBadSignature: a webhook's signature did not verify.
	ErrBadSignature = errors.New("providers: webhook signature invalid")
	// ErrStaleWebhook: a webhook's timestamp is outside the tolerance.
	ErrStaleWebhook = errors.New("providers: webhook timestamp outside tolerance")
	// ErrMalformedWebhook: a verified webhook body could not be parsed.
	ErrMalformedWebhook = errors.New("providers: webhook body malformed")
)

// Provider is one PSP adapter.
//
// Submit and Lookup make exactly ONE HTTP exchange each and never retry:
// repetition is the attempts core's decision, made by a queued job (R12).
// Neither returns an error for provider answers or transport failures: those
// are described by the result's Exchange and read by the classifier.
type Provider interface {
	// Name is the stable provider name stored on attempts ("sim", "stripe").
	Name() string
	// Capabilities declares what the provider can do.
	Capabilities() Capabilities
	// EncodePayload turns a neutral input into the exact request body this
	// adapter will send. Called once, when the attempt opens; the bytes are
	// stored and re-sent verbatim. reference is the attempt's reference, for
	// adapters that put it in the body. Returns ErrInvalidInput or
	// ErrUnsupported (wrapped) for input it refuses.
	EncodePayload(in OperationInput, reference string) ([]byte, error)
	// Submit sends req.Payload once.
	Submit(ctx context.Context, req SubmitRequest) SubmitResult
	// Lookup queries an operation by our reference. err is non-nil only when
	// the provider cannot be queried by reference (ErrUnsupported); transport
	// failures are in the result's Exchange.Err.
	Lookup(ctx context.Context, op Operation, reference string) (LookupResult, error)
	// ParseWebhook verifies the signature and timestamp of a webhook and
	// parses it. Errors: ErrBadSignature, ErrStaleWebhook, ErrMalformedWebhook.
	ParseWebhook(header http.Header, body []byte, now time.Time) (WebhookEvent, error)
	// Statement lists the operations the provider executed on the UTC day
	// that contains day (R19). ErrUnsupported when Capabilities.Statements is false.
	Statement(ctx context.Context, day time.Time) ([]StatementEntry, error)
}

// Recaller is an optional Provider interface for an adapter whose lookup
// address is not the reference alone (a Pix refund's GET names the Pix it
// returns, which only the request holds). Before every lookup of an
// attempt, the attempts core hands the adapter the attempt's stored
// payload (the exact bytes EncodePayload made): a process that never saw
// the attempt opened or sent (a restart, another process) then looks it up
// with one exchange.
type Recaller interface {
	Recall(op Operation, reference string, payload []byte)
}

// Identity says which account at which PSP a provider name is configured
// for (R4, R8, R16). Attempts keep only the provider's name: a lookup made
// by another process, or after a restart, asks the account that process's
// configuration names. Were it another account, it would answer "not
// found", the attempt would fail after the consistency window, its reserve
// would be freed and the retry would pay a second time. saldo serve records
// each name's identity and refuses to start when the configured one
// differs (cmd/saldo, provider_identities).
type Identity struct {
	// Account describes, without any secret, which account at which PSP
	// ("stripe account acct_1 (live mode)", "sim at http://sim:8089"). It
	// is compared, as text, with the one recorded at the last start. Empty
	// when it could not be learned (Identity's error says why).
	Account string
	// Config is the non-secret configuration that chooses the account
	// (URLs, client id, Pix keys). Always set, even with an error.
	Config string
	// Secret is the credential that chooses the account (an API key, an
	// OAuth2 client secret), when there is one. Only a keyed hash of it is
	// ever stored, in the configuration's fingerprint.
	Secret Secret
}

// Identifier is an optional Provider interface: an adapter that can say
// which account at which PSP it is configured for.
type Identifier interface {
	// Identity learns the configured account. An adapter that needs the
	// PSP to tell (Stripe: which account the key belongs to) makes one
	// exchange bounded by ctx; when the PSP does not answer it returns an
	// error with Config and Secret still set, and the caller falls back to
	// the configuration's fingerprint.
	Identity(ctx context.Context) (Identity, error)
}
