package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// transfer builds a two-leg transaction moving amount from one account code
// to another.
func transfer(key, from, to, amount string) ledger.TransactionInput {
	return ledger.TransactionInput{
		IdempotencyKey: key,
		CauseKind:      "test",
		CauseID:        key,
		Description:    "transfer " + amount,
		Postings: []ledger.PostingInput{
			{AccountCode: from, Amount: dec(amount).Neg(), Currency: money.BRL},
			{AccountCode: to, Amount: dec(amount), Currency: money.BRL},
		},
	}
}

type fixture struct {
	pool    *pgxpool.Pool
	funding ledger.Account
}

func setup(t *testing.T) (context.Context, fixture) {
	t.Helper()
	ctx := context.Background()
	pool := testdb.New(t)
	funding, err := ledger.EnsureAccount(ctx, pool, ledger.PlatformFunding(money.BRL))
	require.NoError(t, err)
	return ctx, fixture{pool: pool, funding: funding}
}

// merchant creates merchant id's available account and funds it.
func (f fixture) merchant(t *testing.T, ctx context.Context, id, funds string) ledger.Account {
	t.Helper()
	acc, err := ledger.EnsureAccount(ctx, f.pool, ledger.MerchantAvailable(id, money.BRL))
	require.NoError(t, err)
	if funds != "" && !dec(funds).IsZero() {
		_, err = ledger.Post(ctx, f.pool, transfer("fund-"+id, f.funding.Code, acc.Code, funds))
		require.NoError(t, err)
	}
	return acc
}

func balance(t *testing.T, ctx context.Context, db ledger.DBTX, code string) string {
	t.Helper()
	b, err := ledger.Balance(ctx, db, code)
	require.NoError(t, err)
	return b.Format()
}

func requireClean(t *testing.T, ctx context.Context, db ledger.DBTX) ledger.Report {
	t.Helper()
	rep, err := ledger.Verify(ctx, db)
	require.NoError(t, err)
	require.True(t, rep.OK(), "verify: %v", rep.Violations)
	return rep
}

func TestAccountSpecs(t *testing.T) {
	t.Parallel()
	require.Equal(t, "merchant/m_42/available/BRL", ledger.MerchantAvailable("m_42", money.BRL).Code())
	require.Equal(t, "merchant/m_42/reserved/BRL", ledger.MerchantReserved("m_42", money.BRL).Code())
	require.Equal(t, "provider/sim/clearing/BRL", ledger.ProviderClearing("sim", money.BRL).Code())
	require.Equal(t, "platform/main/fees/USD", ledger.PlatformFees(money.USD).Code())
	require.Equal(t, "platform/main/funding/BRL", ledger.PlatformFunding(money.BRL).Code())
	require.True(t, ledger.PlatformFunding(money.BRL).AllowNegative)
	require.False(t, ledger.MerchantAvailable("m", money.BRL).AllowNegative)

	s, err := ledger.ParseCode("merchant/m_42/reserved/BRL")
	require.NoError(t, err)
	require.Equal(t, ledger.MerchantReserved("m_42", money.BRL), s)
	for _, bad := range []string{"", "merchant/m/available", "bank/m/available/BRL", "merchant/m/x/y/BRL",
		"merchant//available/BRL", "merchant/m/Available/BRL", "merchant/m/available/XXX"} {
		_, err := ledger.ParseCode(bad)
		require.ErrorIs(t, err, ledger.ErrInvalidInput, bad)
	}
}

