package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/stripe"
	"github.com/saldo/saldo/providers/stripe/stripefake"
)

// stripeEngine is an engine whose card charges and account transfers go to
// the Stripe adapter, over real HTTP to the Stripe fake, with a read
// timeout the fake's hang outlasts.
type stripeEngine struct {
	e        *engine.Engine
	fake     *stripefake.Server
	pool     *pgxpool.Pool
	hangExec func(id *uuid.UUID) attempts.Attempt
	resolve  func(a attempts.Attempt) attempts.Attempt
}

const stripeE2EKey, stripeE2EWebhookSecret = "sk_test_4eC39HqLyjWDarjtT1zdp7dcE2E", "whsec_e2e"

func newStripeEngine(t *testing.T) stripeEngine {
	t.Helper()
	ctx := context.Background()
	pool := testdb.New(t)
	fake := stripefake.New(stripeE2EKey)
	t.Cleanup(fake.Close)
	prov, err := stripe.New(stripe.Config{APIKey: stripeE2EKey, WebhookSecret: stripeE2EWebhookSecret, BaseURL: fake.URL(),
		HTTP: providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: readTimeout}})
	require.NoError(t, err)
	routes, err := providers.ParseRoutes("card_charge=stripe,account_transfer=stripe")
	require.NoError(t, err)
	e, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{prov}, Routes: routes,
		Attempts: attempts.Config{ResolveSchedule: []time.Duration{time.Millisecond}}})
	require.NoError(t, err)
	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("500.00", "BRL"), Key: "seed",
		Reason: "test", Actor: "test"})
	require.NoError(t, err)
	se := stripeEngine{e: e, fake: fake, pool: pool}
	// hangExec: Stripe records the operation and never answers; the
	// attempt is unknown (never failed, the reserve held) and executing it
	// again sends nothing (R14).
	se.hangExec = func(id *uuid.UUID) attempts.Attempt {
		t.Helper()
		require.NotNil(t, id)
		fake.Script(stripefake.Fault{Kind: stripefake.FaultHangAfterCommit, Delay: 10 * time.Second})
		res, err := e.Attempts.Execute(ctx, *id)
		require.NoError(t, err)
		require.True(t, res.Sent)
		require.Equal(t, attempts.StatusUnknown, res.Attempt.Status, "no answer after the write is unknown")
		require.Equal(t, "stripe", res.Attempt.Provider)
		again, err := e.Attempts.Execute(ctx, *id)
		require.NoError(t, err)
		require.False(t, again.Sent, "an unknown attempt is never re-sent (R14)")
		return res.Attempt
	}
	se.resolve = func(a attempts.Attempt) attempts.Attempt {
		t.Helper()
		var got attempts.Attempt
		require.Eventually(t, func() bool {
			res, err := e.Attempts.Resolve(ctx, a.ID)
			require.NoError(t, err)
			got = res.Attempt
			return got.Status == attempts.StatusSucceeded
		}, 30*time.Second, 5*time.Millisecond, "attempt %s (%s) resolved by lookup", a.ID, a.Operation)
		return got
	}
	return se
}

