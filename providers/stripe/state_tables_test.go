package stripe_test

// Coverage of the Stripe state tables (docs/providers/stripe.md,
// "states read"): every PaymentIntent and Refund status, read the same way
// by a Submit answer, a lookup (Search / list) and a webhook, over real
// HTTP. Nothing not captured reads succeeded (R1); nothing the provider may
// still finish reads failed (R1, R16).

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

func TestStateTablesSubmitLookupWebhook_R1_R16(t *testing.T) {
	cases := []struct {
		op     providers.Operation
		status string
		want   providers.State
	}{
		{providers.OpCardCharge, "succeeded", providers.StateSucceeded},
		{providers.OpCardCharge, "processing", providers.StateProcessing},
		{providers.OpCardCharge, "requires_capture", providers.StateProcessing},
		{providers.OpCardCharge, "requires_action", providers.StateProcessing},
		{providers.OpCardCharge, "requires_confirmation", providers.StateProcessing},
		{providers.OpCardCharge, "requires_payment_method", providers.StateFailed},
		{providers.OpCardCharge, "canceled", providers.StateFailed},
		{providers.OpCardCharge, "some_future_status", providers.StateProcessing},
		{providers.OpRefund, "pending", providers.StateProcessing},
		{providers.OpRefund, "requires_action", providers.StateProcessing},
		{providers.OpRefund, "succeeded", providers.StateSucceeded},
		{providers.OpRefund, "failed", providers.StateFailed},
		{providers.OpRefund, "canceled", providers.StateFailed},
		{providers.OpRefund, "some_future_status", providers.StateProcessing},
	}
	for _, c := range cases {
		t.Run(string(c.op)+"/"+c.status, func(t *testing.T) {
			reference := ref()
			obj := map[string]any{"amount": 2500, "currency": "usd", "status": c.status, "created": time.Now().Unix(),
				"metadata": map[string]any{stripe.MetadataReference: reference}}
			listKind, evType := "list", "refund.updated"
			if c.op == providers.OpCardCharge {
				obj["id"], obj["object"], obj["capture_method"] = "pi_state1", "payment_intent", "automatic"
				listKind, evType = "search_result", "payment_intent.processing"
			} else {
				obj["id"], obj["object"], obj["payment_intent"] = "re_state1", "refund", "pi_state1"
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if r.Method == http.MethodPost {
					_ = json.NewEncoder(w).Encode(obj)
					return
				}
				_ = json.NewEncoder(w).Encode(map[string]any{"object": listKind, "data": []any{obj}, "has_more": false})
			}))
			t.Cleanup(srv.Close)
			p := newProvider(t, srv.URL)

			in := charge("25.00", "USD", stripefake.PMVisa)
			if c.op == providers.OpRefund {
				in = refund("pi_state1", "25.00", "USD")
			}
			sr := submit(t, p, in, reference, key())
			if sr.State != c.want {
				t.Errorf("submit: %s read as %q, want %q", c.status, sr.State, c.want)
			}
			lr, err := p.Lookup(context.Background(), c.op, reference)
			if err != nil || lr.Exchange.Err != nil || !lr.Found || lr.State != c.want || lr.Amount != "25.00" {
				t.Errorf("lookup: %s read as %+v (%v), want %q 25.00", c.status, lr, err, c.want)
			}
			now := time.Now()
			body, _ := json.Marshal(map[string]any{"id": "evt_state", "object": "event", "type": evType,
				"api_version": "2026-03-25.dahlia", "created": now.Unix(), "data": map[string]any{"object": obj}})
			h := http.Header{}
			h.Set(stripe.SignatureHeader, stripefake.Sign("whsec_test_secret", now, body))
			ev, err := p.ParseWebhook(h, body, now)
			if err != nil || ev.Reference != reference || ev.State != c.want {
				t.Errorf("webhook %s: %s read as %+v (%v), want %q", evType, c.status, ev, err, c.want)
			}
		})
	}
}