func TestEnsureAccount(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)

	spec := ledger.MerchantReserved("m_1", money.BRL)
	// Eight goroutines race to create the same account: one row, same id.
	ids := make([]int64, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acc, err := ledger.EnsureAccount(ctx, f.pool, spec)
			if err == nil {
				ids[i] = acc.ID
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		require.NotZero(t, id)
		require.Equal(t, ids[0], id)
	}
	acc, err := ledger.EnsureAccount(ctx, f.pool, spec)
	require.NoError(t, err)
	require.Equal(t, ids[0], acc.ID)
	require.Equal(t, "merchant/m_1/reserved/BRL", acc.Code)
	require.True(t, acc.Balance.IsZero())
	require.Equal(t, spec, acc.Spec())

	spec.AllowNegative = true
	_, err = ledger.EnsureAccount(ctx, f.pool, spec)
	require.ErrorIs(t, err, ledger.ErrAccountMismatch)

	_, err = ledger.EnsureAccount(ctx, f.pool, ledger.AccountSpec{OwnerKind: "merchant", OwnerID: "a/b", Purpose: "available", Currency: money.BRL})
	require.ErrorIs(t, err, ledger.ErrInvalidInput)

	_, err = ledger.AccountByCode(ctx, f.pool, "merchant/nobody/available/BRL")
	require.ErrorIs(t, err, ledger.ErrAccountNotFound)
	byID, err := ledger.AccountByID(ctx, f.pool, acc.ID)
	require.NoError(t, err)
	require.Equal(t, acc.Code, byID.Code)
}

func TestPost(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "100.00")
	b := f.merchant(t, ctx, "b", "")

	tx, err := ledger.Post(ctx, f.pool, transfer("t1", a.Code, b.Code, "30.25"))
	require.NoError(t, err)
	require.NotZero(t, tx.ID)
	require.False(t, tx.Replayed)
	require.Len(t, tx.Postings, 2)
	require.Equal(t, a.Code, tx.Postings[0].AccountCode)
	require.EqualValues(t, 2, tx.Postings[0].Seq) // seq 1 was the funding
	require.Equal(t, "69.75", tx.Postings[0].BalanceAfter.StringFixed(2))
	require.EqualValues(t, 1, tx.Postings[1].Seq)
	require.Equal(t, "30.25", tx.Postings[1].BalanceAfter.StringFixed(2))
	require.Len(t, tx.Postings[0].Hash, 32)
	require.Equal(t, tx.PostedAt, tx.EffectiveAt)
	require.Equal(t, "69.75", balance(t, ctx, f.pool, a.Code))
	require.Equal(t, "30.25", balance(t, ctx, f.pool, b.Code))
	require.Equal(t, "-100.00", balance(t, ctx, f.pool, f.funding.Code))

	// Same key, same postings (even naming accounts by id): the original.
	again := transfer("t1", "", "", "30.25")
	again.Postings[0].AccountID, again.Postings[1].AccountID = a.ID, b.ID
	again.Description = "a different description is not part of the request"
	replay, err := ledger.Post(ctx, f.pool, again)
	require.NoError(t, err)
	require.True(t, replay.Replayed)
	require.Equal(t, tx.ID, replay.ID)
	require.Equal(t, tx.Description, replay.Description)
	require.Len(t, replay.Postings, 2)
	require.Equal(t, "69.75", balance(t, ctx, f.pool, a.Code))

	// Same key, different postings: conflict, nothing written.
	_, err = ledger.Post(ctx, f.pool, transfer("t1", a.Code, b.Code, "30.26"))
	require.ErrorIs(t, err, ledger.ErrIdempotencyConflict)
	var ce *ledger.IdempotencyConflictError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, tx.ID, ce.ExistingTransactionID)
	require.Equal(t, "t1", ce.Key)

	// Overdraft (R23): refused, nothing written.
	_, err = ledger.Post(ctx, f.pool, transfer("t2", a.Code, b.Code, "69.76"))
	require.ErrorIs(t, err, ledger.ErrInsufficientFunds)
	var ie *ledger.InsufficientFundsError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, a.Code, ie.AccountCode)
	require.Equal(t, "69.75", balance(t, ctx, f.pool, a.Code))
	// The exact balance can be spent.
	_, err = ledger.Post(ctx, f.pool, transfer("t2", a.Code, b.Code, "69.75"))
	require.NoError(t, err)
	require.Equal(t, "0.00", balance(t, ctx, f.pool, a.Code))

	_, err = ledger.Post(ctx, f.pool, transfer("t3", a.Code, "merchant/ghost/available/BRL", "1"))
	require.ErrorIs(t, err, ledger.ErrAccountNotFound)

	usd, err := ledger.EnsureAccount(ctx, f.pool, ledger.MerchantAvailable("a", money.USD))
	require.NoError(t, err)
	_, err = ledger.Post(ctx, f.pool, transfer("t4", f.funding.Code, usd.Code, "1"))
	require.ErrorIs(t, err, ledger.ErrCurrencyMismatch)

	requireClean(t, ctx, f.pool)
}

