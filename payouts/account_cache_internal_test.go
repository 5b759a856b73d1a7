package payouts

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// accountCache never holds an account created inside a transaction that
// then rolled back. accountID creates a missing account inside tx without
// caching it, and caches an id read inside a transaction only when the row
// version it saw was written by a committed transaction
// (ledger.AccountIDByCode), so a second lookup of the same spec in the same
// tx does not cache the uncommitted row. After a rollback, a later posting
// to that spec creates the account again and succeeds. Before, the second
// lookup cached the uncommitted id, and after a rollback every later
// posting to that spec was refused as an unknown account for the life of
// the process (found by review).
//
// Reachable: prepareAccounts makes the clearing shards of the payout's
// FIRST provider only; a next attempt that failed over to another provider
// (openNext, RetryPolicy) settles into a shard of that provider, created
// inside the record batch's transaction. Two such settles of one shard in
// one record batch (AttemptsFinal) look it up twice; an error later in that
// batch rolls it back (the attempts core then records the calls one by
// one, each settling into that shard).
func TestAccountCacheNeverKeepsARolledBackAccount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	s := &Service{}
	spec := clearingShard("failover", money.BRL, 3)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	id1, err := s.accountID(ctx, tx, spec) // created in tx, not cached
	require.NoError(t, err)
	id2, err := s.accountID(ctx, tx, spec) // read in tx, uncommitted: not cached
	require.NoError(t, err)
	require.Equal(t, id1, id2)
	require.NoError(t, tx.Rollback(ctx))

	_, err = ledger.AccountByID(ctx, pool, id1)
	require.ErrorIs(t, err, ledger.ErrAccountNotFound, "the transaction rolled back: the account does not exist")

	// The process now posts a settle into that shard (the merchant's
	// reserve holds the money): accepted, no cached id names a rolled-back
	// account.
	_, err = ledger.EnsureAccount(ctx, pool, ledger.MerchantReserved("m1", money.BRL))
	require.NoError(t, err)
	_, err = ledger.EnsureAccount(ctx, pool, ledger.PlatformFunding(money.BRL))
	require.NoError(t, err)
	_, err = ledger.Post(ctx, pool, ledger.TransactionInput{IdempotencyKey: "fund", CauseKind: "funding", CauseID: "m1",
		Postings: []ledger.PostingInput{
			{AccountCode: ledger.PlatformFunding(money.BRL).Code(), Amount: decimal.NewFromInt(-1), Currency: money.BRL},
			{AccountCode: ledger.MerchantReserved("m1", money.BRL).Code(), Amount: decimal.NewFromInt(1), Currency: money.BRL}}})
	require.NoError(t, err)
	p := Payout{ID: "po_x", MerchantID: "m1", Kind: attempts.KindPayout, Amount: money.MustParse("1.00", "BRL")}
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	err = s.move(ctx, tx, p, uuid.New(), CauseSettle, ledger.MerchantReserved("m1", money.BRL), spec)
	require.NoError(t, err, "settle into %s after a rolled-back transaction created it as id %d", spec.Code(), id1)
}
