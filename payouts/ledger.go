package payouts

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// Ledger causes of payout transactions. Each names the attempt (CauseID is
// the attempt id) and is posted under a key derived from it, so a repeated
// callback can never move money twice.
const (
	CauseReserve = "payout_reserve" // available -> reserved, when an attempt opens
	CauseSettle  = "payout_settle"  // reserved -> provider clearing, when it succeeds
	CauseRelease = "payout_release" // reserved -> available, when it failed
)

// accountCache maps account codes to ids. Only ids of accounts known to be
// committed are cached (accounts are never deleted or renamed, so such an id
// stays valid); an account created inside a transaction that then rolled
// back must never be cached.
type accountCache struct{ ids sync.Map } // code -> int64

// prepareAccounts makes sure the accounts a payout of this merchant and
// currency touches exist, committed on their own before the opening
// transaction (creating an account is harmless if the payout then fails).
// Inside transactions the ids then come from the cache, so no transaction
// ever waits for a second pool connection.
func (s *Service) prepareAccounts(ctx context.Context, merchantID, provider string, cur money.Currency) error {
	specs := []ledger.AccountSpec{ledger.MerchantAvailable(merchantID, cur), ledger.MerchantReserved(merchantID, cur)}
	for shard := range ClearingShards {
		specs = append(specs, clearingShard(provider, cur, shard))
	}
	for _, spec := range specs {
		if _, ok := s.accounts.ids.Load(spec.Code()); ok {
			continue
		}
		a, err := ledger.EnsureAccount(ctx, s.pool, spec)
		if err != nil {
			return err
		}
		s.accounts.ids.Store(spec.Code(), a.ID)
	}
	return nil
}

// accountID returns the id of the account spec names, inside tx: from the
// cache, else read (and cached only when the row seen was written by a
// committed transaction), else created inside tx and not cached. A row tx
// itself created a moment before (a failover provider's clearing shard,
// made by the first settle of a record batch), cached, would outlive a
// rollback and refuse every later posting to it for the life of the
// process (found by review).
func (s *Service) accountID(ctx context.Context, tx pgx.Tx, spec ledger.AccountSpec) (int64, error) {
	code := spec.Code()
	if id, ok := s.accounts.ids.Load(code); ok {
		return id.(int64), nil
	}
	id, committed, err := ledger.AccountIDByCode(ctx, tx, code)
	if err == nil {
		if committed {
			s.accounts.ids.Store(code, id)
		}
		return id, nil
	}
	if !errors.Is(err, ledger.ErrAccountNotFound) {
		return 0, err
	}
	a, err := ledger.EnsureAccount(ctx, tx, spec)
	return a.ID, err
}

// move posts one two-legged transfer of p's amount from one account to
// another, caused by attempt id.
func (s *Service) move(ctx context.Context, tx pgx.Tx, p Payout, attemptID uuid.UUID, cause string, from, to ledger.AccountSpec) error {
	in, err := s.moveInput(ctx, tx, p, attemptID, cause, from, to)
	if err != nil {
		return err
	}
	_, err = ledger.Post(ctx, tx, in)
	return reserveError(p, cause, err)
}

// reserveError turns the ledger's refusal of a reserve into an
// InsufficientBalanceError.
func reserveError(p Payout, cause string, err error) error {
	var insufficient *ledger.InsufficientFundsError
	if errors.As(err, &insufficient) && cause == CauseReserve {
		return &InsufficientBalanceError{MerchantID: p.MerchantID, Requested: p.Amount.String(), Err: err}
	}
	return err
}

// moveInput is the ledger transaction move posts.
func (s *Service) moveInput(ctx context.Context, tx pgx.Tx, p Payout, attemptID uuid.UUID, cause string, from, to ledger.AccountSpec) (ledger.TransactionInput, error) {
	fromID, err := s.accountID(ctx, tx, from)
	if err != nil {
		return ledger.TransactionInput{}, err
	}
	toID, err := s.accountID(ctx, tx, to)
	if err != nil {
		return ledger.TransactionInput{}, err
	}
	cur := p.Amount.Currency()
	amt := p.Amount.Decimal()
	return ledger.TransactionInput{
		IdempotencyKey: cause + ":" + attemptID.String(),
		CauseKind:      cause,
		CauseID:        attemptID.String(),
		Description:    fmt.Sprintf("%s %s of %s %s", cause, p.Amount, p.Kind, p.ID),
		Metadata:       map[string]string{"payout_id": p.ID, "merchant_id": p.MerchantID},
		Postings: []ledger.PostingInput{
			{AccountID: fromID, Amount: amt.Neg(), Currency: cur},
			{AccountID: toID, Amount: amt, Currency: cur},
		},
	}, nil
}

