package ledger

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/money"
)

// PostingInput is one leg of a transaction to post. Name the account by ID or
// by Code (exactly one). Amount is signed: the account's balance grows by it
// (negative debits an asset-like balance such as merchant available).
type PostingInput struct {
	AccountID   int64
	AccountCode string
	Amount      decimal.Decimal
	Currency    money.Currency
}

// TransactionInput is a transaction to post.
type TransactionInput struct {
	// IdempotencyKey identifies the intent (1-255 characters). Posting the
	// same key again with the same cause and legs returns the original
	// transaction and writes nothing; with different ones it fails with
	// ErrIdempotencyConflict. The request compared is the cause, the
	// reversed transaction and the legs in order, as (account id, amount,
	// currency) after account codes are resolved: naming an account by code
	// once and by id the next time is the same request; listing the legs in
	// another order is not. Description, Metadata and EffectiveAt are not
	// compared.
	IdempotencyKey string
	// CauseKind and CauseID name what caused the transaction, e.g. "attempt"
	// and the attempt id. CauseKind is a lowercase word.
	CauseKind string
	CauseID   string
	// Description is free text for humans (at most 1000 characters).
	Description string
	// Metadata is stored as a JSON object.
	Metadata map[string]string
	// EffectiveAt is when the movement happened in the business sense; zero
	// means the posting time. Balances and their history follow posting
	// order (PostedAt), not EffectiveAt.
	EffectiveAt time.Time
	// Postings are the legs, applied in order: at least two, summing to zero
	// per currency. Every intermediate balance of an account that forbids
	// negatives must stay >= 0.
	Postings []PostingInput
}

// Transaction is a posted transaction.
type Transaction struct {
	ID             int64
	IdempotencyKey string
	CauseKind      string
	CauseID        string
	Description    string
	Metadata       map[string]string
	EffectiveAt    time.Time
	// PostedAt is the database clock when the transaction was posted; it
	// never goes backwards for any account it touches.
	PostedAt time.Time
	// ReversesID is the transaction this one reverses (0: none).
	ReversesID int64
	Postings   []Posting
	// Replayed is set by Post and Reverse when the idempotency key had
	// already been posted and this is the original transaction.
	Replayed bool
}

// Posting is one leg of a posted transaction.
type Posting struct {
	TransactionID int64
	Leg           int // 1-based position in the transaction
	AccountID     int64
	AccountCode   string
	// Seq is the posting's number in its account's history: 1, 2, 3, ...
	// with no gaps.
	Seq          int64
	Amount       decimal.Decimal
	Currency     money.Currency
	BalanceAfter decimal.Decimal
	PostedAt     time.Time
	// Hash is sha256 over the posting's canonical content and the previous
	// posting's hash of the same account.
	Hash []byte
}

// Limits on transaction input.
const (
	MaxLegs           = 1000
	maxKeyLength      = 255
	maxDescription    = 1000
	maxMetadataFields = 64
)

var causeKindPattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidInput}, args...)...)
}

