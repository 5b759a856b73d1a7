package stripe_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/stripe"
)

// disputeEvent parses one signed dispute event and checks what every
// dispute event carries: the dispute (never an attempt reference, R13),
// the disputed PaymentIntent as the provider id, the disputed amount, and
// state processing (it moves no attempt's status).
func disputeEvent(t *testing.T, p *stripe.Provider, body []byte, typ, disputeID, pi, amount, cur string) providers.WebhookEvent {
	t.Helper()
	ev, err := signed(t, p, body, time.Now(), "whsec_test_secret")
	if err != nil {
		t.Fatalf("%s: %v", typ, err)
	}
	if ev.Type != typ || ev.Dispute == nil || ev.Dispute.ID != disputeID || ev.Reference != disputeID ||
		ev.ProviderID != pi || ev.Amount != amount || ev.Currency != cur || ev.State != providers.StateProcessing ||
		ev.Operation != providers.OpCardCharge {
		t.Fatalf("%s read as %+v (dispute %+v)", typ, ev, ev.Dispute)
	}
	if err := ev.Storable(); err != nil {
		t.Fatal(err)
	}
	return ev
}

// R9, R19: the charge.dispute.* events Stripe sends for a chargeback and
// an inquiry, from the fake (which builds them as Stripe documents the
// Dispute), are read as disputes of the PaymentIntent: the money is
// withdrawn once a chargeback opens (created with status needs_response,
// funds_withdrawn), reinstated when it is won (funds_reinstated, closed
// won), kept when it is lost; an inquiry withdraws nothing. A refund of
// the disputed charge is refused by Stripe (charge_disputed): failed, not
// unknown. Before, every one of these was "not ours".
func TestDisputeEventsRead_R9_R19(t *testing.T) {
	f, p := newFake(t)
	paid := func() string {
		t.Helper()
		res := submit(t, p, charge("80.00", "BRL", "pm_card_visa"), ref(), key())
		if res.State != providers.StateSucceeded {
			t.Fatalf("charge: %+v", res)
		}
		return res.ProviderID
	}

	pi := paid()
	d, evs := f.OpenDispute(pi, 8000, "fraudulent", false)
	id := d["id"].(string)
	if len(evs) != 2 {
		t.Fatalf("%d events for an opened chargeback", len(evs))
	}
	created := disputeEvent(t, p, evs[0], "charge.dispute.created", id, pi, "80.00", "BRL")
	withdrawn := disputeEvent(t, p, evs[1], "charge.dispute.funds_withdrawn", id, pi, "80.00", "BRL")
	for _, ev := range []providers.WebhookEvent{created, withdrawn} {
		if !ev.Dispute.Withdrawn || ev.Dispute.Reinstated || ev.Dispute.Lost || ev.Dispute.Reason != "fraudulent" ||
			ev.Dispute.Status != "needs_response" {
			t.Fatalf("%s: %+v", ev.Type, ev.Dispute)
		}
	}
	var data map[string]string
	if err := json.Unmarshal(withdrawn.Data, &data); err != nil || data["charge"] == "" || data["payment_intent"] != pi {
		t.Fatalf("data %s: %v", withdrawn.Data, err)
	}

	// Stripe refuses a refund of a disputed charge: a 400 (a definitive
	// failure, R2) naming charge_disputed.
	rf := submit(t, p, refund(pi, "10.00", "BRL"), ref(), key())
	if rf.Exchange.StatusCode != http.StatusBadRequest || rf.FailureCode != "charge_disputed" || rf.Refinement != providers.RefineNone {
		t.Fatalf("refund of a disputed charge: %+v", rf)
	}

	_, evs = f.CloseDispute(id, true)
	if len(evs) != 2 {
		t.Fatalf("%d events for a won dispute", len(evs))
	}
	for i, typ := range []string{"charge.dispute.funds_reinstated", "charge.dispute.closed"} {
		ev := disputeEvent(t, p, evs[i], typ, id, pi, "80.00", "BRL")
		if !ev.Dispute.Withdrawn || !ev.Dispute.Reinstated || ev.Dispute.Lost || ev.Dispute.Status != "won" {
			t.Fatalf("%s: %+v", typ, ev.Dispute)
		}
	}

	// A lost one, of part of a second charge.
	pi2 := paid()
	d2, _ := f.OpenDispute(pi2, 2550, "product_not_received", false)
	_, evs = f.CloseDispute(d2["id"].(string), false)
	if len(evs) != 1 {
		t.Fatalf("%d events for a lost dispute", len(evs))
	}
	lost := disputeEvent(t, p, evs[0], "charge.dispute.closed", d2["id"].(string), pi2, "25.50", "BRL")
	if !lost.Dispute.Withdrawn || lost.Dispute.Reinstated || !lost.Dispute.Lost {
		t.Fatalf("lost: %+v", lost.Dispute)
	}

	// An inquiry takes nothing, and the charge stays refundable.
	pi3 := paid()
	d3, evs := f.OpenDispute(pi3, 8000, "general", true)
	if len(evs) != 1 {
		t.Fatalf("%d events for an inquiry", len(evs))
	}
	inq := disputeEvent(t, p, evs[0], "charge.dispute.created", d3["id"].(string), pi3, "80.00", "BRL")
	if inq.Dispute.Withdrawn || inq.Dispute.Status != "warning_needs_response" {
		t.Fatalf("inquiry: %+v", inq.Dispute)
	}
	if rf := submit(t, p, refund(pi3, "10.00", "BRL"), ref(), key()); rf.State != providers.StateSucceeded {
		t.Fatalf("refund during an inquiry: %+v", rf)
	}
}

// R19: the Dispute as Stripe's own OpenAPI fixture has it (stripe-mock's
// GET /v1/disputes/{id}) is read by the adapter: an inquiry of a charge
// with no PaymentIntent, so nothing withdrawn and no provider id to match.
func TestStripeMockDisputeFixtureRead_R19(t *testing.T) {
	base := stripeMock(t)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/v1/disputes/dp_saldo", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(testKey, "")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	obj, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stripe-mock: %d %s", resp.StatusCode, obj)
	}
	body, _ := json.Marshal(map[string]any{"id": "evt_mockdispute", "object": "event", "type": "charge.dispute.created",
		"api_version": "2026-03-25.dahlia", "created": time.Now().Unix(), "livemode": false, "pending_webhooks": 1,
		"data": map[string]any{"object": json.RawMessage(obj)}})
	ev, err := signed(t, newProvider(t, "http://127.0.0.1:1"), body, time.Now(), "whsec_test_secret")
	if err != nil {
		t.Fatal(err)
	}
	if ev.Dispute == nil || ev.Dispute.ID == "" || ev.Reference != ev.Dispute.ID || ev.Amount == "" || ev.Currency == "" ||
		ev.Dispute.Status == "" || ev.Dispute.Reason == "" || ev.State != providers.StateProcessing {
		t.Fatalf("fixture read as %+v (dispute %+v)", ev, ev.Dispute)
	}
	if ev.Dispute.Withdrawn != (ev.Dispute.Status == "needs_response" || ev.Dispute.Status == "under_review" ||
		ev.Dispute.Status == "won" || ev.Dispute.Status == "lost") {
		t.Fatalf("withdrawn %v for status %s", ev.Dispute.Withdrawn, ev.Dispute.Status)
	}
	var data map[string]string
	if err := json.Unmarshal(ev.Data, &data); err != nil || data["charge"] == "" {
		t.Fatalf("the disputed charge is not read: %s %v", ev.Data, err)
	}
}
