// Package merchants holds the merchants that own balances, payouts and
// charges, and the admin funding adjustment that brings outside money into a
// merchant's available balance as a balanced ledger transaction.
package merchants

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/saldo/saldo/holds"
	"github.com/saldo/saldo/internal/dbfault"
	"github.com/saldo/saldo/internal/pgtext"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// Errors. Match with errors.Is.
var (
	ErrInvalid  = errors.New("merchants: invalid input")
	ErrNotFound = errors.New("merchants: not found")
	ErrExists   = errors.New("merchants: already exists")
)

// Merchant is an account holder of the platform.
type Merchant struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Create inserts a merchant. The id is chosen by the caller (lowercase
// letters, digits, '_' and '-', up to 63 characters) so ledger account codes
// stay readable: merchant/<id>/available/BRL.
func Create(ctx context.Context, db ledger.DBTX, id, name string) (Merchant, error) {
	name = strings.TrimSpace(name)
	if !idPattern.MatchString(id) {
		return Merchant{}, fmt.Errorf("%w: id %q: lowercase letters, digits, '_' or '-', 1-63 characters", ErrInvalid, id)
	}
	if name == "" || utf8.RuneCountInString(name) > 200 || !pgtext.Valid(name) {
		return Merchant{}, fmt.Errorf("%w: name must be 1-200 characters of valid UTF-8 without NUL", ErrInvalid)
	}
	m := Merchant{ID: id, Name: name}
	err := db.QueryRow(ctx, `INSERT INTO merchants (id, name) VALUES ($1, $2) RETURNING created_at`, id, name).Scan(&m.CreatedAt)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return Merchant{}, fmt.Errorf("%w: %s", ErrExists, id)
	}
	return m, err
}

