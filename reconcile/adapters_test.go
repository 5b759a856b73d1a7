package reconcile_test

import (
	"context"
	"testing"
	"time"

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
	"github.com/saldo/saldo/providers/pix"
	"github.com/saldo/saldo/providers/pix/pixtest"
	"github.com/saldo/saldo/providers/stripe"
	"github.com/saldo/saldo/providers/stripe/stripefake"
	"github.com/saldo/saldo/reconcile"
)

// adapterEnv reconciles a real adapter's statement (parsed from its fake
// over HTTP) against an engine on the wall clock; reconcile's own clock is
// two days ahead, so today has closed for it.
type adapterEnv struct {
	t   *testing.T
	ctx context.Context
	e   *engine.Engine
	rec *reconcile.Service
	day time.Time
}

func newAdapterEnv(t *testing.T, prov providers.Provider, routes string) *adapterEnv {
	t.Helper()
	ctx := context.Background()
	pool := testdb.New(t)
	rs, err := providers.ParseRoutes(routes)
	require.NoError(t, err)
	e, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{prov}, Routes: rs})
	require.NoError(t, err)
	// The fakes stamp their operations with the wall clock: a test that
	// straddled midnight UTC would find its operations on the next day's
	// statement. Near midnight, wait it out (a few minutes a day at most).
	if now := time.Now().UTC(); now.Add(3*time.Minute).Day() != now.Day() {
		time.Sleep(now.Truncate(24 * time.Hour).Add(24*time.Hour + time.Second).Sub(now))
	}
	day := reconcile.Day(time.Now())
	rec, err := reconcile.New(reconcile.Config{Pool: pool, Attempts: e.Attempts, Providers: e.Providers,
		Clock: fixedClock(day.Add(51 * time.Hour))})
	require.NoError(t, err)
	for _, m := range []string{"m1"} {
		_, err = merchants.Create(ctx, pool, m, "Loja")
		require.NoError(t, err)
	}
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("500.00", "BRL"),
		Key: "seed", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	return &adapterEnv{t: t, ctx: ctx, e: e, rec: rec, day: day}
}

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

func (a *adapterEnv) run(provider string) (reconcile.Run, map[reconcile.Kind][]reconcile.Divergence) {
	a.t.Helper()
	r, err := a.rec.Run(a.ctx, provider, a.day, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(a.t, err)
	var all []reconcile.Divergence
	require.NoError(a.t, reconcile.Stream(a.ctx, a.e.Pool, reconcile.Filter{}, func(d reconcile.Divergence) error {
		all = append(all, d)
		return nil
	}))
	return r, byKind(all)
}

func (a *adapterEnv) credits(chargeID string) int {
	a.t.Helper()
	var n int
	require.NoError(a.t, a.e.Pool.QueryRow(a.ctx, `SELECT count(*) FROM ledger_transactions
		WHERE cause_kind = 'charge_credit' AND cause_id = $1`, chargeID).Scan(&n))
	return n
}

func (a *adapterEnv) settles(id string) int {
	a.t.Helper()
	var n int
	require.NoError(a.t, a.e.Pool.QueryRow(a.ctx, `SELECT count(*) FROM ledger_transactions
		WHERE cause_kind = 'payout_settle' AND cause_id = $1`, id).Scan(&n))
	return n
}

// Issue 16 (R19) against the Pix adapter's statement parsing on its fake
// PSP (mutual TLS): a send whose answer was lost and a cob paid while
// nobody looked are resolved by the statement (settled and credited
// once), a Pix received with no cob of ours is unknown_to_us, the ledger's
// incoming total differs by it, and a re-run stores nothing twice.
func TestPixStatementReconciled_R19(t *testing.T) {
	t.Parallel()
	certs, err := pixtest.NewCerts(t.TempDir())
	require.NoError(t, err)
	const key = "pix@saldo.example"
	srv := pixtest.NewServer(certs, pixtest.Options{ClientID: "saldo", ClientSecret: "s3cret", ReceivingKey: key})
	t.Cleanup(srv.Close)
	prov, err := pix.New(pix.Config{BaseURL: srv.StandardURL(), SendBaseURL: srv.SendURL(), TokenURL: srv.TokenURL(),
		ClientID: "saldo", ClientSecret: "s3cret", CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile,
		CAFile: certs.CAFile, ReceivingKey: key, WebhookSecret: "w3bh00k", ConsistencyWindow: time.Second,
		HTTP: providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: readTimeout}})
	require.NoError(t, err)
	a := newAdapterEnv(t, prov, "pix_charge=pix,pix_transfer=pix,bank_payout=pix")

	// A send: the PSP commits it and the answer is lost (unknown); the PSP
	// then settles it.
	tr, err := a.e.Payouts.CreatePayout(a.ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: money.MustParse("25.00", "BRL"), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}}})
	require.NoError(t, err)
	srv.HangAfterCommit(1)
	res, err := a.e.Attempts.Execute(a.ctx, *tr.CurrentAttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, res.Attempt.Status)
	send := res.Attempt
	require.NoError(t, srv.SettleSend(send.Reference, true))

	// A cob, paid; nobody polled.
	ch, err := a.e.Charges.Create(a.ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindPix,
		Amount: money.MustParse("30.00", "BRL")})
	require.NoError(t, err)
	cr, err := a.e.Attempts.Execute(a.ctx, *ch.AttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusPending, cr.Attempt.Status)
	_, err = srv.PayCob(cr.Attempt.Reference)
	require.NoError(t, err)

	// A Pix received with no cob of ours.
	foreign := srv.ReceivePix("", "7.00", time.Now().UTC())

	r, got := a.run("pix")
	require.Equal(t, 2, r.Resolved, "the send and the cob")
	require.Len(t, got[reconcile.KindResolved], 2)
	sa, err := a.e.Attempts.Get(a.ctx, a.e.Pool, send.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, sa.Status)
	require.Equal(t, string(attempts.ActorReconciliation), sa.ResolvedBy)
	require.Equal(t, 1, a.settles(send.ID.String()))
	ca, err := a.e.Attempts.Get(a.ctx, a.e.Pool, cr.Attempt.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, ca.Status)
	require.Equal(t, 1, a.credits(ch.ID))
	require.Len(t, got[reconcile.KindUnknownToUs], 1)
	require.Equal(t, foreign, got[reconcile.KindUnknownToUs][0].ProviderID)
	require.Len(t, got[reconcile.KindLedgerTotals], 1)
	require.Contains(t, got[reconcile.KindLedgerTotals][0].Detail, "credited incoming BRL")
	require.Empty(t, got[reconcile.KindAmountMismatch], "Pix send lines name no operation: matched by reference and amount")
	require.Empty(t, got[reconcile.KindMissingAtProvider])

	r2, again := a.run("pix")
	require.Zero(t, r2.NewDivergences)
	require.Zero(t, r2.Resolved)
	require.Equal(t, len(got), len(again))
	require.Equal(t, 1, a.settles(send.ID.String()))
	require.Equal(t, 1, a.credits(ch.ID))

	// The audit fails on the open critical divergence until an operator
	// resolves it.
	ar, err := audit.Run(a.ctx, a.e.Pool)
	require.NoError(t, err)
	require.False(t, ar.OK())
	_, _, err = reconcile.Resolve(a.ctx, a.e.Pool, got[reconcile.KindUnknownToUs][0].ID, "key_op", "a payer's Pix without a cob: refunded", time.Now())
	require.NoError(t, err)
	ar, err = audit.Run(a.ctx, a.e.Pool)
	require.NoError(t, err)
	require.True(t, ar.OK(), ar.Summary())
}