// Validate checks the input without touching the database: required
// fields, at least two legs, non-zero amounts within the currency's minor
// units, and the zero sum per currency (ErrUnbalanced).
func (in TransactionInput) Validate() error {
	if n := len(in.IdempotencyKey); n == 0 || n > maxKeyLength {
		return invalid("idempotency key must have 1 to %d characters", maxKeyLength)
	}
	if !causeKindPattern.MatchString(in.CauseKind) {
		return invalid("cause kind %q (lowercase word, at most 40 characters)", in.CauseKind)
	}
	if n := len(in.CauseID); n == 0 || n > maxKeyLength {
		return invalid("cause id must have 1 to %d characters", maxKeyLength)
	}
	if len([]rune(in.Description)) > maxDescription {
		return invalid("description longer than %d characters", maxDescription)
	}
	if len(in.Metadata) > maxMetadataFields {
		return invalid("more than %d metadata fields", maxMetadataFields)
	}
	if len(in.Postings) < 2 {
		return invalid("a transaction needs at least two postings, got %d", len(in.Postings))
	}
	if len(in.Postings) > MaxLegs {
		return invalid("more than %d postings", MaxLegs)
	}
	sums := map[money.Currency]decimal.Decimal{}
	for i, p := range in.Postings {
		leg := i + 1
		if (p.AccountID != 0) == (p.AccountCode != "") {
			return invalid("posting %d: name the account by id or by code (exactly one)", leg)
		}
		if p.AccountID < 0 {
			return invalid("posting %d: account id %d", leg, p.AccountID)
		}
		if p.Currency.IsZero() {
			return invalid("posting %d: no currency", leg)
		}
		if p.Amount.IsZero() {
			return invalid("posting %d: zero amount", leg)
		}
		if _, err := money.New(p.Amount, p.Currency); err != nil {
			return invalid("posting %d: %v", leg, err)
		}
		sums[p.Currency] = sums[p.Currency].Add(p.Amount)
	}
	for cur, s := range sums {
		if !s.IsZero() {
			return fmt.Errorf("%w: %s postings sum to %s", ErrUnbalanced, cur.Code(), s.String())
		}
	}
	return nil
}

// Post posts a balanced transaction in one round trip and returns it, with
// each posting's sequence number, balance after and hash.
//
// Given a pgx.Tx, the posting becomes part of the caller's transaction (and
// the account rows stay locked until it ends); given a pool or connection,
// it commits on its own. Post locks the accounts in id order, so concurrent
// transfers never deadlock each other.
//
// Errors: ErrInvalidInput, ErrUnbalanced (nothing sent); and, with nothing
// written and the caller's transaction still usable,
// *InsufficientFundsError, *IdempotencyConflictError, ErrAccountNotFound,
// ErrCurrencyMismatch. A replay of an already posted key returns the
// original transaction with Replayed set.
func Post(ctx context.Context, db DBTX, in TransactionInput) (Transaction, error) {
	if err := in.Validate(); err != nil {
		return Transaction{}, err
	}
	return post(ctx, db, in, 0)
}

// post is postOnce with its latency recorded (saldo_ledger_post_duration_seconds).
func post(ctx context.Context, db DBTX, in TransactionInput, reversesID int64) (Transaction, error) {
	start := time.Now()
	tx, err := postOnce(ctx, db, in, reversesID)
	observePost(start, tx, err)
	return tx, err
}

// postSQL calls ledger_post; postArgs gives its arguments.
const postSQL = `
		SELECT outcome, detail, transaction_id, posted_at, leg, account_id, account_code, seq,
		       balance_after::text, hash
		FROM ledger_post($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::numeric[], $11)`

func postArgs(in TransactionInput, reversesID int64) []any {
	n := len(in.Postings)
	ids := make([]int64, n)
	codes := make([]string, n)
	amounts := make([]string, n)
	currencies := make([]string, n)
	for i, p := range in.Postings {
		ids[i], codes[i], amounts[i], currencies[i] = p.AccountID, p.AccountCode, p.Amount.String(), p.Currency.Code()
	}
	metadata, effective := in.optionalArgs()
	var reverses any
	if reversesID != 0 {
		reverses = reversesID
	}
	return []any{in.IdempotencyKey, in.CauseKind, in.CauseID, in.Description, metadata, effective, reverses,
		ids, codes, amounts, currencies}
}

// optionalArgs gives the metadata and effective time as SQL arguments:
// NULL when unset, so the database applies its defaults.
func (in TransactionInput) optionalArgs() (metadata, effective any) {
	if len(in.Metadata) > 0 {
		metadata = in.Metadata
	}
	if !in.EffectiveAt.IsZero() {
		effective = in.EffectiveAt
	}
	return metadata, effective
}

// postAnswer is what ledger_post answered: the outcome, and for "posted"
// the transaction.
type postAnswer struct {
	outcome    string
	detail     string
	existingID int64
	tx         Transaction
}