// TestReplayComparedWithStoredTransaction: a key that comes back is a
// replay when its request matches what the stored transaction and its
// postings say (cause, reversed transaction, legs' accounts, amounts and
// currencies in order), and a conflict otherwise (migration 00019: the
// request hash column is gone, the comparison is made from the rows). Both
// places ledger_post compares: after its insert found the key, and before
// it, when the replay would now overdraw or is a reversal.
func TestReplayComparedWithStoredTransaction(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "10.00")
	b := f.merchant(t, ctx, "b", "")
	c := f.merchant(t, ctx, "c", "")
	orig, err := ledger.Post(ctx, f.pool, transfer("k1", a.Code, b.Code, "10.00"))
	require.NoError(t, err)

	// Same legs written another way (trailing zeros, ids instead of codes),
	// another description: the original, although a is now empty (a
	// replay would overdraw it).
	same := transfer("k1", "", "", "10.0000")
	same.Postings[0].AccountID, same.Postings[1].AccountID = a.ID, b.ID
	same.Description = "retried"
	again, err := ledger.Post(ctx, f.pool, same)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, orig.ID, again.ID)

	// Each part of the request changed in turn: a conflict naming the
	// original, nothing written.
	otherCause := transfer("k1", a.Code, b.Code, "10.00")
	otherCause.CauseID = "another"
	otherKind := transfer("k1", a.Code, b.Code, "10.00")
	otherKind.CauseKind = "other"
	swapped := transfer("k1", a.Code, b.Code, "10.00")
	swapped.Postings[0], swapped.Postings[1] = swapped.Postings[1], swapped.Postings[0]
	threeLegs := transfer("k1", a.Code, b.Code, "10.00")
	threeLegs.Postings = append(threeLegs.Postings,
		ledger.PostingInput{AccountCode: c.Code, Amount: dec("0.01"), Currency: money.BRL},
		ledger.PostingInput{AccountCode: b.Code, Amount: dec("-0.01"), Currency: money.BRL})
	for name, in := range map[string]ledger.TransactionInput{
		"other amount":     transfer("k1", a.Code, b.Code, "9.99"),
		"other account":    transfer("k1", a.Code, c.Code, "10.00"),
		"other cause id":   otherCause,
		"other cause kind": otherKind,
		"legs swapped":     swapped,
		"more legs":        threeLegs,
	} {
		_, err := ledger.Post(ctx, f.pool, in)
		var ce *ledger.IdempotencyConflictError
		require.ErrorAs(t, err, &ce, name)
		require.Equal(t, orig.ID, ce.ExistingTransactionID, name)
	}

	// A reversal's key is bound to the transaction it reverses.
	rev, err := ledger.Reverse(ctx, f.pool, orig.ID, "k1-rev", "")
	require.NoError(t, err)
	other, err := ledger.Post(ctx, f.pool, transfer("k2", f.funding.Code, c.Code, "1.00"))
	require.NoError(t, err)
	_, err = ledger.Reverse(ctx, f.pool, other.ID, "k1-rev", "")
	require.ErrorIs(t, err, ledger.ErrIdempotencyConflict)
	again, err = ledger.Reverse(ctx, f.pool, orig.ID, "k1-rev", "retried")
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, rev.ID, again.ID)

	require.Equal(t, "10.00", balance(t, ctx, f.pool, a.Code))
	require.Equal(t, "0.00", balance(t, ctx, f.pool, b.Code))
	require.Equal(t, "1.00", balance(t, ctx, f.pool, c.Code))
	requireClean(t, ctx, f.pool)
}

