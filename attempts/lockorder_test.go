package attempts_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// Issue 13 finding 3 (R23): a record batch whose final attempts belong to
// two owners (a payout's settle and a card charge's credit) must lock every
// ledger account it touches in one id order, as every other ledger writer
// does (an opening batch, a Poster batch, ledger_post). Here a rival
// transaction locks in id order: first the charge's merchant account (the
// lowest id), then, once the record batch is waiting for it, the payout's
// reserve account. A record batch that posted the payout's settle (locking
// the reserve) before the charge's credit deadlocks against it
// ("deadlock detected", one side aborted); one that posts every owner's
// transactions together waits for the rival and then commits.
func TestMixedOwnersRecordBatchLocksAccountsInOneOrder_R23(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	srv := sim.NewServer(sim.Config{Seed: 13}).Start()
	t.Cleanup(srv.Close)
	prov := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: 5 * time.Second}))
	eng, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{prov}, PayoutProvider: prov.Name()})
	require.NoError(t, err)
	brl := func(s string) money.Amount { return money.MustParse(s, "BRL") }
	for _, m := range []string{"seller", "payer"} {
		_, err = merchants.Create(ctx, pool, m, "Loja "+m)
		require.NoError(t, err)
	}
	// Account ids follow creation: the seller's available account (which
	// the charge credits) is older than every account of the payout.
	low, err := ledger.EnsureAccount(ctx, pool, ledger.MerchantAvailable("seller", money.BRL))
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "payer", Amount: brl("100.00"),
		Key: "seed", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	p, err := eng.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "payer", Operation: providers.OpPixTransfer,
		Amount: brl("10.00"), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}}})
	require.NoError(t, err)
	high, err := ledger.AccountByCode(ctx, pool, ledger.MerchantReserved("payer", money.BRL).Code())
	require.NoError(t, err)
	require.Less(t, low.ID, high.ID)
	c, err := eng.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "seller", Kind: charges.KindCard,
		Amount: brl("20.00"), CardToken: "tok_visa"})
	require.NoError(t, err)

	// The rival holds the low account.
	rival, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer rival.Rollback(ctx)
	_, err = rival.Exec(ctx, `SELECT ledger_lock_accounts(ARRAY[$1::bigint], NULL)`, low.ID)
	require.NoError(t, err)

	// The record batch: the payout's attempt first, then the charge's.
	type result struct {
		as  []attempts.Attempt
		err error
	}
	done := make(chan result, 1)
	go func() {
		as, err := eng.Attempts.ExecuteTogether(ctx, []uuid.UUID{*p.CurrentAttemptID, *c.AttemptID})
		done <- result{as, err}
	}()
	// Wait until the record batch waits for a lock.
	for deadline := time.Now().Add(30 * time.Second); ; {
		var waiting int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		if waiting > 0 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("the record batch finished without waiting for the rival's lock: %v", r.err)
		default:
		}
		require.True(t, time.Now().Before(deadline), "the record batch never waited for the rival's lock")
		time.Sleep(5 * time.Millisecond)
	}
	// The rival goes on in id order: the high account.
	_, err = rival.Exec(ctx, `SELECT ledger_lock_accounts(ARRAY[$1::bigint], NULL)`, high.ID)
	require.NoError(t, err, "the rival deadlocked against the record batch")
	require.NoError(t, rival.Commit(ctx))
	r := <-done
	var pgErr interface{ SQLState() string }
	if errors.As(r.err, &pgErr) {
		require.NotEqual(t, "40P01", pgErr.SQLState(), "the record batch deadlocked")
	}
	require.NoError(t, r.err)
	require.Len(t, r.as, 2)
	for _, a := range r.as {
		require.Equal(t, attempts.StatusSucceeded, a.Status)
	}
	// Both moved in the record's one transaction, each once.
	var settles, credits int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE cause_kind = $1), count(*) FILTER (WHERE cause_kind = $2)
		FROM ledger_transactions`, payouts.CauseSettle, charges.CauseCredit).Scan(&settles, &credits))
	require.Equal(t, 1, settles)
	require.Equal(t, 1, credits)
	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}