// readPostRows reads ledger_post's rows (and closes them).
func readPostRows(rows pgx.Rows, in TransactionInput, reversesID int64) (postAnswer, error) {
	defer rows.Close()
	a := postAnswer{tx: Transaction{
		IdempotencyKey: in.IdempotencyKey, CauseKind: in.CauseKind, CauseID: in.CauseID,
		Description: in.Description, Metadata: in.Metadata, ReversesID: reversesID,
		Postings: make([]Posting, 0, len(in.Postings)),
	}}
	var detail *string
	for rows.Next() {
		var (
			txID, accountID, seq *int64
			postedAt             *time.Time
			leg                  *int32
			code, balance        *string
			hash                 []byte
		)
		if err := rows.Scan(&a.outcome, &detail, &txID, &postedAt, &leg, &accountID, &code, &seq, &balance, &hash); err != nil {
			return a, fmt.Errorf("ledger: post %q: %w", in.IdempotencyKey, err)
		}
		if a.outcome != "posted" {
			if txID != nil {
				a.existingID = *txID
			}
			continue
		}
		a.tx.ID, a.tx.PostedAt = *txID, *postedAt
		p := in.Postings[*leg-1]
		bal, err := decimal.NewFromString(*balance)
		if err != nil {
			return a, fmt.Errorf("ledger: post %q: balance %q: %w", in.IdempotencyKey, *balance, err)
		}
		a.tx.Postings = append(a.tx.Postings, Posting{
			TransactionID: *txID, Leg: int(*leg), AccountID: *accountID, AccountCode: *code, Seq: *seq,
			Amount: p.Amount, Currency: p.Currency, BalanceAfter: bal, PostedAt: *postedAt, Hash: hash,
		})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return a, fmt.Errorf("ledger: post %q: %w", in.IdempotencyKey, mapPgError(err))
	}
	if detail != nil {
		a.detail = *detail
	}
	if a.outcome == "posted" {
		a.tx.EffectiveAt = in.EffectiveAt
		if a.tx.EffectiveAt.IsZero() {
			a.tx.EffectiveAt = a.tx.PostedAt
		}
	}
	return a, nil
}

// result turns an answer into Post's result; a replay reads the original
// transaction through db.
func (a postAnswer) result(ctx context.Context, db DBTX, key string) (Transaction, error) {
	d := a.detail
	switch a.outcome {
	case "posted":
		return a.tx, nil
	case "existing":
		orig, err := TransactionByID(ctx, db, a.existingID)
		if err != nil {
			return Transaction{}, err
		}
		orig.Replayed = true
		return orig, nil
	case "conflict":
		return Transaction{}, &IdempotencyConflictError{Key: key, ExistingTransactionID: a.existingID}
	case "insufficient_funds":
		return Transaction{}, &InsufficientFundsError{AccountCode: d}
	case "unknown_account":
		return Transaction{}, fmt.Errorf("%w: %s", ErrAccountNotFound, d)
	case "currency_mismatch":
		return Transaction{}, fmt.Errorf("%w: account %s", ErrCurrencyMismatch, d)
	case "not_found":
		return Transaction{}, fmt.Errorf("%w: %s", ErrTransactionNotFound, d)
	case "already_reversed":
		return Transaction{}, fmt.Errorf("%w: transaction %s reversed by transaction %d", ErrAlreadyReversed, d, a.existingID)
	case "":
		return Transaction{}, fmt.Errorf("ledger: post %q: database returned no outcome", key)
	}
	return Transaction{}, fmt.Errorf("ledger: post %q: unexpected outcome %q", key, a.outcome)
}

func postOnce(ctx context.Context, db DBTX, in TransactionInput, reversesID int64) (Transaction, error) {
	rows, err := db.Query(ctx, postSQL, postArgs(in, reversesID)...)
	if err != nil {
		return Transaction{}, fmt.Errorf("ledger: post %q: %w", in.IdempotencyKey, mapPgError(err))
	}
	a, err := readPostRows(rows, in, reversesID)
	if err != nil {
		return Transaction{}, err
	}
	return a.result(ctx, db, in.IdempotencyKey)
}

// CauseReversal is the CauseKind of reversal transactions; their CauseID is
// the reversed transaction's id.
const CauseReversal = "reversal"

