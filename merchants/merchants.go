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
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	tx, err := ledger.Post(ctx, db, ledger.TransactionInput{
		IdempotencyKey: key,
		CauseKind:      CauseFunding,
		CauseID:        f.MerchantID,
		Description:    f.Reason,
		Metadata:       map[string]string{"actor": f.Actor, "merchant_id": f.MerchantID},
		Postings: []ledger.PostingInput{
			{AccountID: funding.ID, Amount: amt.Neg(), Currency: cur},
			{AccountID: avail.ID, Amount: amt, Currency: cur},
		},
	})
	if err == nil && tx.Replayed && tx.Description != f.Reason {
		// The ledger tells a replay from a conflict by its cause and legs;
		// a funding's reason is part of the request too: the same key
		// with another reason is another adjustment, refused, never
		// answered with the first one (R4).
		return ledger.Transaction{}, &ledger.IdempotencyConflictError{Key: key, ExistingTransactionID: tx.ID}
	}
	return tx, err
}
