package ledger_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// Example opens accounts, brings money into the ledger, reserves part of it
// inside a caller's database transaction (as payouts does when it opens an
// attempt, R22), shows that an overdraft is refused (R23) and that a
// replayed idempotency key returns the original transaction, and finally
// verifies the whole ledger.
func Example() {
	ctx := context.Background()
	pool, cleanup := exampleDatabase()
	defer cleanup()

	must := func(a ledger.Account, err error) ledger.Account {
		if err != nil {
			panic(err)
		}
		return a
	}
	funding := must(ledger.EnsureAccount(ctx, pool, ledger.PlatformFunding(money.BRL)))
	available := must(ledger.EnsureAccount(ctx, pool, ledger.MerchantAvailable("m_42", money.BRL)))
	reserved := must(ledger.EnsureAccount(ctx, pool, ledger.MerchantReserved("m_42", money.BRL)))

	// 100.00 BRL arrive for merchant m_42: funding goes negative by design.
	deposit := ledger.TransactionInput{
		IdempotencyKey: "deposit-1",
		CauseKind:      "charge",
		CauseID:        "ch_1",
		Description:    "card charge settled",
		Postings: []ledger.PostingInput{
			{AccountCode: funding.Code, Amount: decimal.RequireFromString("-100.00"), Currency: money.BRL},
			{AccountCode: available.Code, Amount: decimal.RequireFromString("100.00"), Currency: money.BRL},
		},
	}
	tx, err := ledger.Post(ctx, pool, deposit)
	if err != nil {
		panic(err)
	}
	fmt.Println("deposit posted:", len(tx.Postings), "postings, available after:", tx.Postings[1].BalanceAfter.StringFixed(2))

	// Reserve 30.00 in the caller's transaction, together with its own work.
	err = pgx.BeginFunc(ctx, pool, func(dbtx pgx.Tx) error {
		// ... insert the payout attempt here ...
		_, err := ledger.Post(ctx, dbtx, ledger.TransactionInput{
			IdempotencyKey: "reserve-att_1",
			CauseKind:      "attempt",
			CauseID:        "att_1",
			Postings: []ledger.PostingInput{
				{AccountID: available.ID, Amount: decimal.RequireFromString("-30.00"), Currency: money.BRL},
				{AccountID: reserved.ID, Amount: decimal.RequireFromString("30.00"), Currency: money.BRL},
			},
		})
		return err
	})
	if err != nil {
		panic(err)
	}

	// An overdraft is refused and writes nothing.
	_, err = ledger.Post(ctx, pool, ledger.TransactionInput{
		IdempotencyKey: "reserve-att_2",
		CauseKind:      "attempt",
		CauseID:        "att_2",
		Postings: []ledger.PostingInput{
			{AccountID: available.ID, Amount: decimal.RequireFromString("-70.01"), Currency: money.BRL},
			{AccountID: reserved.ID, Amount: decimal.RequireFromString("70.01"), Currency: money.BRL},
		},
	})
	var insufficient *ledger.InsufficientFundsError
	fmt.Println("overdraft refused:", errors.As(err, &insufficient), insufficient.AccountCode)

	// The same key again is the same transaction.
	again, err := ledger.Post(ctx, pool, deposit)
	if err != nil {
		panic(err)
	}
	fmt.Println("replayed:", again.Replayed, again.ID == tx.ID)

	balances, err := ledger.MerchantBalanceIn(ctx, pool, "m_42", money.BRL)
	if err != nil {
		panic(err)
	}
	fmt.Println("available:", balances.Available.StringFixed(2), "reserved:", balances.Reserved.StringFixed(2))

	report, err := ledger.Verify(ctx, pool)
	if err != nil {
		panic(err)
	}
	fmt.Println("verify ok:", report.OK(), "transactions:", report.Transactions)

	// Output:
	// deposit posted: 2 postings, available after: 100.00
	// overdraft refused: true merchant/m_42/available/BRL
	// replayed: true true
	// available: 70.00 reserved: 30.00
	// verify ok: true transactions: 2
}