func TestPostValidation(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	ok := transfer("k", "merchant/a/available/BRL", "merchant/b/available/BRL", "1.00")
	mut := func(fn func(*ledger.TransactionInput)) ledger.TransactionInput {
		in := ok
		in.Postings = append([]ledger.PostingInput(nil), ok.Postings...)
		fn(&in)
		return in
	}
	cases := map[string]struct {
		in  ledger.TransactionInput
		err error
	}{
		"no key":      {mut(func(in *ledger.TransactionInput) { in.IdempotencyKey = "" }), ledger.ErrInvalidInput},
		"bad cause":   {mut(func(in *ledger.TransactionInput) { in.CauseKind = "Attempt!" }), ledger.ErrInvalidInput},
		"no cause id": {mut(func(in *ledger.TransactionInput) { in.CauseID = "" }), ledger.ErrInvalidInput},
		"one leg":     {mut(func(in *ledger.TransactionInput) { in.Postings = in.Postings[:1] }), ledger.ErrInvalidInput},
		"zero amount": {mut(func(in *ledger.TransactionInput) { in.Postings[0].Amount, in.Postings[1].Amount = dec("0"), dec("0") }), ledger.ErrInvalidInput},
		"too precise": {mut(func(in *ledger.TransactionInput) {
			in.Postings[0].Amount, in.Postings[1].Amount = dec("-0.001"), dec("0.001")
		}), ledger.ErrInvalidInput},
		"no currency":   {mut(func(in *ledger.TransactionInput) { in.Postings[0].Currency = money.Currency{} }), ledger.ErrInvalidInput},
		"id and code":   {mut(func(in *ledger.TransactionInput) { in.Postings[0].AccountID = 7 }), ledger.ErrInvalidInput},
		"neither":       {mut(func(in *ledger.TransactionInput) { in.Postings[0].AccountCode = "" }), ledger.ErrInvalidInput},
		"unbalanced":    {mut(func(in *ledger.TransactionInput) { in.Postings[1].Amount = dec("0.99") }), ledger.ErrUnbalanced},
		"mixed balance": {mut(func(in *ledger.TransactionInput) { in.Postings[1].Currency = money.USD }), ledger.ErrUnbalanced},
	}
	for name, c := range cases {
		_, err := ledger.Post(ctx, f.pool, c.in)
		require.ErrorIs(t, err, c.err, name)
	}
	rep := requireClean(t, ctx, f.pool)
	require.Zero(t, rep.Transactions)
}

// TestPostInCallerTransaction: a ledger write joins the caller's database
// transaction (R22: reserve in the same transaction that opens the attempt),
// and a refusal does not poison it.
func TestPostInCallerTransaction(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "10.00")
	b := f.merchant(t, ctx, "b", "")

	// Rolled back: as if it never happened.
	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = ledger.Post(ctx, tx, transfer("r1", a.Code, b.Code, "4.00"))
	require.NoError(t, err)
	require.Equal(t, "6.00", balance(t, ctx, tx, a.Code))
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, "10.00", balance(t, ctx, f.pool, a.Code))

	// A refusal inside the transaction leaves it usable.
	tx, err = f.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = ledger.Post(ctx, tx, transfer("r2", a.Code, b.Code, "11.00"))
	require.ErrorIs(t, err, ledger.ErrInsufficientFunds)
	_, err = ledger.Post(ctx, tx, transfer("r3", a.Code, b.Code, "4.00"))
	require.NoError(t, err)
	_, err = ledger.Post(ctx, tx, transfer("r3", a.Code, b.Code, "5.00"))
	require.ErrorIs(t, err, ledger.ErrIdempotencyConflict)
	replay, err := ledger.Post(ctx, tx, transfer("r3", a.Code, b.Code, "4.00"))
	require.NoError(t, err)
	require.True(t, replay.Replayed)
	var one int
	require.NoError(t, tx.QueryRow(ctx, "SELECT 1").Scan(&one))
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, "6.00", balance(t, ctx, f.pool, a.Code))
	require.Equal(t, "4.00", balance(t, ctx, f.pool, b.Code))
	requireClean(t, ctx, f.pool)
}

