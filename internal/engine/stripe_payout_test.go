package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
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
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/providers/stripe"
	"github.com/saldo/saldo/providers/stripe/stripefake"
)

// payoutAPI is an engine with the simulator ("sim", a Pix-like PSP) and
// Stripe (the fake) behind saldo's HTTP API, bank_payout routed as given,
// and merchant m1 funded with 500.00 BRL and 300.00 USD.
type payoutAPI struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	e      *engine.Engine
	fake   *stripefake.Server
	sim    *sim.Server
	url    string
	secret string // m1's API key
}

func newPayoutAPI(t *testing.T, route string) *payoutAPI {
	t.Helper()
	return newPayoutAPIWith(t, route, nil, nil)
}

// newPayoutAPIWith is newPayoutAPI whose engine and API log to logger
// (nil: nowhere) and whose attempts core calls onReview for each alert
// (Attempts.OnReview; nil: none).
func newPayoutAPIWith(t *testing.T, route string, logger *slog.Logger, onReview func(attempts.Attempt, string)) *payoutAPI {
	t.Helper()
	w := &payoutAPI{ctx: context.Background(), pool: testdb.New(t)}
	w.fake = stripefake.New(stripeE2EKey)
	t.Cleanup(w.fake.Close)
	w.sim = sim.NewServer(sim.Config{Seed: 1414}).Start()
	t.Cleanup(w.sim.Close)
	st, err := stripe.New(stripe.Config{APIKey: stripeE2EKey, WebhookSecret: stripeE2EWebhookSecret, BaseURL: w.fake.URL(),
		HTTP: providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 5 * time.Second}})
	require.NoError(t, err)
	routes, err := providers.ParseRoutes(route)
	require.NoError(t, err)
	w.e, err = engine.New(engine.Config{Pool: w.pool, Routes: routes, Providers: []providers.Provider{
		w.sim.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: 5 * time.Second})), st},
		Logger: logger, Attempts: attempts.Config{OnReview: onReview}})
	require.NoError(t, err)
	_, err = merchants.Create(w.ctx, w.pool, "m1", "Loja")
	require.NoError(t, err)
	for _, f := range []money.Amount{money.MustParse("500.00", "BRL"), money.MustParse("300.00", "USD")} {
		_, err = merchants.Fund(w.ctx, w.pool, merchants.Funding{MerchantID: "m1", Amount: f, Key: "seed-" + f.Currency().Code(),
			Reason: "test", Actor: "test"})
		require.NoError(t, err)
	}
	_, w.secret, err = api.CreateKey(w.ctx, w.pool, api.RoleMerchant, "m1", "test", time.Now())
	require.NoError(t, err)
	srv, err := api.New(api.Config{Pool: w.pool, Payouts: w.e.Payouts, Attempts: w.e.Attempts, Charges: w.e.Charges,
		Providers: w.e.Providers, Logger: logger})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	w.url = hs.URL
	return w
}

// post sends body to path with m1's key and a fresh Idempotency-Key.
func (w *payoutAPI) post(t *testing.T, path string, body any) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(w.ctx, http.MethodPost, w.url+path, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+w.secret)
	req.Header.Set("Idempotency-Key", uuid.NewString())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	return resp.StatusCode, out
}

// get reads path with m1's key.
func (w *payoutAPI) get(t *testing.T, path string) map[string]any {
	t.Helper()
	req, err := http.NewRequestWithContext(w.ctx, http.MethodGet, w.url+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+w.secret)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out
}

// rows counts what a payout writes: payouts, attempts, their jobs, ledger
// transactions and accounts.
func (w *payoutAPI) rows(t *testing.T) [5]int {
	t.Helper()
	var n [5]int
	for i, q := range []string{`SELECT count(*) FROM payouts`, `SELECT count(*) FROM attempts`, `SELECT count(*) FROM river_job`,
		`SELECT count(*) FROM ledger_transactions`, `SELECT count(*) FROM ledger_accounts`} {
		require.NoError(t, w.pool.QueryRow(w.ctx, q).Scan(&n[i]))
	}
	return n
}