// Issue 16 (R19) against the Stripe adapter's statement parsing on its
// fake: a card charge whose answer was lost after Stripe committed it is
// resolved by the statement (credited once); a PaymentIntent made outside
// saldo is unknown_to_us; a second PaymentIntent under a charge's reference
// is a double payment; a re-run stores nothing twice.
func TestStripeStatementReconciled_R19(t *testing.T) {
	t.Parallel()
	const apiKey = "sk_test_reconcile"
	fake := stripefake.New(apiKey)
	t.Cleanup(fake.Close)
	prov, err := stripe.New(stripe.Config{APIKey: apiKey, WebhookSecret: "whsec_reconcile", BaseURL: fake.URL(),
		HTTP: providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: readTimeout}})
	require.NoError(t, err)
	a := newAdapterEnv(t, prov, "card_charge=stripe")

	lost, err := a.e.Charges.Create(a.ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindCard,
		Amount: money.MustParse("40.00", "BRL"), CardToken: "tok_visa"})
	require.NoError(t, err)
	fake.Script(stripefake.Fault{Kind: stripefake.FaultHangAfterCommit, Path: "/v1/payment_intents", Delay: 10 * readTimeout})
	res, err := a.e.Attempts.Execute(a.ctx, *lost.AttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, res.Attempt.Status)

	paid, err := a.e.Charges.Create(a.ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindCard,
		Amount: money.MustParse("12.00", "BRL"), CardToken: "tok_visa"})
	require.NoError(t, err)
	pr, err := a.e.Attempts.Execute(a.ctx, *paid.AttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, pr.Attempt.Status)

	now := time.Now().UTC()
	outside := fake.Seed("payment_intent", 700, "brl", "", now)
	fake.Seed("payment_intent", 1200, "brl", pr.Attempt.Reference, now)

	r, got := a.run("stripe")
	require.Equal(t, 1, r.Resolved)
	la, err := a.e.Attempts.Get(a.ctx, a.e.Pool, res.Attempt.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, la.Status)
	require.Equal(t, string(attempts.ActorReconciliation), la.ResolvedBy)
	require.Equal(t, 1, a.credits(lost.ID))
	require.Len(t, got[reconcile.KindUnknownToUs], 1)
	require.Equal(t, outside["id"], got[reconcile.KindUnknownToUs][0].ProviderID)
	require.Len(t, got[reconcile.KindDoublePayment], 1)
	require.Equal(t, pr.Attempt.Reference, got[reconcile.KindDoublePayment][0].Reference)
	require.Len(t, got[reconcile.KindLedgerTotals], 1)
	require.Empty(t, got[reconcile.KindAmountMismatch], "Stripe's minor units parse to saldo's amounts")

	r2, _ := a.run("stripe")
	require.Zero(t, r2.NewDivergences)
	require.Equal(t, 1, a.credits(lost.ID))
}