// Issue 14 end to end: the Stripe adapter against the Stripe fake, routed
// by the engine (card_charge to stripe; the refund follows its charge). A
// card charge and a partial refund of it: each call hangs after Stripe
// recorded the operation, past the read timeout; the attempt goes unknown,
// executing it again sends nothing, and one lookup resolves it (Search for
// the PaymentIntent, the refunds list for the refund). Stripe holds one
// object per operation and got one create request for each (R14: resolve
// by query, never by re-sending). The verified webhooks that follow
// through /v1/webhooks/stripe change nothing, a duplicate is recognised, a
// forged one is refused, and the audit is clean.
func TestStripeEndToEndHangAfterCommitResolvedByLookup_R14_R16_R22(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	se := newStripeEngine(t)
	e, fake, pool, hangThenExecute, resolve := se.e, se.fake, se.pool, se.hangExec, se.resolve
	brl := func(s string) money.Amount { return money.MustParse(s, "BRL") }

	// The card charge: a PaymentIntent confirmed at once, found by Search.
	ch, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindCard, Amount: brl("80.00"),
		CardToken: "tok_visa", Description: "Pedido 9"})
	require.NoError(t, err)
	require.Equal(t, "stripe", ch.Provider)
	a := resolve(hangThenExecute(ch.AttemptID))
	require.Regexp(t, `^pi_`, a.ProviderID)
	c, err := e.Charges.Get(ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, c.Status)
	pi := fake.Object(a.ProviderID)
	require.Equal(t, a.Reference, pi["metadata"].(map[string]any)["saldo_reference"])
	require.EqualValues(t, 8000, pi["amount"])

	// A partial refund of it: follows the charge to stripe, found by listing.
	rf, err := e.Payouts.CreateRefund(ctx, payouts.RefundRequest{MerchantID: "m1", ChargeID: ch.ID, Amount: brl("30.00")})
	require.NoError(t, err)
	require.Equal(t, "stripe", rf.Provider)
	ra := resolve(hangThenExecute(rf.CurrentAttemptID))
	v, err := e.Payouts.Get(ctx, "m1", rf.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.StatusSucceeded, v.Status)
	require.Regexp(t, `^re_`, ra.ProviderID)
	require.Equal(t, pi["id"], fake.Object(ra.ProviderID)["payment_intent"])
	require.EqualValues(t, 3000, fake.Object(ra.ProviderID)["amount"])

	// One object per operation, one create request each: nothing was sent
	// twice, nothing was made twice.
	require.Len(t, fake.Objects("payment_intent"), 1)
	require.Len(t, fake.Objects("refund"), 1)
	require.Equal(t, 1, fake.Requests("POST /v1/payment_intents"))
	require.Equal(t, 1, fake.Requests("POST /v1/refunds"))

	// The webhooks Stripe sends afterwards reach /v1/webhooks/stripe,
	// verify, and change nothing; a duplicate is recognised; a forged one
	// is refused.
	apiSrv, err := api.New(api.Config{Pool: e.Pool, Payouts: e.Payouts, Attempts: e.Attempts, Charges: e.Charges,
		Providers: e.Providers})
	require.NoError(t, err)
	hs := httptest.NewServer(apiSrv)
	t.Cleanup(hs.Close)
	deliver := func(body []byte, secret string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/v1/webhooks/stripe", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", stripefake.Sign(secret, time.Now(), body))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var ack struct {
			Outcome string `json:"outcome"`
		}
		_ = json.Unmarshal(b, &ack)
		return resp.StatusCode, ack.Outcome
	}
	evt := fake.Event("payment_intent.succeeded", a.ProviderID)
	code, outcome := deliver(evt, stripeE2EWebhookSecret)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, []string{api.WebhookUnchanged, api.WebhookHandled}, outcome)
	code, outcome = deliver(evt, stripeE2EWebhookSecret)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, api.WebhookDuplicate, outcome)
	code, outcome = deliver(fake.Event("refund.updated", ra.ProviderID), stripeE2EWebhookSecret)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, api.WebhookUnchanged, outcome)
	code, _ = deliver(fake.Event("refund.updated", ra.ProviderID), "whsec_forged")
	require.Equal(t, http.StatusUnauthorized, code)

	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

// Issue 14 end to end, Connect: a split payout to two connected accounts
// and a payout to a third, each a Stripe transfer made under a hang after
// commit and found by its transfer_group, one transfer per leg, audit
// clean (account_transfer realises payout and split_leg attempts, and
// migration 00080 lets payouts.operation hold it).
func TestStripeConnectEndToEndHangAfterCommitResolvedByLookup_R14_R21(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	se := newStripeEngine(t)
	e, fake, pool, hangThenExecute, resolve := se.e, se.fake, se.pool, se.hangExec, se.resolve
	brl := func(s string) money.Amount { return money.MustParse(s, "BRL") }

	// A split payout to two connected accounts: two Connect transfers,
	// each found by its transfer_group.
	sp, err := e.Payouts.CreateSplit(ctx, payouts.SplitRequest{MerchantID: "m1", Description: "marketplace order 9", Legs: []payouts.SplitLeg{
		{Operation: providers.OpAccountTransfer, Amount: brl("20.00"), Destination: &providers.Destination{StripeAccount: "acct_1SellerA"}},
		{Operation: providers.OpAccountTransfer, Amount: brl("15.50"), Destination: &providers.Destination{StripeAccount: "acct_1SellerB"}},
	}})
	require.NoError(t, err)
	require.Len(t, sp.Legs, 2)
	for _, leg := range sp.Legs {
		require.Equal(t, "stripe", leg.Provider)
		la := resolve(hangThenExecute(leg.CurrentAttemptID))
		require.Regexp(t, `^tr_`, la.ProviderID)
		require.Equal(t, leg.Destination.StripeAccount, fake.Object(la.ProviderID)["destination"])
	}

	// A payout whose destination is a connected account.
	po, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpAccountTransfer,
		Amount: brl("42.00"), Destination: &providers.Destination{StripeAccount: "acct_1SellerC"}})
	require.NoError(t, err)
	require.Equal(t, "stripe", po.Provider)
	pa := resolve(hangThenExecute(po.CurrentAttemptID))
	require.Equal(t, "acct_1SellerC", fake.Object(pa.ProviderID)["destination"])
	for _, id := range []string{po.ID, sp.Legs[0].ID, sp.Legs[1].ID} {
		v, err := e.Payouts.Get(ctx, "m1", id)
		require.NoError(t, err)
		require.Equal(t, payouts.StatusSucceeded, v.Status, id)
	}
	require.Len(t, fake.Objects("transfer"), 3)
	require.Equal(t, 3, fake.Requests("POST /v1/transfers"))
	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}