// Reverse posts the exact negation of transaction originalID (every leg with
// its amount negated, in the same order), linked to it by ReversesID, under
// idempotency key key. A transaction is reversed at most once: reversing it
// again under another key is ErrAlreadyReversed; under the same key it
// returns the existing reversal. Reversing money that has since been spent
// from an account that forbids negatives is ErrInsufficientFunds.
func Reverse(ctx context.Context, db DBTX, originalID int64, key, reason string) (Transaction, error) {
	orig, err := TransactionByID(ctx, db, originalID)
	if err != nil {
		return Transaction{}, err
	}
	in := TransactionInput{
		IdempotencyKey: key,
		CauseKind:      CauseReversal,
		CauseID:        strconv.FormatInt(originalID, 10),
		Description:    reason,
		Metadata:       map[string]string{"reverses_key": orig.IdempotencyKey},
	}
	for _, p := range orig.Postings {
		in.Postings = append(in.Postings, PostingInput{AccountID: p.AccountID, Amount: p.Amount.Neg(), Currency: p.Currency})
	}
	if err := in.Validate(); err != nil {
		return Transaction{}, err
	}
	tx, err := post(ctx, db, in, originalID)
	if err != nil && errors.Is(err, ErrTransactionNotFound) {
		return Transaction{}, fmt.Errorf("ledger: reverse %d: %w", originalID, err)
	}
	return tx, err
}

// PostMany posts several balanced transactions as part of the caller's
// transaction tx and returns them in order. It is Post for many at once:
// one ledger_post_batch call (every account locked in id order, running
// balances and hashes computed together, one write) when nothing in ins
// would be refused or replayed; otherwise every account is locked in id
// order and each transaction goes through Post in turn.
//
// On error nothing is reported posted, but transactions before the failing
// one may be written in tx: roll tx back. A refusal is a *BatchError naming
// the transaction, which unwraps to Post's error (errors.As finds an
// *InsufficientFundsError).
func PostMany(ctx context.Context, tx pgx.Tx, ins []TransactionInput) ([]Transaction, error) {
	if len(ins) == 0 {
		return nil, nil
	}
	for i, in := range ins {
		if err := in.Validate(); err != nil {
			return nil, &BatchError{Index: i, Key: in.IdempotencyKey, Err: err}
		}
	}
	start := time.Now()
	answers, ok, err := postSetBased(ctx, tx, ins)
	if err != nil {
		return nil, err
	}
	out := make([]Transaction, len(ins))
	if ok {
		for i, a := range answers {
			out[i] = a.tx
			observePost(start, out[i], nil)
		}
		return out, nil
	}
	ids, codes := legAccounts(ins, nil, nil)
	if _, err := tx.Exec(ctx, lockAccountsSQL, ids, codes); err != nil {
		return nil, fmt.Errorf("ledger: lock accounts of a batch of %d: %w", len(ins), mapPgError(err))
	}
	for i, in := range ins {
		t, err := post(ctx, tx, in, 0)
		if err != nil {
			return nil, &BatchError{Index: i, Key: in.IdempotencyKey, Err: err}
		}
		out[i] = t
	}
	return out, nil
}

// BatchError is PostMany's refusal of one transaction of the batch.
type BatchError struct {
	Index int    // position in the batch
	Key   string // its idempotency key
	Err   error  // what Post would have returned
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("ledger: transaction %d (%q) of a batch: %v", e.Index, e.Key, e.Err)
}

// Unwrap returns the refusal.
func (e *BatchError) Unwrap() error { return e.Err }

// legAccounts appends to ids and codes the accounts ins's legs name (by id,
// or by code when they give no id): what lockAccountsSQL locks.
func legAccounts(ins []TransactionInput, ids []int64, codes []string) ([]int64, []string) {
	for _, in := range ins {
		for _, leg := range in.Postings {
			if leg.AccountID != 0 {
				ids = append(ids, leg.AccountID)
			} else {
				codes = append(codes, leg.AccountCode)
			}
		}
	}
	return ids, codes
}
