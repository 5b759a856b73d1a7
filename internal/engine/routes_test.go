package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// Routing (issue 14): each operation goes to the provider its route names;
// a refund goes to the provider of its charge whatever the routes say; an
// operation with no route and no default provider is refused naming the
// field, before anything is written.
func TestRoutesSendEachOperationToItsProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	// Two PSPs (seeds apart: provider ids never repeat in one database).
	cards := sim.NewServer(sim.Config{Seed: 101}).Start()
	t.Cleanup(cards.Close)
	pix := sim.NewServer(sim.Config{Seed: 202}).Start()
	t.Cleanup(pix.Close)
	settings := sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: 5 * time.Second})
	cardProv := cards.NewProvider(sim.WithName("cards"), settings)
	pixProv := pix.NewProvider(sim.WithName("pixpsp"), settings)
	routes, err := providers.ParseRoutes("card_charge=cards,pix_charge=pixpsp,pix_transfer=pixpsp")
	require.NoError(t, err)
	e, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{cardProv, pixProv}, Routes: routes})
	require.NoError(t, err)

	brl := func(s string) money.Amount { return money.MustParse(s, "BRL") }
	for _, m := range []string{"m1", "m2"} {
		_, err = merchants.Create(ctx, pool, m, "Loja "+m)
		require.NoError(t, err)
	}
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: brl("100.00"),
		Key: "seed", Reason: "test", Actor: "test"})
	require.NoError(t, err)

	execute := func(id *uuid.UUID) attempts.Attempt {
		t.Helper()
		res, err := e.Attempts.Execute(ctx, *id)
		require.NoError(t, err)
		return res.Attempt
	}

	card, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m2", Kind: charges.KindCard,
		Amount: brl("30.00"), CardToken: "tok_visa"})
	require.NoError(t, err)
	require.Equal(t, "cards", card.Provider)
	a := execute(card.AttemptID)
	require.Equal(t, "cards", a.Provider)
	require.Equal(t, attempts.StatusSucceeded, a.Status)
	require.Len(t, cards.Operations(a.Reference), 1)
	require.Empty(t, pix.Operations(a.Reference))

	cob, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m2", Kind: charges.KindPix, Amount: brl("5.00")})
	require.NoError(t, err)
	require.Equal(t, "pixpsp", cob.Provider)

	tr, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: brl("10.00"), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}}})
	require.NoError(t, err)
	require.Equal(t, "pixpsp", tr.Provider)
	a = execute(tr.CurrentAttemptID)
	require.Equal(t, "pixpsp", a.Provider)
	require.Len(t, pix.Operations(a.Reference), 1)

	// The refund follows its charge, though the routes name pixpsp for
	// nothing like it.
	rf, err := e.Payouts.CreateRefund(ctx, payouts.RefundRequest{MerchantID: "m2", ChargeID: card.ID, Amount: brl("10.00")})
	require.NoError(t, err)
	require.Equal(t, "cards", rf.Provider)
	a = execute(rf.CurrentAttemptID)
	require.Equal(t, "cards", a.Provider)
	require.Equal(t, attempts.StatusSucceeded, a.Status)

	// bank_payout has no route and there is no default provider.
	var accounts int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ledger_accounts`).Scan(&accounts))
	_, err = e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpBankPayout,
		Amount: brl("1.00"), Destination: &providers.Destination{BankAccount: &providers.BankAccount{
			ISPB: "00000000", Branch: "0001", Account: "12345-6", Type: "checking"}}})
	var fe *payouts.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "operation", fe.Field)
	var after int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ledger_accounts`).Scan(&after))
	require.Equal(t, accounts, after, "a refused request writes nothing")

	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
	require.Empty(t, cards.Duplicates())
	require.Empty(t, pix.Duplicates())
}

// engine.New refuses a route to a provider that is not configured or does
// not support the operation.
func TestRoutesRefusedWhenProviderCannot(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	srv := sim.NewServer(sim.Config{Seed: 303}).Start()
	t.Cleanup(srv.Close)
	cardsOnly := srv.NewProvider(sim.WithName("cardsonly"), sim.WithCapabilities(providers.Capabilities{
		IdempotencyKeys: true, LookupByReference: true, Operations: []providers.Operation{providers.OpCardCharge, providers.OpRefund}}))
	for spec, want := range map[string]string{
		"pix_transfer=cardsonly": `pix_transfer is routed to "cardsonly", which does not support it`,
		"card_charge=elsewhere":  `card_charge is routed to "elsewhere", which is not configured`,
	} {
		routes, err := providers.ParseRoutes(spec)
		require.NoError(t, err)
		_, err = engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{cardsOnly}, Routes: routes})
		require.ErrorContains(t, err, want)
	}
}