// TestDatabaseGuards: the rules the database keeps for every writer, the
// tables' owner included, whatever SQL it sends (R23).
func TestDatabaseGuards(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "10.00")
	b := f.merchant(t, ctx, "b", "")
	posted, err := ledger.Post(ctx, f.pool, transfer("g1", a.Code, b.Code, "1.00"))
	require.NoError(t, err)
	// What follows binds even the tables' owner (the role that migrates),
	// which may write them directly; the role saldo serves as may not
	// (TestApplicationRoleWritesTheLedgerOnlyThroughItsFunctions).
	owner := ownerPool(t, ctx, f.pool)

	// History is append-only.
	for _, q := range []string{
		`UPDATE ledger_postings SET amount = 1000 WHERE transaction_id = 1`,
		`DELETE FROM ledger_postings`,
		`UPDATE ledger_transactions SET description = 'x'`,
		`DELETE FROM ledger_transactions`,
		`TRUNCATE ledger_postings CASCADE`,
		`UPDATE ledger_accounts SET allow_negative = true`,
		`DELETE FROM ledger_accounts WHERE id = 1`,
	} {
		_, err := owner.Exec(ctx, q)
		require.ErrorContains(t, err, "append-only", q)
	}

	// The CHECK refuses an overdraft written directly (R23).
	_, err = owner.Exec(ctx, `UPDATE ledger_accounts SET balance = -1 WHERE code = $1`, b.Code)
	require.Error(t, err)
	require.ErrorIs(t, ledger.MapCommitError(err), ledger.ErrInsufficientFunds)

	// An idempotency key already posted is refused by the database itself,
	// whoever inserts it (migration 00018: an exclusion constraint over a
	// hash index, under the name of the UNIQUE constraint it replaced).
	_, err = owner.Exec(ctx, `WITH t AS (INSERT INTO ledger_transactions (idempotency_key, cause_kind, cause_id, effective_at, posted_at)
		VALUES ($1, 'test', 'raw', now(), now()) RETURNING id)
		INSERT INTO ledger_postings (account_id, seq, transaction_id, leg, amount, currency, balance_after, posted_at, hash)
		SELECT $2::bigint, 90, t.id, 1, -1, 'BRL', 0, now(), '\x'::bytea FROM t
		UNION ALL SELECT $3::bigint, 91, t.id, 2, 1, 'BRL', 0, now(), '\x'::bytea FROM t`,
		posted.IdempotencyKey, a.ID, b.ID)
	var keyErr *pgconn.PgError
	require.ErrorAs(t, err, &keyErr)
	require.Equal(t, "ledger_transactions_idempotency_key", keyErr.ConstraintName)
	require.Equal(t, pgerrcode.ExclusionViolation, keyErr.Code)

	// (transaction, leg) is unique: legs written again for a transaction
	// that has them are refused.
	_, err = owner.Exec(ctx, `INSERT INTO ledger_postings (account_id, seq, transaction_id, leg, amount, currency, balance_after, posted_at, hash)
		VALUES ($1, 90, $3, 1, -1, 'BRL', 0, now(), '\x'), ($2, 91, $3, 2, 1, 'BRL', 0, now(), '\x')`, a.ID, b.ID, posted.ID)
	require.ErrorAs(t, err, &keyErr)
	require.Equal(t, "ledger_postings_leg", keyErr.ConstraintName)

	// Accounts are validated when inserted directly, by the owner and by
	// the application role (which may give their identity columns only).
	for _, db := range []ledger.DBTX{owner, f.pool} {
		_, err = db.Exec(ctx, `INSERT INTO ledger_accounts (code, owner_kind, owner_id, purpose, currency, allow_negative)
			VALUES ('merchant/x/available/BRL', 'merchant', 'y', 'available', 'BRL', false)`)
		require.ErrorIs(t, ledger.MapCommitError(err), ledger.ErrInvalidInput)
	}

	requireClean(t, ctx, f.pool)
}