// Issue 14: bank_payout routed sim|stripe. A payout to a bank account
// attached to the platform's Stripe account (stripe_bank_account) goes to
// Stripe, the first provider of the route that pays that kind, skipping
// the sim; a payout to a Brazilian bank account goes to the sim. The
// Stripe payout is created with that destination, answers pending, and
// Stripe's payout.paid webhook settles it: the payout is succeeded, the
// merchant's available balance is down by the amount, nothing is
// reserved, Stripe's clearing account got the settlement, audit clean.
func TestStripeBankPayoutThroughTheAPI_R21_R22_R24(t *testing.T) {
	t.Parallel()
	w := newPayoutAPI(t, "bank_payout=sim|stripe")
	ctx, e := w.ctx, w.e

	code, body := w.post(t, "/v1/merchants/m1/payouts", map[string]any{"operation": "bank_payout", "amount": "42.50",
		"currency": "USD", "destination": map[string]any{"stripe_bank_account": "ba_1SaldoLojaUSD", "holder_name": "Loja"},
		"description": "weekly"})
	require.Equal(t, http.StatusCreated, code, "%v", body)
	require.Equal(t, "stripe", body["provider"])
	require.Equal(t, "ba_1SaldoLojaUSD", body["destination"].(map[string]any)["stripe_bank_account"])
	id := body["id"].(string)
	po, err := e.Payouts.Get(ctx, "m1", id)
	require.NoError(t, err)

	// A Brazilian bank account on the same route goes to the sim.
	code, sb := w.post(t, "/v1/merchants/m1/payouts", map[string]any{"operation": "bank_payout", "amount": "10.00",
		"currency": "BRL", "destination": map[string]any{"bank_account": map[string]any{"ispb": "60701190", "branch": "0001",
			"account": "12345-6", "type": "checking"}}})
	require.Equal(t, http.StatusCreated, code, "%v", sb)
	require.Equal(t, "sim", sb["provider"])

	// Stripe: one payout, to that bank account, pending.
	r, err := e.Attempts.Execute(ctx, *po.CurrentAttemptID)
	require.NoError(t, err)
	require.True(t, r.Sent)
	require.Equal(t, attempts.OutcomeProcessing, r.Outcome)
	require.Regexp(t, `^po_`, r.Attempt.ProviderID)
	obj := w.fake.Object(r.Attempt.ProviderID)
	require.Equal(t, "ba_1SaldoLojaUSD", obj["destination"])
	require.EqualValues(t, 4250, obj["amount"])
	require.Equal(t, "usd", obj["currency"])
	require.Equal(t, r.Attempt.Reference, obj["metadata"].(map[string]any)["saldo_reference"])
	bal, err := ledger.MerchantBalanceIn(ctx, w.pool, "m1", money.MustParse("1", "USD").Currency())
	require.NoError(t, err)
	require.Equal(t, "257.50", bal.Available.StringFixed(2))
	require.Equal(t, "42.50", bal.Reserved.StringFixed(2), "held while the payout is on its way")

	// Stripe pays it and says so.
	w.fake.SetStatus(r.Attempt.ProviderID, "paid", "")
	evt := w.fake.Event("payout.paid", r.Attempt.ProviderID)
	status, err := stripefake.Deliver(ctx, w.url+"/v1/webhooks/stripe", stripeE2EWebhookSecret, time.Now(), evt)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	got := w.get(t, "/v1/merchants/m1/payouts/"+id)
	require.Equal(t, "succeeded", got["status"], "%v", got)
	bal, err = ledger.MerchantBalanceIn(ctx, w.pool, "m1", money.MustParse("1", "USD").Currency())
	require.NoError(t, err)
	require.Equal(t, "257.50", bal.Available.StringFixed(2))
	require.Equal(t, "0.00", bal.Reserved.StringFixed(2))
	var settles int
	var toStripe string
	require.NoError(t, w.pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(abs(po.amount)), 0)::numeric(20,2)::text FROM ledger_postings po
		JOIN ledger_accounts ac ON ac.id = po.account_id JOIN ledger_transactions t ON t.id = po.transaction_id
		WHERE t.cause_kind = $1 AND ac.owner_kind = 'provider' AND ac.owner_id LIKE 'stripe%'`, payouts.CauseSettle).Scan(&settles, &toStripe))
	require.Equal(t, 1, settles, "settled once, to Stripe's clearing account")
	require.Equal(t, "42.50", toStripe)
	require.Len(t, w.fake.Objects("payout"), 1)
	require.Equal(t, 1, w.fake.Requests("POST /v1/payouts"))

	res, err := audit.Run(ctx, w.pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

// Issue 14: bank_payout routed to the sim only. A stripe_bank_account is a
// valid destination that no routed provider pays: 422
// destination_not_routed naming destination, before anything is written
// (no payout, attempt, job, ledger transaction or account); the same for
// a split leg (legs[0].destination). A bank payout to a Brazilian bank
// account still goes through.
func TestStripeBankAccountWithoutAStripeRouteIs422_R21(t *testing.T) {
	t.Parallel()
	w := newPayoutAPI(t, "bank_payout=sim")
	before := w.rows(t)
	code, body := w.post(t, "/v1/merchants/m1/payouts", map[string]any{"operation": "bank_payout", "amount": "10.00",
		"currency": "BRL", "destination": map[string]any{"stripe_bank_account": "ba_1SaldoLojaBRL"}})
	require.Equal(t, http.StatusUnprocessableEntity, code, "%v", body)
	require.Equal(t, "destination_not_routed", body["code"])
	require.Equal(t, "destination", body["field"])
	require.Contains(t, body["detail"], "stripe_bank_account")
	require.Contains(t, body["detail"], "sim")
	code, body = w.post(t, "/v1/merchants/m1/splits", map[string]any{"currency": "BRL", "legs": []any{
		map[string]any{"operation": "bank_payout", "amount": "10.00",
			"destination": map[string]any{"stripe_bank_account": "ba_1SaldoLojaBRL"}}}})
	require.Equal(t, http.StatusUnprocessableEntity, code, "%v", body)
	require.Equal(t, "legs[0].destination", body["field"])
	// Malformed, or on another operation: 400 naming the field.
	for _, c := range []struct{ op, dest, field string }{
		{"bank_payout", "card_1ABC", "destination.stripe_bank_account"},
		{"pix_transfer", "ba_1SaldoLojaBRL", "destination.stripe_bank_account"},
		{"account_transfer", "ba_1SaldoLojaBRL", "destination"},
	} {
		code, body = w.post(t, "/v1/merchants/m1/payouts", map[string]any{"operation": c.op, "amount": "10.00",
			"currency": "BRL", "destination": map[string]any{"stripe_bank_account": c.dest}})
		require.Equal(t, http.StatusBadRequest, code, "%v", body)
		require.Equal(t, "validation_failed", body["code"])
		require.Equal(t, c.field, body["field"], "%v", body)
	}
	require.Equal(t, before, w.rows(t), "nothing written")

	code, body = w.post(t, "/v1/merchants/m1/payouts", map[string]any{"operation": "bank_payout", "amount": "10.00",
		"currency": "BRL", "destination": map[string]any{"bank_account": map[string]any{"ispb": "60701190", "branch": "0001",
			"account": "12345-6", "type": "checking"}}})
	require.Equal(t, http.StatusCreated, code, "%v", body)
	require.Equal(t, "sim", body["provider"])
	res, err := audit.Run(w.ctx, w.pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

// Issue 14, failover: bank_payout routed simA|stripe|simB. A payout to a
// Brazilian bank account starts at simA; simA is down for it (503 before
// processing) and the lookups prove it did nothing, so the payout's next
// attempt fails over, skipping Stripe (which cannot pay that bank
// account) for simB, which pays it. A Stripe bank payout has no other
// provider on the route that pays its kind: it stays with Stripe.
func TestFailoverSkipsAProviderThatCannotPayTheDestination_R16_R22(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	clock := sim.NewManualClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	a := sim.NewServer(sim.Config{Seed: 1415, Clock: clock.Now}).Start()
	t.Cleanup(a.Close)
	b := sim.NewServer(sim.Config{Seed: 1416, Clock: clock.Now}).Start()
	t.Cleanup(b.Close)
	fake := stripefake.New(stripeE2EKey)
	t.Cleanup(fake.Close)
	st, err := stripe.New(stripe.Config{APIKey: stripeE2EKey, BaseURL: fake.URL(),
		HTTP: providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 5 * time.Second}})
	require.NoError(t, err)
	settings := sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: 5 * time.Second})
	routes, err := providers.ParseRoutes("bank_payout=simA|stripe|simB")
	require.NoError(t, err)
	e, err := engine.New(engine.Config{Pool: pool, Routes: routes, Clock: clock,
		PayoutRetry: payouts.RetryPolicy{MaxAttempts: 3, Backoff: time.Second},
		Providers:   []providers.Provider{a.NewProvider(sim.WithName("simA"), settings), st, b.NewProvider(sim.WithName("simB"), settings)}})
	require.NoError(t, err)
	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("100.00", "BRL"),
		Key: "seed", Reason: "test", Actor: "test"})
	require.NoError(t, err)

	p, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpBankPayout,
		Amount: money.MustParse("10.00", "BRL"), Destination: &providers.Destination{BankAccount: &providers.BankAccount{
			ISPB: "60701190", Branch: "0001", Account: "12345-6", Type: "checking"}}})
	require.NoError(t, err)
	require.Equal(t, "simA", p.Provider)
	first, err := e.Attempts.Get(ctx, pool, *p.CurrentAttemptID)
	require.NoError(t, err)
	require.NoError(t, a.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: first.Reference}))
	r, err := e.Attempts.Execute(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, r.Attempt.Status)
	clock.Advance(time.Hour)
	rr, err := e.Attempts.Resolve(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusFailed, rr.Attempt.Status)
	v, err := e.Payouts.Get(ctx, "m1", p.ID)
	require.NoError(t, err)
	second, err := e.Attempts.Get(ctx, pool, *v.CurrentAttemptID)
	require.NoError(t, err)
	require.Equal(t, "simB", second.Provider, "Stripe cannot pay a Brazilian bank account: skipped")
	clock.Advance(time.Minute)
	r, err = e.Attempts.Execute(ctx, second.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, r.Attempt.Status)
	v, err = e.Payouts.Get(ctx, "m1", p.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.StatusSucceeded, v.Status)
	require.Empty(t, fake.Objects("payout"), "nothing went to Stripe")
	require.Equal(t, 0, fake.Requests("POST /v1/payouts"))
	require.Empty(t, a.Operations(first.Reference))
	require.Len(t, b.Operations(second.Reference), 1)

	// And the other way round: Stripe is the only provider of the route
	// that pays a Stripe bank account, so a failover stays with it.
	require.Equal(t, "stripe", routes.Next(providers.OpBankPayout, "stripe", providers.DestStripeBankAccount, e.Attempts.Provider))
	bal, err := ledger.MerchantBalanceIn(ctx, pool, "m1", money.MustParse("1", "BRL").Currency())
	require.NoError(t, err)
	require.Equal(t, "90.00", bal.Available.StringFixed(2))
	require.Equal(t, "0.00", bal.Reserved.StringFixed(2))
	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

// R18: a bank payout's expected arrival, when only a webhook states it,
// is kept on the attempt, so that a payout in transit for days reaches
// review by its own date, not by --processing-review-after. Before, the
// webhook route dropped the date (the lookups and the submit answer kept
// it).
func TestStripePayoutWebhookKeepsTheExpectedArrival_R18(t *testing.T) {
	t.Parallel()
	w := newPayoutAPI(t, "bank_payout=stripe")
	ctx, e := w.ctx, w.e
	code, body := w.post(t, "/v1/merchants/m1/payouts", map[string]any{"operation": "bank_payout", "amount": "42.50",
		"currency": "USD", "destination": map[string]any{"stripe_bank_account": "ba_1SaldoLojaUSD", "holder_name": "Loja"}})
	require.Equal(t, http.StatusCreated, code, "%v", body)
	po, err := e.Payouts.Get(ctx, "m1", body["id"].(string))
	require.NoError(t, err)
	r, err := e.Attempts.Execute(ctx, *po.CurrentAttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.OutcomeProcessing, r.Outcome)
	// Forget what the submit answer said, so that only the webhook can
	// say it again.
	_, err = w.pool.Exec(ctx, `UPDATE attempts SET processing_expected_by = NULL WHERE id = $1`, r.Attempt.ID)
	require.NoError(t, err)

	w.fake.SetStatus(r.Attempt.ProviderID, "in_transit", "")
	arrival := time.Unix(int64(w.fake.Object(r.Attempt.ProviderID)["arrival_date"].(float64)), 0).UTC()
	evt := w.fake.Event("payout.updated", r.Attempt.ProviderID)
	status, err := stripefake.Deliver(ctx, w.url+"/v1/webhooks/stripe", stripeE2EWebhookSecret, time.Now(), evt)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	a, err := e.Attempts.Get(ctx, w.pool, r.Attempt.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusPending, a.Status)
	require.NotNil(t, a.ProcessingExpectedBy, "the webhook's arrival date was dropped")
	require.False(t, a.ProcessingExpectedBy.Before(arrival), "expected by %s, before the arrival date %s", a.ProcessingExpectedBy, arrival)
}
