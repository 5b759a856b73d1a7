package ledger

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/money"
)

// OwnerKind says who an account belongs to.
type OwnerKind string

// The owner kinds.
const (
	OwnerMerchant OwnerKind = "merchant"
	OwnerPlatform OwnerKind = "platform"
	OwnerProvider OwnerKind = "provider"
)

// Purpose says what an account's balance means. Any lowercase word
// ([a-z][a-z0-9_]*, up to 32 characters) is allowed; these are the ones saldo
// uses.
type Purpose string

// The purposes saldo uses.
const (
	// PurposeAvailable: a merchant's money it may pay out now.
	PurposeAvailable Purpose = "available"
	// PurposeReserved: a merchant's money held for an open outgoing attempt
	// (R22); it goes back to available only when the attempt failed.
	PurposeReserved Purpose = "reserved"
	// PurposePending: a merchant's incoming money not yet available.
	PurposePending Purpose = "pending"
	// PurposeHeld: a merchant's money held while a divergence against it
	// is open (the provider contradicted a final attempt, and available
	// overstated what the merchant has: R9, R19, R22). Payouts reserve from
	// available only, so held money cannot be paid out; the operator's
	// settlement of the divergence releases it back to available or books
	// it as gone (package holds).
	PurposeHeld Purpose = "held"
	// PurposeClearing: money sent to or received from a provider, waiting for
	// the provider's settlement.
	PurposeClearing Purpose = "clearing"
	// PurposeFees: the platform's fee income.
	PurposeFees Purpose = "fees"
	// PurposeFunding: money entering or leaving the ledger from outside (its
	// balance is the negative of everything brought in); may go negative.
	PurposeFunding Purpose = "funding"
	// PurposeSuspense: amounts whose destination is not known yet
	// (reconciliation differences).
	PurposeSuspense Purpose = "suspense"
)

// PlatformID is the owner id of the platform's own accounts.
const PlatformID = "main"

// AccountSpec defines an account. Its Code is derived from the owner, the
// purpose and the currency, so the same spec always names the same account.
type AccountSpec struct {
	OwnerKind     OwnerKind
	OwnerID       string
	Purpose       Purpose
	Currency      money.Currency
	AllowNegative bool
}

var (
	ownerIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)
	purposePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
)

// Code returns the account's code: owner_kind/owner_id/purpose/currency.
func (s AccountSpec) Code() string {
	return string(s.OwnerKind) + "/" + s.OwnerID + "/" + string(s.Purpose) + "/" + s.Currency.Code()
}

// Validate reports whether the spec can name an account.
func (s AccountSpec) Validate() error {
	switch s.OwnerKind {
	case OwnerMerchant, OwnerPlatform, OwnerProvider:
	default:
		return fmt.Errorf("%w: owner kind %q (want merchant, platform or provider)", ErrInvalidInput, s.OwnerKind)
	}
	if !ownerIDPattern.MatchString(s.OwnerID) {
		return fmt.Errorf("%w: owner id %q (letters, digits, '_', '.', '-'; at most 63)", ErrInvalidInput, s.OwnerID)
	}
	if !purposePattern.MatchString(string(s.Purpose)) {
		return fmt.Errorf("%w: purpose %q (lowercase word)", ErrInvalidInput, s.Purpose)
	}
	if s.Currency.IsZero() {
		return fmt.Errorf("%w: account without currency", ErrInvalidInput)
	}
	return nil
}

// MerchantAvailable is a merchant's available balance; it never goes negative.
func MerchantAvailable(merchantID string, cur money.Currency) AccountSpec {
	return AccountSpec{OwnerMerchant, merchantID, PurposeAvailable, cur, false}
}

// MerchantReserved holds a merchant's money reserved for open outgoing
// attempts; it never goes negative.
func MerchantReserved(merchantID string, cur money.Currency) AccountSpec {
	return AccountSpec{OwnerMerchant, merchantID, PurposeReserved, cur, false}
}

// MerchantPending is a merchant's incoming money not yet available; it never
// goes negative.
func MerchantPending(merchantID string, cur money.Currency) AccountSpec {
	return AccountSpec{OwnerMerchant, merchantID, PurposePending, cur, false}
}

// MerchantHeld holds a merchant's money while a divergence against it is
// open (PurposeHeld); it never goes negative.
func MerchantHeld(merchantID string, cur money.Currency) AccountSpec {
	return AccountSpec{OwnerMerchant, merchantID, PurposeHeld, cur, false}
}

// ProviderClearing is the clearing account of a provider ("sim", "stripe",
// ...): money in transit to or from it. It may go negative (direction
// depends on the flow).
func ProviderClearing(provider string, cur money.Currency) AccountSpec {
	return AccountSpec{OwnerProvider, provider, PurposeClearing, cur, true}
}