func TestReverse(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "10.00")
	b := f.merchant(t, ctx, "b", "")
	orig, err := ledger.Post(ctx, f.pool, transfer("p1", a.Code, b.Code, "3.00"))
	require.NoError(t, err)

	rev, err := ledger.Reverse(ctx, f.pool, orig.ID, "p1-reversal", "sent by mistake")
	require.NoError(t, err)
	require.Equal(t, orig.ID, rev.ReversesID)
	require.Equal(t, ledger.CauseReversal, rev.CauseKind)
	require.Equal(t, "10.00", balance(t, ctx, f.pool, a.Code))
	require.Equal(t, "0.00", balance(t, ctx, f.pool, b.Code))
	require.True(t, rev.Postings[0].Amount.Equal(dec("3")))

	again, err := ledger.Reverse(ctx, f.pool, orig.ID, "p1-reversal", "retry")
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, rev.ID, again.ID)
	require.Equal(t, orig.ID, again.ReversesID)

	_, err = ledger.Reverse(ctx, f.pool, orig.ID, "p1-reversal-2", "twice")
	require.ErrorIs(t, err, ledger.ErrAlreadyReversed)
	_, err = ledger.Reverse(ctx, f.pool, 999999, "nope", "")
	require.ErrorIs(t, err, ledger.ErrTransactionNotFound)

	// Reversing money already spent from a no-negative account is refused.
	orig2, err := ledger.Post(ctx, f.pool, transfer("p2", a.Code, b.Code, "5.00"))
	require.NoError(t, err)
	_, err = ledger.Post(ctx, f.pool, transfer("p3", b.Code, a.Code, "5.00"))
	require.NoError(t, err)
	_, err = ledger.Post(ctx, f.pool, transfer("p4", a.Code, f.funding.Code, "10.00"))
	require.NoError(t, err)
	_, err = ledger.Reverse(ctx, f.pool, orig2.ID, "p2-reversal", "")
	require.ErrorIs(t, err, ledger.ErrInsufficientFunds)
	requireClean(t, ctx, f.pool)
}