// Get returns a merchant.
func Get(ctx context.Context, db ledger.DBTX, id string) (Merchant, error) {
	m := Merchant{ID: id}
	err := db.QueryRow(ctx, `SELECT name, created_at FROM merchants WHERE id = $1`, id).Scan(&m.Name, &m.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Merchant{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return m, err
}

// List returns merchants ordered by id, after the given id, at most limit
// (capped at 101: a page of 100 and whether another follows).
func List(ctx context.Context, db ledger.DBTX, after string, limit int) ([]Merchant, error) {
	if limit <= 0 || limit > 101 {
		limit = 101
	}
	rows, err := db.Query(ctx, `SELECT id, name, created_at FROM merchants WHERE id > $1 ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Merchant, error) {
		var m Merchant
		return m, r.Scan(&m.ID, &m.Name, &m.CreatedAt)
	})
}

// Funding is an admin adjustment: money entering (positive) or leaving
// (negative) a merchant's available balance from outside the ledger, against
// the platform's external funding account.
type Funding struct {
	MerchantID string
	Amount     money.Amount // non-zero; negative takes money out
	// Key makes the adjustment idempotent (required).
	Key string
	// Reason and Actor are recorded on the ledger transaction (required).
	Reason string
	Actor  string
	// Log is where a short hold the funding tops up is logged at ERROR
	// (holds.TopUp); nil: slog.Default().
	Log *slog.Logger
}

// CauseFunding is the ledger cause kind of funding adjustments.
const CauseFunding = "funding"

// maxLedgerKey is the ledger's longest idempotency key, in bytes
// (ledger.Post).
const maxLedgerKey = 255

// ClientFundingKey is Funding.Key for a funding requested through the API
// by API key keyID with Idempotency-Key idem: "<key id>:<idem>", so the
// ledger key is "funding:<merchant>:<key id>:<idem>" (R4: the key is the
// intent). The API takes Idempotency-Keys of up to 255 characters, which
// can make that ledger key longer than the ledger's 255: then the key is
// "<key id>:sha256:<hex of idem>". Short keys keep the first form, so every
// funding posted before still matches its repeat. An idem that itself
// begins with "sha256:" is always hashed: kept as is it could spell the
// hashed form of another, longer key, and two intents would share one
// ledger key (the second funding never posted; found by review).
func ClientFundingKey(merchantID, keyID, idem string) string {
	key := keyID + ":" + idem
	if len(ledgerFundingKey(merchantID, key)) <= maxLedgerKey && !strings.HasPrefix(idem, hashedPrefix) {
		return key
	}
	sum := sha256.Sum256([]byte(idem))
	return keyID + ":" + hashedPrefix + hex.EncodeToString(sum[:])
}

const hashedPrefix = "sha256:"

func ledgerFundingKey(merchantID, key string) string { return "funding:" + merchantID + ":" + key }

// Fund posts the adjustment as one balanced ledger transaction. A negative
// adjustment larger than the available balance fails with
// ledger.ErrInsufficientFunds and writes nothing. A repeat of f.Key with the
// same amount and reason returns the original (Replayed); with another
// amount, currency or reason it is a *ledger.IdempotencyConflictError.
//
// A positive adjustment tops up, in its own database transaction, the
// merchant's open short divergence holds in that currency, oldest first
// (holds.TopUp, key divergence_hold:<diverged attempt>:<the funding's
// ledger key>; R9, R21, R22): money brought in fills what a chargeback or
// a payout paid after it failed left short before it can be paid out. A
// replay tops up nothing. db is a pool or a connection (Fund runs its own
// transaction, again when PostgreSQL aborts it as a deadlock's victim) or
// the caller's transaction (Fund runs in a savepoint of it).
func Fund(ctx context.Context, db ledger.DBTX, f Funding) (ledger.Transaction, error) {
	switch {
	case !f.Amount.IsValid() || f.Amount.IsZero():
		return ledger.Transaction{}, fmt.Errorf("%w: amount must be non-zero", ErrInvalid)
	case f.Key == "":
		return ledger.Transaction{}, fmt.Errorf("%w: key is required", ErrInvalid)
	case strings.TrimSpace(f.Reason) == "" || strings.TrimSpace(f.Actor) == "":
		return ledger.Transaction{}, fmt.Errorf("%w: reason and actor are required", ErrInvalid)
	}
	if _, err := Get(ctx, db, f.MerchantID); err != nil {
		return ledger.Transaction{}, err
	}
	cur := f.Amount.Currency()
	spec := ledger.MerchantAvailable(f.MerchantID, cur)
	if f.Amount.Decimal().IsNegative() {
		// Nothing can be taken from an account that was never opened (and
		// no funding of this key was posted to it): refused before the
		// account is created, so a refused request writes nothing.
		_, err := ledger.AccountByCode(ctx, db, spec.Code())
		if errors.Is(err, ledger.ErrAccountNotFound) {
			return ledger.Transaction{}, &ledger.InsufficientFundsError{AccountCode: spec.Code()}
		}
		if err != nil {
			return ledger.Transaction{}, err
		}
	}
	avail, err := ledger.EnsureAccount(ctx, db, spec)
	if err != nil {
		return ledger.Transaction{}, err
	}
	funding, err := ledger.EnsureAccount(ctx, db, ledger.PlatformFunding(cur))
	if err != nil {
		return ledger.Transaction{}, err
	}
	amt := f.Amount.Decimal()
	key := ledgerFundingKey(f.MerchantID, f.Key)
	in := ledger.TransactionInput{
		IdempotencyKey: key,
		CauseKind:      CauseFunding,
		CauseID:        f.MerchantID,
		Description:    f.Reason,
		Metadata:       map[string]string{"actor": f.Actor, "merchant_id": f.MerchantID},
		Postings: []ledger.PostingInput{
			{AccountID: funding.ID, Amount: amt.Neg(), Currency: cur},
			{AccountID: avail.ID, Amount: amt, Currency: cur},
		},
	}
	if amt.IsPositive() {
		tx, err := fundTopUp(ctx, db, f, in)
		if !errors.Is(err, errFundingPosted) {
			return tx, err
		}
		// A funding under this key committed before this one's
		// transaction (or while it ran): answered as the ledger answers a
		// repeat (the original, or a conflict), with nothing topped up.
	}
	return post(ctx, db, f, in)
}

// post posts in alone: a negative adjustment, or the repeat of a key.
func post(ctx context.Context, db ledger.DBTX, f Funding, in ledger.TransactionInput) (ledger.Transaction, error) {
	tx, err := ledger.Post(ctx, db, in)
	if err == nil && tx.Replayed && tx.Description != f.Reason {
		// The ledger tells a replay from a conflict by its cause and legs;
		// a funding's reason is part of the request too: the same key
		// with another reason is another adjustment, refused, never
		// answered with the first one (R4).
		return ledger.Transaction{}, &ledger.IdempotencyConflictError{Key: in.IdempotencyKey, ExistingTransactionID: tx.ID}
	}
	return tx, err
}

// errFundingPosted: the funding's key is in the ledger already.
var errFundingPosted = errors.New("merchants: funding posted before")

// fundTries bounds the transactions fundTopUp runs when PostgreSQL aborts
// one as a deadlock's victim.
const fundTries = 3

// fundTopUp posts the positive funding in and the top-ups of the
// merchant's short holds it pays for in one database transaction: the
// divergences' rows first (holds.TopUp's one statement), then every
// account in id order (one ledger.Deferred), as every writer does
// (docs/pitfalls.md). errFundingPosted when the key was posted before
// (nothing written): the caller answers the repeat.
func fundTopUp(ctx context.Context, db ledger.DBTX, f Funding, in ledger.TransactionInput) (ledger.Transaction, error) {
	b, ok := db.(interface {
		Begin(context.Context) (pgx.Tx, error)
	})
	if !ok {
		return ledger.Transaction{}, fmt.Errorf("merchants: Fund needs a pool, a connection or a transaction, got %T", db)
	}
	log := f.Log
	if log == nil {
		log = slog.Default()
	}
	for try := 1; ; try++ {
		var posted ledger.Transaction
		err := pgx.BeginFunc(ctx, b, func(tx pgx.Tx) error {
			exists, err := keyPosted(ctx, tx, in.IdempotencyKey)
			if err != nil {
				return err
			}
			if exists {
				return errFundingPosted
			}
			var postings ledger.Deferred
			postings.Add([]ledger.TransactionInput{in}, nil, func(ts []ledger.Transaction) error {
				if ts[0].Replayed {
					// Committed by another request with this key since
					// the check: its top-ups are its own.
					return errFundingPosted
				}
				posted = ts[0]
				return nil
			})
			credit := holds.Credit{Cause: holds.CreditFunding, By: holds.FundingBy(in.IdempotencyKey),
				MerchantID: f.MerchantID, Currency: f.Amount.Currency()}
			if err := holds.TopUp(ctx, tx, log, []holds.Credit{credit}, &postings); err != nil {
				return err
			}
			return postings.Post(ctx, tx)
		})
		switch {
		case err == nil:
			return posted, nil
		case errors.Is(err, errFundingPosted):
			return ledger.Transaction{}, err
		case dbfault.Deadlock(err) && try < fundTries && ctx.Err() == nil:
			log.WarnContext(ctx, "merchants: funding transaction aborted by a deadlock; running it again",
				"merchant_id", f.MerchantID, "try", try, "error", err)
			continue
		}
		// A request with the same key that committed while this one ran
		// can make this one's top-up fail (its credit replayed, the hold
		// then finds less available): answered as a repeat.
		if exists, qerr := keyPosted(ctx, db, in.IdempotencyKey); qerr == nil && exists {
			return ledger.Transaction{}, errFundingPosted
		}
		return ledger.Transaction{}, err
	}
}

// keyPosted reports whether a ledger transaction with key exists.
func keyPosted(ctx context.Context, db ledger.DBTX, key string) (bool, error) {
	var exists bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ledger_transactions WHERE idempotency_key = $1)`, key).Scan(&exists)
	return exists, err
}
