// Package ledger is saldo's double-entry ledger: accounts, transactions made
// of postings that sum to zero per currency, balances kept in the same
// database transaction as the postings, and an append-only, tamper-evident
// history.
//
// # Model
//
// An Account belongs to an owner (a merchant, the platform or a provider),
// has a purpose (available, reserved, clearing, fees, funding, suspense, ...)
// and a currency, and either may or may not go negative. Its code is stable
// and readable: merchant/m_42/available/BRL.
//
// A Transaction is two or more postings. A posting adds its signed amount to
// its account's balance (balance += amount); the amounts of one transaction
// sum to zero per currency. This is checked in Go before anything is sent and
// again by the database functions that write it (ledger_post,
// ledger_post_batch), which are the only writers: they run as the tables'
// owner, and the role saldo serves as may read the tables but not write them
// (migration 00100, migrations.GrantApplicationRole), so code that bypasses
// this package cannot commit an unbalanced transaction either. An account
// that forbids negatives is protected by a CHECK constraint on its balance
// column (docs/rules.md R23).
//
// Every posting records the account's balance after it, a gap-free
// per-account sequence number and a sha256 over its canonical content chained
// to the previous posting of the same account. The chain is per account and
// computed under the account row lock the write holds anyway: there is no
// ledger-wide lock. Accounts opened since migration 00108 chain version 2:
// each posting's hash also covers its transaction's cause, reversed
// transaction and idempotency key, and the chain starts from a genesis hash
// of the account's identity, so re-attributing a transaction or changing an
// account's identity breaks it; older accounts stay version 1
// (docs/architecture.md, "The ledger's hash chain"). Transactions and postings cannot be updated or deleted
// (triggers refuse it); a correction is a reversal (Reverse). Verify replays
// the whole history and reports any damage.
//
// # Transactions and DBTX
//
// Every function takes a DBTX: a pgx.Tx, a *pgxpool.Pool or a *pgx.Conn. Pass
// the caller's pgx.Tx to make a ledger write part of a larger unit of work
// ("open attempt + reserve funds + enqueue job" in one commit, R22). Given a
// pool or a connection, each write function is still atomic: Post and
// Reverse's write are a single SQL statement (one round trip) and
// EnsureAccount is idempotent.
//
// Post never aborts the caller's transaction for an expected refusal
// (insufficient funds, idempotency conflict, unknown account): the database
// function reports the refusal as a result and writes nothing. Callers must
// run at READ COMMITTED (PostgreSQL's default), which the idempotency race
// handling relies on.
package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what the ledger needs from a database handle. pgx.Tx, *pgx.Conn and
// *pgxpool.Pool satisfy it.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Sentinel errors. Errors returned by this package match them with
// errors.Is; some come as typed errors carrying details (errors.As).
var (
	// ErrInvalidInput: the request is malformed (missing key, fewer than two
	// postings, zero amount, too many decimal places, bad code, ...).
	ErrInvalidInput = errors.New("ledger: invalid input")
	// ErrUnbalanced: the postings do not sum to zero per currency.
	ErrUnbalanced = errors.New("ledger: postings do not sum to zero per currency")
	// ErrInsufficientFunds: the transaction would take an account that forbids
	// negatives below zero. Returned as *InsufficientFundsError.
	ErrInsufficientFunds = errors.New("ledger: insufficient funds")
	// ErrIdempotencyConflict: the idempotency key was already used for a
	// different transaction. Returned as *IdempotencyConflictError.
	ErrIdempotencyConflict = errors.New("ledger: idempotency key reused with different postings")
	// ErrAccountNotFound: no account with that id or code.
	ErrAccountNotFound = errors.New("ledger: account not found")
	// ErrAccountMismatch: EnsureAccount found an account with the same code
	// but a different AllowNegative.
	ErrAccountMismatch = errors.New("ledger: account exists with a different definition")
	// ErrCurrencyMismatch: a posting's currency is not its account's.
	ErrCurrencyMismatch = errors.New("ledger: posting currency differs from account currency")
	// ErrTransactionNotFound: no transaction with that id.
	ErrTransactionNotFound = errors.New("ledger: transaction not found")
	// ErrAlreadyReversed: the transaction was already reversed (by another
	// idempotency key).
	ErrAlreadyReversed = errors.New("ledger: transaction already reversed")
	// ErrInvalidCursor: a pagination cursor this package did not issue.
	ErrInvalidCursor = errors.New("ledger: invalid cursor")
	// ErrCursorAhead (with ErrInvalidCursor): a statement cursor names an
	// account or a position this database does not have. Forged or
	// foreign on the primary; on a replica that is behind, possibly a
	// cursor the primary issued (api: the primary answers instead).
	ErrCursorAhead = errors.New("ledger: cursor ahead of this database's history")
)

// InsufficientFundsError names the account that would have gone negative.
type InsufficientFundsError struct {
	AccountCode string
}

func (e *InsufficientFundsError) Error() string {
	return fmt.Sprintf("ledger: insufficient funds in %s", e.AccountCode)
}

// Unwrap makes errors.Is(err, ErrInsufficientFunds) true.
func (e *InsufficientFundsError) Unwrap() error { return ErrInsufficientFunds }

// IdempotencyConflictError names the key and the transaction that already
// holds it.
type IdempotencyConflictError struct {
	Key                   string
	ExistingTransactionID int64
}

func (e *IdempotencyConflictError) Error() string {
	return fmt.Sprintf("ledger: idempotency key %q already posted as transaction %d with different postings",
		e.Key, e.ExistingTransactionID)
}

// Unwrap makes errors.Is(err, ErrIdempotencyConflict) true.
func (e *IdempotencyConflictError) Unwrap() error { return ErrIdempotencyConflict }

// mapPgError turns the database's own refusals into typed errors, for code
// paths where the database rather than ledger_post spoke (a caller that
// bypassed Post, or a refusal at COMMIT).
func mapPgError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.ConstraintName {
	case "ledger_accounts_no_overdraft":
		return fmt.Errorf("%w: %s", &InsufficientFundsError{AccountCode: "(see database detail)"}, pgErr.Detail)
	case "ledger_transaction_balanced":
		return fmt.Errorf("%w: %s", ErrUnbalanced, pgErr.Message)
	case "ledger_postings_account":
		return fmt.Errorf("%w: %s", ErrAccountNotFound, pgErr.Message)
	case "ledger_postings_transaction":
		return fmt.Errorf("%w: %s", ErrTransactionNotFound, pgErr.Message)
	case "ledger_accounts_valid", "ledger_transactions_valid", "ledger_postings_valid":
		return fmt.Errorf("%w: %s", ErrInvalidInput, pgErr.Message)
	}
	return err
}

// MapCommitError translates an error returned by committing a transaction
// that contains ledger writes: the write functions' refusals and the
// overdraft CHECK become ErrUnbalanced, ErrInvalidInput and
// ErrInsufficientFunds. Other errors are returned unchanged.
func MapCommitError(err error) error {
	if err == nil {
		return nil
	}
	return mapPgError(err)
}