func TestReads(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "m_1", "100.00")
	reserved, err := ledger.EnsureAccount(ctx, f.pool, ledger.MerchantReserved("m_1", money.BRL))
	require.NoError(t, err)
	_, err = ledger.EnsureAccount(ctx, f.pool, ledger.MerchantAvailable("m_1", money.USD))
	require.NoError(t, err)

	var times []time.Time
	for i := 1; i <= 7; i++ {
		tx, err := ledger.Post(ctx, f.pool, ledger.TransactionInput{
			IdempotencyKey: fmt.Sprintf("res-%d", i), CauseKind: "attempt", CauseID: fmt.Sprintf("att_%d", i%2),
			Metadata: map[string]string{"i": fmt.Sprint(i)},
			Postings: []ledger.PostingInput{
				{AccountID: a.ID, Amount: dec("-1.50"), Currency: money.BRL},
				{AccountID: reserved.ID, Amount: dec("1.50"), Currency: money.BRL},
			},
		})
		require.NoError(t, err)
		times = append(times, tx.PostedAt)
	}

	mb, err := ledger.MerchantBalances(ctx, f.pool, "m_1")
	require.NoError(t, err)
	require.Len(t, mb, 2)
	require.Equal(t, money.BRL, mb[0].Currency)
	require.Equal(t, "89.5", mb[0].Available.String())
	require.Equal(t, "10.5", mb[0].Reserved.String())
	require.True(t, mb[0].Pending.IsZero())
	require.Equal(t, money.USD, mb[1].Currency)
	one, err := ledger.MerchantBalanceIn(ctx, f.pool, "m_1", money.EUR)
	require.NoError(t, err)
	require.True(t, one.Available.IsZero())

	// Balance at an instant, from balance_after.
	at, err := ledger.BalanceAt(ctx, f.pool, a.Code, times[2])
	require.NoError(t, err)
	require.Equal(t, "95.50", at.Format())
	at, err = ledger.BalanceAt(ctx, f.pool, a.Code, times[0].Add(-time.Hour))
	require.NoError(t, err)
	require.Equal(t, "0.00", at.Format())
	at, err = ledger.BalanceAt(ctx, f.pool, a.Code, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, "89.50", at.Format())

	// Keyset pagination over an account's history, both directions.
	var seqs []int64
	req := ledger.PageRequest{Limit: 3}
	for {
		page, err := ledger.ListPostings(ctx, f.pool, a.Code, req)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Postings), 3)
		for _, p := range page.Postings {
			seqs = append(seqs, p.Seq)
		}
		if page.NextCursor == "" {
			break
		}
		req.Cursor = page.NextCursor
	}
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7, 8}, seqs)
	page, err := ledger.ListPostings(ctx, f.pool, a.Code, ledger.PageRequest{Limit: 2, Order: ledger.Descending})
	require.NoError(t, err)
	require.EqualValues(t, 8, page.Postings[0].Seq)
	require.Equal(t, "89.5", page.Postings[0].BalanceAfter.String())
	page, err = ledger.ListPostings(ctx, f.pool, a.Code, ledger.PageRequest{Limit: 2, Order: ledger.Descending, Cursor: page.NextCursor})
	require.NoError(t, err)
	require.EqualValues(t, 6, page.Postings[0].Seq)
	// A cursor only works where it was issued.
	_, err = ledger.ListPostings(ctx, f.pool, reserved.Code, ledger.PageRequest{Cursor: page.NextCursor, Order: ledger.Descending})
	require.ErrorIs(t, err, ledger.ErrInvalidCursor)
	_, err = ledger.ListPostings(ctx, f.pool, a.Code, ledger.PageRequest{Cursor: page.NextCursor})
	require.ErrorIs(t, err, ledger.ErrInvalidCursor)
	_, err = ledger.ListPostings(ctx, f.pool, a.Code, ledger.PageRequest{Cursor: "garbage!"})
	require.ErrorIs(t, err, ledger.ErrInvalidCursor)
	big, err := ledger.ListPostings(ctx, f.pool, a.Code, ledger.PageRequest{Limit: 1 << 30})
	require.NoError(t, err)
	require.Len(t, big.Postings, 8)

	// Transactions, filtered by cause, with postings.
	tp, err := ledger.ListTransactions(ctx, f.pool, ledger.TransactionFilter{CauseKind: "attempt", CauseID: "att_1"}, ledger.PageRequest{Limit: 2})
	require.NoError(t, err)
	require.Len(t, tp.Transactions, 2)
	require.NotEmpty(t, tp.NextCursor)
	require.Len(t, tp.Transactions[0].Postings, 2)
	require.Equal(t, "1", tp.Transactions[0].Metadata["i"])
	tp2, err := ledger.ListTransactions(ctx, f.pool, ledger.TransactionFilter{CauseKind: "attempt", CauseID: "att_1"}, ledger.PageRequest{Limit: 2, Cursor: tp.NextCursor})
	require.NoError(t, err)
	require.Len(t, tp2.Transactions, 2)
	require.Empty(t, tp2.NextCursor)
	require.Greater(t, tp2.Transactions[0].ID, tp.Transactions[1].ID)
	all, err := ledger.ListTransactions(ctx, f.pool, ledger.TransactionFilter{}, ledger.PageRequest{Order: ledger.Descending})
	require.NoError(t, err)
	require.Len(t, all.Transactions, 8)
	require.Equal(t, "res-7", all.Transactions[0].IdempotencyKey)

	got, err := ledger.TransactionByKey(ctx, f.pool, "res-3")
	require.NoError(t, err)
	require.Equal(t, "att_1", got.CauseID)
	require.Equal(t, reserved.Code, got.Postings[1].AccountCode)
	_, err = ledger.TransactionByID(ctx, f.pool, 424242)
	require.ErrorIs(t, err, ledger.ErrTransactionNotFound)
}

