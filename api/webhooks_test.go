package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// simEvent builds a webhook body the way the sim sends it.
func simEvent(id, typ, reference, providerID, state string, at time.Time) []byte {
	b, _ := json.Marshal(map[string]any{"id": id, "type": typ, "created_at": at,
		"data": map[string]any{"id": providerID, "reference": reference, "operation": "pix_transfer",
			"amount": "10.00", "currency": "BRL", "state": state, "created_at": at}})
	return b
}

func (e *env) webhook(body []byte, signedAt time.Time, secret string) resp {
	e.t.Helper()
	return e.do(req{method: http.MethodPost, path: "/v1/webhooks/sim", body: body,
		header: map[string]string{sim.SignatureHeader: sim.Sign(secret, signedAt, body)}})
}

// Webhooks (R17): a bad signature is 401, an old timestamp is 401, a
// verified event resolves the unknown attempt by reference, a duplicate is
// harmless, and out-of-order events never downgrade a final status.
func TestWebhooks(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	p := e.createPix("10.00", "wh-1")
	a := e.attemptOf(p)
	// The sim executes the transfer, then answers 500: unknown (R2).
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultErrorAfter, Reference: a.Reference}))
	res, err := e.att.Execute(e.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, res.Attempt.Status)
	ops := e.srv.Operations(a.Reference)
	require.Len(t, ops, 1)
	provID := ops[0].ID
	now := e.clock.Now()

	// Forged: wrong secret. Unsigned. Stale: signed 10 minutes ago.
	ok := simEvent("evt_ok", "operation.succeeded", a.Reference, provID, "succeeded", now)
	r := e.webhook(ok, now, "whsec_wrong")
	require.Equal(t, http.StatusUnauthorized, r.Status)
	require.Equal(t, "webhook_signature_invalid", r.code(t))
	r = e.do(req{method: http.MethodPost, path: "/v1/webhooks/sim", body: ok})
	require.Equal(t, http.StatusUnauthorized, r.Status)
	r = e.webhook(ok, now.Add(-10*time.Minute), webhookSecret)
	require.Equal(t, http.StatusUnauthorized, r.Status)
	require.Equal(t, "webhook_timestamp_stale", r.code(t))
	// Tampered body under a good signature of another body.
	tampered := e.do(req{method: http.MethodPost, path: "/v1/webhooks/sim",
		body:   simEvent("evt_ok", "operation.failed", a.Reference, provID, "failed", now),
		header: map[string]string{sim.SignatureHeader: sim.Sign(webhookSecret, now, ok)}})
	require.Equal(t, http.StatusUnauthorized, tampered.Status)
	require.Equal(t, http.StatusNotFound, e.do(req{method: http.MethodPost, path: "/v1/webhooks/nope", body: ok}).Status)
	got, err := e.att.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, got.Status, "refused webhooks changed nothing")

	// The real one resolves it.
	r = e.webhook(ok, now, webhookSecret)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, api.WebhookTransitioned, r.json(t)["outcome"])
	view := e.get("/v1/merchants/m1/payouts/"+p["id"].(string), e.m1).json(t)
	require.Equal(t, "succeeded", view["status"])
	av, re := e.balances("m1", e.m1)
	require.Equal(t, []string{"990.00", "0.00"}, []string{av, re}, "settled: the reserve left for the provider")

	// The same event again (the provider retries): harmless.
	r = e.webhook(ok, now, webhookSecret)
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, api.WebhookDuplicate, r.json(t)["outcome"])

	// Late and out of order: a processing event and a failed event about the
	// same reference, with new ids, after the final status.
	for _, ev := range [][]byte{
		simEvent("evt_late_processing", "operation.processing", a.Reference, provID, "processing", now.Add(-time.Minute)),
		simEvent("evt_late_failed", "operation.failed", a.Reference, provID, "failed", now.Add(-time.Minute)),
	} {
		r = e.webhook(ev, now, webhookSecret)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.Equal(t, api.WebhookUnchanged, r.json(t)["outcome"])
	}
	view = e.get("/v1/merchants/m1/payouts/"+p["id"].(string), e.m1).json(t)
	require.Equal(t, "succeeded", view["status"], "a final status is never downgraded (R9)")
	// The late failure contradicts the success: a divergence (a reversal)
	// in review until an operator settles it; nothing moves (R9, R19).
	require.Equal(t, true, view["needs_attention"])
	_, err = e.att.SettleDivergence(e.ctx, a.ID, "op-wh", "stale event from the provider, checked", attempts.HoldBook)
	require.NoError(t, err)
	av, re = e.balances("m1", e.m1)
	require.Equal(t, []string{"990.00", "0.00"}, []string{av, re}, "no release after settlement")

	// An event for a reference that is not ours is acknowledged and logged.
	r = e.webhook(simEvent("evt_other", "operation.succeeded", "ffffffffffffffffffffffffffffffff", "op_x", "succeeded", now), now, webhookSecret)
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, api.WebhookUnmatched, r.json(t)["outcome"])
	// Malformed (verified) body.
	bad := []byte(`{"id":"evt_bad","type":"x","data":{"reference":"","operation":"pix_transfer","state":"succeeded"}}`)
	r = e.webhook(bad, now, webhookSecret)
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "webhook_malformed", r.code(t))

	var seen int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM webhook_events WHERE provider = 'sim'`).Scan(&seen))
	require.Equal(t, 4, seen, "ok, late processing, late failed, other")
	evs, err := e.att.Events(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	transitions := 0
	for _, ev := range evs {
		if ev.Type == attempts.EventTransition && ev.ToStatus.Final() {
			transitions++
			require.Equal(t, attempts.ActorWebhook, ev.Actor)
			require.Equal(t, "evt_ok", ev.ActorID)
		}
	}
	require.Equal(t, 1, transitions)
}

// The sim itself delivers its webhooks to the API (signed with its clock,
// duplicated and reordered at random): every payout ends final exactly once,
// by webhook, and the audit holds.
func TestWebhooksFromTheSim(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{Seed: 7, WebhookURL: "api", WebhookDuplicateRate: 0.5, WebhookReorderRate: 0.5,
		WebhookHoldMax: 50 * time.Millisecond, SettleAfter: time.Minute})
	var ids []string
	for i := range 6 {
		p := e.createPix("1.00", fmt.Sprintf("sim-%d", i))
		ids = append(ids, p["id"].(string))
		res, err := e.att.Execute(e.ctx, e.attemptOf(p).ID)
		require.NoError(t, err)
		require.Equal(t, attempts.StatusPending, res.Attempt.Status, "accepted, processing at the provider")
	}
	e.clock.Advance(2 * time.Minute) // the sim settles them and emits succeeded events
	require.Eventually(t, func() bool {
		for _, id := range ids {
			v, err := e.pay.Get(e.ctx, "m1", id)
			if err != nil || v.Status != "succeeded" {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, e.srv.FlushWebhooks(e.ctx))
	dups := 0
	for _, d := range e.srv.WebhookDeliveries() {
		require.True(t, d.Delivered, "%+v", d)
		if d.Copy == 1 {
			dups++
		}
	}
	t.Logf("sim webhook deliveries: %d (%d duplicate copies)", len(e.srv.WebhookDeliveries()), dups)
	for _, id := range ids {
		v := e.get("/v1/merchants/m1/payouts/"+id, e.m1).json(t)
		require.Equal(t, "succeeded", v["status"], id)
	}
	av, re := e.balances("m1", e.m1)
	require.Equal(t, []string{"994.00", "0.00"}, []string{av, re})
}

// Issue 13 finding 4 (R17). A verified webhook moves a payout only when it
// comes from the attempt's provider and names its operation, amount and
// currency: a valid event from another provider (its own secret, its own
// endpoint) naming our reference, or one from the right provider with
// another amount or currency, moves nothing. The attempt goes to review
// (the webhook is acknowledged with outcome "review" so the provider stops
// retrying), the reserve stays held, and the error is logged.
func TestWebhookMustMatchProviderAmountCurrency_R17(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	// A second provider, configured in the same API with its own secret.
	const otherSecret = "whsec_other_psp"
	other := sim.NewServer(sim.Config{Clock: e.clock.Now, WebhookSecret: otherSecret}).Start()
	t.Cleanup(other.Close)
	otherProv := other.NewProvider(sim.WithName("sim2"))
	two, err := api.New(api.Config{Pool: e.pool, Payouts: e.pay, Attempts: e.att, Charges: e.charges,
		Providers: map[string]providers.Provider{"sim": e.prov, "sim2": otherProv}, Clock: e.clock})
	require.NoError(t, err)
	srv := httptest.NewServer(two)
	t.Cleanup(srv.Close)
	post := func(provider, secret string, body []byte) map[string]any {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/webhooks/"+provider, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(sim.SignatureHeader, sim.Sign(secret, e.clock.Now(), body))
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
		require.Equal(t, http.StatusOK, res.StatusCode, "%v", out)
		return out
	}
	event := func(id, reference, providerID, amount, currency string) []byte {
		b, _ := json.Marshal(map[string]any{"id": id, "type": "operation.succeeded", "created_at": e.clock.Now(),
			"data": map[string]any{"id": providerID, "reference": reference, "operation": "pix_transfer",
				"amount": amount, "currency": currency, "state": "succeeded", "created_at": e.clock.Now()}})
		return b
	}
	unknown := func(idem string) (map[string]any, attempts.Attempt) {
		p := e.createPix("10.00", idem)
		a := e.attemptOf(p)
		require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultErrorAfter, Reference: a.Reference}))
		res, err := e.att.Execute(e.ctx, a.ID)
		require.NoError(t, err)
		require.Equal(t, attempts.StatusUnknown, res.Attempt.Status)
		return p, a
	}

	for _, tc := range []struct {
		name, provider, secret, amount, currency string
	}{
		{"other_provider", "sim2", otherSecret, "10.00", "BRL"},
		{"amount", "sim", webhookSecret, "10.01", "BRL"},
		{"currency", "sim", webhookSecret, "10.00", "USD"},
	} {
		p, a := unknown("wh-mismatch-" + tc.name)
		ack := post(tc.provider, tc.secret, event("evt_"+tc.name, a.Reference, e.srv.Operations(a.Reference)[0].ID, tc.amount, tc.currency))
		require.Equal(t, api.WebhookReview, ack["outcome"], tc.name)
		got, err := e.att.Get(e.ctx, e.pool, a.ID)
		require.NoError(t, err)
		require.Equal(t, attempts.StatusUnknown, got.Status, "%s: moved nothing", tc.name)
		require.True(t, got.Review, tc.name)
		v := e.get("/v1/merchants/m1/payouts/"+p["id"].(string), e.m1).json(t)
		require.Equal(t, "processing", v["status"], tc.name)
		require.Equal(t, true, v["needs_attention"], tc.name)
	}
	av, re := e.balances("m1", e.m1)
	require.Equal(t, []string{"970.00", "30.00"}, []string{av, re}, "every reserve still held")

	// The provider's own event with the right amount still resolves a payout.
	_, a := unknown("wh-match")
	ack := post("sim", webhookSecret, event("evt_match", a.Reference, e.srv.Operations(a.Reference)[0].ID, "10.00", "BRL"))
	require.Equal(t, api.WebhookTransitioned, ack["outcome"])

	// Leave nothing open for the audit: an operator settles the reviewed
	// ones with the provider's statement (the sim executed them).
	q, _, err := e.att.ReviewQueue(e.ctx, e.pool, attempts.ReviewQueueParams{})
	require.NoError(t, err)
	require.Len(t, q, 3)
	for _, r := range q {
		_, err := e.att.ResolveManually(e.ctx, r.ID, attempts.StatusSucceeded, e.operatorID, "sim statement shows it paid", nil)
		require.NoError(t, err)
	}
}

// R17: an event id longer than webhook_events keeps (255 bytes) is
// recorded by its hash, so a redelivery is a duplicate: it was processed
// on every delivery and never recorded (the column's CHECK refused it).
func TestWebhookWithLongEventIDIsRecordedOnce_R17(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	now := e.clock.Now()
	id := "evt_" + strings.Repeat("x", 300)
	ev := simEvent(id, "operation.succeeded", "ffffffffffffffffffffffffffffffff", "op_x", "succeeded", now)
	r := e.webhook(ev, now, webhookSecret)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, api.WebhookUnmatched, r.json(t)["outcome"])
	r = e.webhook(ev, now, webhookSecret)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, api.WebhookDuplicate, r.json(t)["outcome"])
	var key string
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT event_id FROM webhook_events WHERE provider = 'sim'`).Scan(&key))
	require.True(t, strings.HasPrefix(key, "sha256:"), key)
}