// PlatformFees is the platform's fee income; it never goes negative.
func PlatformFees(cur money.Currency) AccountSpec {
	return AccountSpec{OwnerPlatform, PlatformID, PurposeFees, cur, false}
}

// PlatformFunding is the platform's external funding account: the
// counterpart of money entering the ledger from outside. It goes negative by
// design.
func PlatformFunding(cur money.Currency) AccountSpec {
	return AccountSpec{OwnerPlatform, PlatformID, PurposeFunding, cur, true}
}

// PlatformSuspense holds amounts waiting to be attributed; it may go negative.
func PlatformSuspense(cur money.Currency) AccountSpec {
	return AccountSpec{OwnerPlatform, PlatformID, PurposeSuspense, cur, true}
}

// ParseCode splits an account code into a spec (AllowNegative is not part of
// the code and is left false).
func ParseCode(code string) (AccountSpec, error) {
	parts := strings.Split(code, "/")
	if len(parts) != 4 {
		return AccountSpec{}, fmt.Errorf("%w: account code %q (want owner_kind/owner_id/purpose/currency)", ErrInvalidInput, code)
	}
	cur, err := money.LookupCurrency(parts[3])
	if err != nil {
		return AccountSpec{}, fmt.Errorf("%w: account code %q: %w", ErrInvalidInput, code, err)
	}
	s := AccountSpec{OwnerKind: OwnerKind(parts[0]), OwnerID: parts[1], Purpose: Purpose(parts[2]), Currency: cur}
	if err := s.Validate(); err != nil {
		return AccountSpec{}, err
	}
	return s, nil
}

// Account is a ledger account with its current balance.
type Account struct {
	ID            int64
	Code          string
	OwnerKind     OwnerKind
	OwnerID       string
	Purpose       Purpose
	Currency      money.Currency
	AllowNegative bool
	// Balance is the sum of every posting to the account.
	Balance decimal.Decimal
	// LastSeq is the sequence number of the newest posting (0: none yet).
	LastSeq   int64
	CreatedAt time.Time
}

// Spec returns the account's definition.
func (a Account) Spec() AccountSpec {
	return AccountSpec{a.OwnerKind, a.OwnerID, a.Purpose, a.Currency, a.AllowNegative}
}

const accountColumns = `id, code, owner_kind, owner_id, purpose, currency, allow_negative, balance::text, last_seq, created_at`

func scanAccount(row pgx.Row) (Account, error) {
	var (
		a             Account
		kind, purpose string
		cur, balance  string
	)
	if err := row.Scan(&a.ID, &a.Code, &kind, &a.OwnerID, &purpose, &cur, &a.AllowNegative, &balance, &a.LastSeq, &a.CreatedAt); err != nil {
		return Account{}, err
	}
	a.OwnerKind, a.Purpose = OwnerKind(kind), Purpose(purpose)
	var err error
	if a.Currency, err = money.LookupCurrency(cur); err != nil {
		return Account{}, fmt.Errorf("ledger: account %s: %w", a.Code, err)
	}
	if a.Balance, err = decimal.NewFromString(balance); err != nil {
		return Account{}, fmt.Errorf("ledger: account %s balance %q: %w", a.Code, balance, err)
	}
	return a, nil
}

// EnsureAccount returns the account the spec names, creating it if it does
// not exist. It is idempotent and safe when many callers race to create the
// same account (INSERT ... ON CONFLICT DO NOTHING, then read). An existing
// account with a different AllowNegative is ErrAccountMismatch.
func EnsureAccount(ctx context.Context, db DBTX, spec AccountSpec) (Account, error) {
	if err := spec.Validate(); err != nil {
		return Account{}, err
	}
	code := spec.Code()
	acc, err := scanAccount(db.QueryRow(ctx, `
		WITH ins AS (
			INSERT INTO ledger_accounts (code, owner_kind, owner_id, purpose, currency, allow_negative)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (code) DO NOTHING
			RETURNING `+accountColumns+`)
		SELECT * FROM ins
		UNION ALL
		SELECT `+accountColumns+` FROM ledger_accounts WHERE code = $1
		LIMIT 1`,
		code, string(spec.OwnerKind), spec.OwnerID, string(spec.Purpose), spec.Currency.Code(), spec.AllowNegative))
	if errors.Is(err, pgx.ErrNoRows) {
		// The row was committed by a concurrent creator after this
		// statement's snapshot was taken: a new statement sees it.
		acc, err = AccountByCode(ctx, db, code)
	}
	if err != nil {
		return Account{}, fmt.Errorf("ledger: ensure account %s: %w", code, err)
	}
	if acc.AllowNegative != spec.AllowNegative {
		return acc, fmt.Errorf("%w: %s has allow_negative=%t, asked for %t", ErrAccountMismatch, code, acc.AllowNegative, spec.AllowNegative)
	}
	return acc, nil
}