// reserveSpecs, settleSpecs and releaseSpecs name the accounts of each
// ledger effect of an attempt of p.
func reserveSpecs(p Payout) (from, to ledger.AccountSpec) {
	cur := p.Amount.Currency()
	return ledger.MerchantAvailable(p.MerchantID, cur), ledger.MerchantReserved(p.MerchantID, cur)
}

// settleSpecs: the money goes to the clearing account of the provider that
// paid it, the attempt's (a payout's next attempt may fail over to another
// provider than the payout's first).
func settleSpecs(p Payout, a attempts.Attempt) (from, to ledger.AccountSpec) {
	cur := p.Amount.Currency()
	return ledger.MerchantReserved(p.MerchantID, cur), clearingShard(a.Provider, cur, int(a.ID[0])%ClearingShards)
}

func releaseSpecs(p Payout) (from, to ledger.AccountSpec) {
	cur := p.Amount.Currency()
	return ledger.MerchantReserved(p.MerchantID, cur), ledger.MerchantAvailable(p.MerchantID, cur)
}

// InsufficientBalanceError: the merchant's available balance cannot cover
// the reserve. Nothing was written. It matches ledger.ErrInsufficientFunds
// and ErrInsufficientBalance.
type InsufficientBalanceError struct {
	MerchantID string
	Requested  string
	Err        error
}

func (e *InsufficientBalanceError) Error() string {
	return fmt.Sprintf("payouts: merchant %s has insufficient available balance for %s", e.MerchantID, e.Requested)
}

// Unwrap exposes the ledger error.
func (e *InsufficientBalanceError) Unwrap() error { return e.Err }

// Is matches ErrInsufficientBalance.
func (e *InsufficientBalanceError) Is(target error) bool { return target == ErrInsufficientBalance }

// ErrInsufficientBalance: the merchant cannot afford the payout (R23).
var ErrInsufficientBalance = errors.New("payouts: insufficient available balance")

// reserve moves the amount from the merchant's available balance into its
// reserve, in the transaction that opens the attempt (R22). The available
// account forbids negatives, so an overdraft fails here, under the row lock.
func (s *Service) reserve(ctx context.Context, tx pgx.Tx, p Payout, attemptID uuid.UUID) error {
	from, to := reserveSpecs(p)
	return s.move(ctx, tx, p, attemptID, CauseReserve, from, to)
}

// finalMove is the ledger effect of a final attempt a of p: settle (the
// reserve moves to the provider's clearing account: the money left the
// platform) when it succeeded, release (the reserve goes back to available:
// the money never left) when it failed.
func finalMove(p Payout, a attempts.Attempt) (cause string, from, to ledger.AccountSpec) {
	if a.Status == attempts.StatusSucceeded {
		from, to = settleSpecs(p, a)
		return CauseSettle, from, to
	}
	from, to = releaseSpecs(p)
	return CauseRelease, from, to
}

// ClearingShards is how many accounts a provider's clearing balance is
// spread over per currency. Every successful payout credits the clearing
// account, which would make one row lock the queue every settlement waits in
// (a hot account, docs/pitfalls.md); settlements spread over the shards by attempt
// id. The provider's clearing balance is the sum of its shards:
// provider/<name>/clearing/<CUR> (shard 0) and provider/<name>.<k>/clearing/<CUR>.
// See docs/decisions/0001-sharded-provider-clearing.md.
const ClearingShards = 16

// clearingShard names shard k of a provider's clearing account.
func clearingShard(provider string, cur money.Currency, k int) ledger.AccountSpec {
	spec := ledger.ProviderClearing(provider, cur)
	if k > 0 {
		spec.OwnerID = fmt.Sprintf("%s.%02d", provider, k)
	}
	return spec
}

// ClearingBalance is a provider's clearing balance in a currency: the sum of
// its shards.
func ClearingBalance(ctx context.Context, db ledger.DBTX, provider string, cur money.Currency) (decimal.Decimal, error) {
	total := decimal.Zero
	for k := range ClearingShards {
		a, err := ledger.AccountByCode(ctx, db, clearingShard(provider, cur, k).Code())
		if errors.Is(err, ledger.ErrAccountNotFound) {
			continue
		}
		if err != nil {
			return total, err
		}
		total = total.Add(a.Balance)
	}
	return total, nil
}