// TestIdempotencyRace: eight goroutines post the same key at once; exactly
// one transaction exists and everyone gets it.
func TestIdempotencyRace(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "100.00")
	b := f.merchant(t, ctx, "b", "")

	for round := range 5 {
		key := fmt.Sprintf("race-%d", round)
		ids := make([]int64, 8)
		errs := make([]error, 8)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				tx, err := ledger.Post(ctx, f.pool, transfer(key, a.Code, b.Code, "1.00"))
				ids[i], errs[i] = tx.ID, err
			}()
		}
		close(start)
		wg.Wait()
		for i := range 8 {
			require.NoError(t, errs[i])
			require.Equal(t, ids[0], ids[i])
		}
		var n int
		require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM ledger_transactions WHERE idempotency_key = $1`, key).Scan(&n))
		require.Equal(t, 1, n)
	}
	require.Equal(t, "95.00", balance(t, ctx, f.pool, a.Code))

	// Same race when each racer runs inside its own explicit transaction
	// that also does other work (the payouts shape).
	ids := make([]int64, 8)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
				t, err := ledger.Post(ctx, tx, transfer("race-tx", a.Code, b.Code, "2.00"))
				ids[i] = t.ID
				return err
			})
			if err != nil {
				ids[i] = -1
			}
		}()
	}
	wg.Wait()
	for i := range 8 {
		require.Equal(t, ids[0], ids[i])
		require.Positive(t, ids[i])
	}
	require.Equal(t, "93.00", balance(t, ctx, f.pool, a.Code))
	requireClean(t, ctx, f.pool)
}

// TestConcurrentTransfers: 32 goroutines move money at random among a few
// accounts that forbid negatives. No balance is ever negative (the database
// would refuse it, and Verify checks every balance_after), the total is
// conserved and Verify is clean. Opposite-direction transfers prove the
// id-ordered locking does not deadlock.
func TestConcurrentTransfers(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	const accounts, workers, perWorker = 5, 32, 40
	codes := make([]string, accounts)
	for i := range codes {
		codes[i] = f.merchant(t, ctx, fmt.Sprintf("c%d", i), "20.00").Code
	}
	var (
		wg              sync.WaitGroup
		mu              sync.Mutex
		posted, refused int
		unexpected      []error
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				from := (w + i) % accounts
				to := (from + 1 + (w*7+i*3)%(accounts-1)) % accounts
				amount := fmt.Sprintf("%d.%02d", (w+i)%9, (w*13+i)%100)
				if amount == "0.00" {
					amount = "0.01"
				}
				_, err := ledger.Post(ctx, f.pool, transfer(fmt.Sprintf("w%d-%d", w, i), codes[from], codes[to], amount))
				mu.Lock()
				switch {
				case err == nil:
					posted++
				case errors.Is(err, ledger.ErrInsufficientFunds):
					refused++
				default:
					unexpected = append(unexpected, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Empty(t, unexpected)
	require.Equal(t, workers*perWorker, posted+refused)
	require.Positive(t, posted)

	total := decimal.Zero
	for _, c := range codes {
		b, err := ledger.Balance(ctx, f.pool, c)
		require.NoError(t, err)
		require.False(t, b.IsNegative(), c)
		total = total.Add(b.Decimal())
	}
	require.Equal(t, "100", total.String())
	var minAfter string
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT min(balance_after)::text FROM ledger_postings p
		JOIN ledger_accounts a ON a.id = p.account_id WHERE NOT a.allow_negative`).Scan(&minAfter))
	require.False(t, dec(minAfter).IsNegative())
	rep := requireClean(t, ctx, f.pool)
	require.EqualValues(t, accounts+posted, rep.Transactions)
	t.Logf("posted %d, refused for insufficient funds %d", posted, refused)
}

// TestBalanceAt checks the binary search of BalanceAt against every instant
// of a history.
func TestBalanceAt(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "")
	type point struct {
		at      time.Time
		balance string
	}
	var history []point
	for i := range 37 {
		tx, err := ledger.Post(ctx, f.pool, transfer(fmt.Sprintf("t%d", i), f.funding.Code, a.Code, "1.10"))
		require.NoError(t, err)
		history = append(history, point{tx.PostedAt, tx.Postings[1].BalanceAfter.StringFixed(2)})
	}
	for i, p := range history {
		got, err := ledger.BalanceAt(ctx, f.pool, a.Code, p.at)
		require.NoError(t, err)
		// Postings with the same instant all count at that instant.
		want := p.balance
		for j := i + 1; j < len(history) && history[j].at.Equal(p.at); j++ {
			want = history[j].balance
		}
		require.Equal(t, want, got.Format(), "at posting %d", i)
		if i > 0 && p.at.After(history[i-1].at) {
			before, err := ledger.BalanceAt(ctx, f.pool, a.Code, p.at.Add(-time.Microsecond))
			require.NoError(t, err)
			require.Equal(t, history[i-1].balance, before.Format(), "just before posting %d", i)
		}
	}
	zero, err := ledger.BalanceAt(ctx, f.pool, a.Code, history[0].at.Add(-time.Second))
	require.NoError(t, err)
	require.Equal(t, "0.00", zero.Format())
}