// AccountByCode returns the account with the code, or ErrAccountNotFound.
func AccountByCode(ctx context.Context, db DBTX, code string) (Account, error) {
	acc, err := scanAccount(db.QueryRow(ctx, `SELECT `+accountColumns+` FROM ledger_accounts WHERE code = $1`, code))
	if errors.Is(err, pgx.ErrNoRows) {
		return Account{}, fmt.Errorf("%w: %s", ErrAccountNotFound, code)
	}
	return acc, err
}

// AccountIDByCode returns the id of the account with the code, as db sees
// it, and whether the row version seen was written by a committed
// transaction (not by db's own, still open): only then may a caller cache
// the id beyond db's transaction, which might roll back the account's
// creation. ErrAccountNotFound when there is none.
func AccountIDByCode(ctx context.Context, db DBTX, code string) (id int64, committed bool, err error) {
	var mine *bool
	err = db.QueryRow(ctx, `SELECT id, xmin = pg_current_xact_id_if_assigned()::xid FROM ledger_accounts WHERE code = $1`,
		code).Scan(&id, &mine)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, fmt.Errorf("%w: %s", ErrAccountNotFound, code)
	}
	return id, err == nil && (mine == nil || !*mine), err
}

// AccountByID returns the account with the id, or ErrAccountNotFound.
func AccountByID(ctx context.Context, db DBTX, id int64) (Account, error) {
	acc, err := scanAccount(db.QueryRow(ctx, `SELECT `+accountColumns+` FROM ledger_accounts WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Account{}, fmt.Errorf("%w: id %d", ErrAccountNotFound, id)
	}
	return acc, err
}

// Balance returns the current balance of the account with the code, as an
// amount in the account's currency. It reads committed data (or the caller's
// transaction's own writes); it takes no lock.
func Balance(ctx context.Context, db DBTX, code string) (money.Amount, error) {
	acc, err := AccountByCode(ctx, db, code)
	if err != nil {
		return money.Amount{}, err
	}
	return money.New(acc.Balance, acc.Currency)
}

// MerchantBalance is a merchant's position in one currency.
type MerchantBalance struct {
	MerchantID string
	Currency   money.Currency
	// Available may be paid out now; Reserved is held for open attempts;
	// Pending is incoming money not yet available; Held is held while a
	// divergence against the merchant is open (PurposeHeld). Missing
	// accounts count as zero.
	Available decimal.Decimal
	Reserved  decimal.Decimal
	Pending   decimal.Decimal
	Held      decimal.Decimal
}

// MerchantBalances returns the merchant's balances, one entry per currency in
// which it has any account, sorted by currency code.
func MerchantBalances(ctx context.Context, db DBTX, merchantID string) ([]MerchantBalance, error) {
	rows, err := db.Query(ctx, `
		SELECT currency,
		       coalesce(sum(balance) FILTER (WHERE purpose = 'available'), 0)::text,
		       coalesce(sum(balance) FILTER (WHERE purpose = 'reserved'), 0)::text,
		       coalesce(sum(balance) FILTER (WHERE purpose = 'pending'), 0)::text,
		       coalesce(sum(balance) FILTER (WHERE purpose = 'held'), 0)::text
		FROM ledger_accounts
		WHERE owner_kind = 'merchant' AND owner_id = $1
		GROUP BY currency ORDER BY currency`, merchantID)
	if err != nil {
		return nil, fmt.Errorf("ledger: merchant balances: %w", err)
	}
	defer rows.Close()
	var out []MerchantBalance
	for rows.Next() {
		var cur, av, re, pe, he string
		if err := rows.Scan(&cur, &av, &re, &pe, &he); err != nil {
			return nil, err
		}
		c, err := money.LookupCurrency(cur)
		if err != nil {
			return nil, err
		}
		out = append(out, MerchantBalance{MerchantID: merchantID, Currency: c,
			Available: decimal.RequireFromString(av), Reserved: decimal.RequireFromString(re), Pending: decimal.RequireFromString(pe),
			Held: decimal.RequireFromString(he)})
	}
	return out, rows.Err()
}

// MerchantBalanceIn returns the merchant's balances in one currency (zeros
// when it has no account in it).
func MerchantBalanceIn(ctx context.Context, db DBTX, merchantID string, cur money.Currency) (MerchantBalance, error) {
	all, err := MerchantBalances(ctx, db, merchantID)
	if err != nil {
		return MerchantBalance{}, err
	}
	for _, b := range all {
		if b.Currency == cur {
			return b, nil
		}
	}
	return MerchantBalance{MerchantID: merchantID, Currency: cur}, nil
}
