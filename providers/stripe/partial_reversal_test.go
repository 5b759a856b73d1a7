package stripe_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/stripe"
	"github.com/saldo/saldo/providers/stripe/stripefake"
)

// partiallyReversedTransfer is a Connect transfer of 10.00 BRL of
// which 3.00 BRL were reversed (Stripe: "reversed" is true only once the
// whole amount is reversed; a partial reversal leaves it false and sets
// amount_reversed).
func partiallyReversedTransfer(reference string) map[string]any {
	return map[string]any{
		"id": "tr_partial1", "object": "transfer", "amount": 1000, "amount_reversed": 300, "reversed": false,
		"currency": "brl", "destination": "acct_partial", "transfer_group": reference,
		"metadata": map[string]any{stripe.MetadataReference: reference}, "created": time.Now().Unix(),
	}
}

// A transfer of which part was reversed no longer paid the recipient the
// amount saldo settled: the adapter reads it back as the amount not
// reversed, on the webhook (transfer.reversed fires for partial reversals
// too), the lookup and the statement alike, so R17's amount check (review,
// a note) and reconciliation's amount_mismatch see the 3.00 BRL that came
// back. A full reversal is reported failed (a divergence for a human, R9).
func TestPartiallyReversedTransferIsNotReadAsFullSuccess_R17(t *testing.T) {
	reference := ref()
	tr := partiallyReversedTransfer(reference)
	fullSuccess := func(where string, state providers.State, amount string) {
		t.Helper()
		if state == providers.StateSucceeded && amount == "10.00" {
			t.Errorf("%s: a transfer with 3.00 of its 10.00 BRL reversed is read back as succeeded for 10.00 BRL", where)
		}
	}

	// Webhook.
	p := newProvider(t, "http://127.0.0.1:1")
	now := time.Now()
	body, _ := json.Marshal(map[string]any{"id": "evt_partial1", "object": "event", "type": "transfer.reversed",
		"api_version": "2026-03-25.dahlia", "created": now.Unix(), "livemode": false, "pending_webhooks": 1,
		"data": map[string]any{"object": tr}})
	h := http.Header{}
	h.Set(stripe.SignatureHeader, stripefake.Sign("whsec_test_secret", now, body))
	ev, err := p.ParseWebhook(h, body, now)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Reference != reference {
		t.Fatalf("webhook not matched to the reference: %+v", ev)
	}
	fullSuccess("webhook transfer.reversed", ev.State, ev.Amount)

	// Lookup and statement, from a Stripe answering with the same object.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/transfers" {
			_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []any{}, "has_more": false, "url": r.URL.Path})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []any{tr}, "has_more": false, "url": "/v1/transfers"})
	}))
	t.Cleanup(srv.Close)
	p = newProvider(t, srv.URL)
	lr, err := p.Lookup(context.Background(), providers.OpAccountTransfer, reference)
	if err != nil || lr.Exchange.Err != nil || !lr.Found {
		t.Fatalf("lookup: %+v %v", lr, err)
	}
	fullSuccess("lookup", lr.State, lr.Amount)

	entries, err := p.Statement(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("statement: %+v", entries)
	}
	fullSuccess("statement", entries[0].State, entries[0].Amount)
}
