package engine_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers/stripe/stripefake"
)

// disputeAPI is payoutAPI with card charges routed to the Stripe fake
// and an endpoint of m1's, so its notifications are recorded.
type disputeAPI struct {
	*payoutAPI
}

func newDisputeAPI(t *testing.T) disputeAPI {
	t.Helper()
	w := newPayoutAPI(t, "card_charge=stripe")
	_, err := w.pool.Exec(w.ctx, `INSERT INTO notification_endpoints (id, merchant_id, url, secret, created_at)
		VALUES ('we_00000000000000000000000000000001', 'm1', 'http://127.0.0.1:9/hook', 'whsec', now())`)
	require.NoError(t, err)
	return disputeAPI{w}
}

// paidCharge is a card charge of amount BRL, captured by Stripe at once.
func (w disputeAPI) paidCharge(t *testing.T, amount string) (charges.Charge, attempts.Attempt) {
	t.Helper()
	ch, err := w.e.Charges.Create(w.ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindCard,
		Amount: money.MustParse(amount, "BRL"), CardToken: stripefake.PMVisa, Description: "Pedido 7"})
	require.NoError(t, err)
	require.Equal(t, "stripe", ch.Provider)
	res, err := w.e.Attempts.Execute(w.ctx, *ch.AttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, res.Attempt.Status)
	require.Regexp(t, `^pi_`, res.Attempt.ProviderID)
	c, err := w.e.Charges.Get(w.ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, c.Status)
	require.False(t, c.NeedsAttention)
	return c, res.Attempt
}

// deliver POSTs a Stripe event, signed as Stripe signs it, to the real
// webhook route and returns the status and outcome.
func (w disputeAPI) deliver(t *testing.T, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(w.ctx, http.MethodPost, w.url+"/v1/webhooks/stripe", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Stripe-Signature", stripefake.Sign(stripeE2EWebhookSecret, time.Now(), body))
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

// handled delivers each event and expects the charges to take it.
func (w disputeAPI) handled(t *testing.T, evs ...[]byte) {
	t.Helper()
	for _, ev := range evs {
		code, outcome := w.deliver(t, ev)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, api.WebhookHandled, outcome, "%s", ev)
	}
}

// refund asks for a refund of 10.00 of charge id through the API.
func (w disputeAPI) refund(t *testing.T, id string) (int, map[string]any) {
	t.Helper()
	return w.post(t, "/v1/merchants/m1/charges/"+id+"/refunds", map[string]any{"amount": "10.00", "currency": "BRL"})
}

// diverged checks that the charge's attempt holds a dispute divergence,
// unsettled, in review, announced, and returns it.
func (w disputeAPI) diverged(t *testing.T, c charges.Charge, a attempts.Attempt, disputeID string) attempts.Attempt {
	t.Helper()
	got, err := w.e.Attempts.Get(w.ctx, w.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, got.Status, "finals never change (R9)")
	require.NotNil(t, got.DivergedAt, "the dispute is a divergence on the succeeded attempt")
	require.True(t, got.Review)
	require.Contains(t, got.Divergence, "divergence (dispute)")
	require.Contains(t, got.Divergence, disputeID)
	kind, err := attempts.DivergenceKind(w.ctx, w.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.DivergenceDispute, kind)

	v := w.get(t, "/v1/merchants/m1/charges/"+c.ID)
	require.Equal(t, "paid", v["status"], "the charge stays paid (R9)")
	require.Equal(t, true, v["needs_attention"])

	var n int
	var data []byte
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM notification_events
		WHERE object_id = $1 AND type = 'charge.diverged'`, c.ID).Scan(&n))
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT payload FROM notification_events
		WHERE object_id = $1 AND type = 'charge.diverged' LIMIT 1`, c.ID).Scan(&data))
	require.Equal(t, 1, n, "one charge.diverged, whatever the number of events")
	var ev map[string]any
	require.NoError(t, json.Unmarshal(data, &ev))
	d := ev["data"].(map[string]any)
	require.Equal(t, api.DivergenceDispute, d["divergence_kind"], string(data))
	require.Equal(t, a.ID.String(), d["attempt_id"])
	require.Equal(t, true, d["object"].(map[string]any)["needs_attention"])
	return got
}

// notes are the webhook notes on attempt a, by event id.
func (w disputeAPI) notes(t *testing.T, a attempts.Attempt) map[string]string {
	t.Helper()
	rows, err := w.pool.Query(w.ctx, `SELECT actor_id, reason FROM attempt_events
		WHERE attempt_id = $1 AND type = 'note' AND actor = 'webhook'`, a.ID)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, reason string
		require.NoError(t, rows.Scan(&id, &reason))
		_, dup := out[id]
		require.False(t, dup, "event %s noted twice", id)
		out[id] = reason
	}
	require.NoError(t, rows.Err())
	return out
}

func eventID(t *testing.T, body []byte) string {
	t.Helper()
	var ev struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(body, &ev))
	return ev.ID
}

func (w disputeAPI) auditOK(t *testing.T, want bool) {
	t.Helper()
	res, err := audit.Run(w.ctx, w.pool)
	require.NoError(t, err)
	require.Equal(t, want, res.OK(), res.Summary())
	if !want {
		require.Contains(t, res.Summary(), "diverged")
	}
}

// R9, R19, R21, R22: a paid Stripe card charge the cardholder disputes.
// Stripe withdraws the disputed amount from the platform's balance and
// sends charge.dispute.created and charge.dispute.funds_withdrawn: through
// the real webhook route the charge's succeeded attempt gets a divergence
// of kind dispute, like a reversal: the status and the ledger stay, the
// attempt is in review, the charge needs_attention, charge.diverged tells
// the merchant with divergence_kind "dispute", a refund is refused with
// 409 charge_disputed (nothing reserved; Stripe would refuse it too), and
// the audit fails. The merchant's share of the charge is held (available
// -> held) in the divergence's transaction: it can no longer be paid out.
// Redeliveries are duplicates. The dispute is lost (charge.dispute.closed):
// a note; the divergence stays until the operator settles it booking the
// held money as gone ("hold": "book"); then the audit is clean. The charge
// stays unrefundable. Before, every charge.dispute.* event was "unmatched"
// and the merchant's balance kept money the platform no longer had, and
// then, until the operator acted, it could still be paid out.
func TestStripeDisputeLostIsADivergenceUntilBooked_R9_R19_R21_R22(t *testing.T) {
	t.Parallel()
	w := newDisputeAPI(t)
	c, a := w.paidCharge(t, "100.00")
	before := merchantBalances(t, w.pool)

	d, opened := w.fake.OpenDispute(a.ProviderID, 10000, "fraudulent", false)
	dp := d["id"].(string)
	w.handled(t, opened...)
	got := w.diverged(t, c, a, dp)
	require.Contains(t, got.Divergence, "fraudulent")
	require.Contains(t, got.Divergence, "100.00 BRL")
	heldNow := heldBalance(t, w)
	require.Equal(t, "100.00", heldNow, "the merchant's share is held automatically (R22)")
	afterHold := merchantBalances(t, w.pool)
	require.NotEqual(t, before, afterHold)
	notes := w.notes(t, a)
	require.Len(t, notes, 2, "each event is noted")

	// Redeliveries change nothing.
	for _, ev := range opened {
		code, outcome := w.deliver(t, ev)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, api.WebhookDuplicate, outcome)
	}
	require.Len(t, w.notes(t, a), 2)

	// No refund of a disputed charge.
	code, p := w.refund(t, c.ID)
	require.Equal(t, http.StatusConflict, code, "%v", p)
	require.Equal(t, "charge_disputed", p["code"], "%v", p)
	require.Equal(t, afterHold, merchantBalances(t, w.pool), "nothing reserved")
	require.Equal(t, 0, w.fake.Requests("POST /v1/refunds"))
	w.auditOK(t, false)

	// Lost: the money stays withdrawn; a note, the divergence stands.
	_, closed := w.fake.CloseDispute(dp, false)
	w.handled(t, closed...)
	notes = w.notes(t, a)
	require.Contains(t, notes[eventID(t, closed[0])], "lost")
	again := w.diverged(t, c, a, dp)
	require.Equal(t, got.DivergedAt, again.DivergedAt, "the evidence never changes")
	require.Nil(t, again.DivergenceSettledAt, "only a human settles it")
	w.auditOK(t, false)

	// The operator settles it, booking the held money as gone.
	_, err := w.e.Attempts.SettleDivergence(w.ctx, a.ID, "op-1", "dispute "+dp+" lost; the held money is gone", attempts.HoldBook)
	require.NoError(t, err)
	require.Equal(t, "0.00", heldBalance(t, w))
	require.Equal(t, afterHold, merchantBalances(t, w.pool), "booked from held, available untouched")
	require.Equal(t, false, w.get(t, "/v1/merchants/m1/charges/"+c.ID)["needs_attention"])
	code, p = w.refund(t, c.ID)
	require.Equal(t, http.StatusConflict, code, "a charged-back charge is never refundable: %v", p)
	require.Equal(t, "charge_disputed", p["code"])
	w.auditOK(t, true)
}

// R9, R19: a dispute the merchant wins. The chargeback's events make the
// dispute divergence; funds_reinstated and closed (won) are noted on the
// attempt for the operator, who settles the divergence releasing the held
// share back to the merchant's available balance (the money came back):
// nothing was settled automatically. Then the audit is clean.
func TestStripeDisputeWonIsNotedAndSettledByTheOperator_R9_R19(t *testing.T) {
	t.Parallel()
	w := newDisputeAPI(t)
	c, a := w.paidCharge(t, "60.00")
	before := merchantBalances(t, w.pool)
	d, opened := w.fake.OpenDispute(a.ProviderID, 6000, "product_not_received", false)
	dp := d["id"].(string)
	w.handled(t, opened...)
	w.diverged(t, c, a, dp)

	_, won := w.fake.CloseDispute(dp, true)
	w.handled(t, won...)
	notes := w.notes(t, a)
	require.Len(t, notes, 4)
	for _, ev := range won {
		require.Contains(t, notes[eventID(t, ev)], "came back", "the operator sees the money came back")
	}
	got := w.diverged(t, c, a, dp)
	require.Nil(t, got.DivergenceSettledAt, "a won dispute is settled by a human, not automatically")
	require.NotEqual(t, before, merchantBalances(t, w.pool), "held until the operator settles")
	require.Equal(t, "60.00", heldBalance(t, w))
	w.auditOK(t, false)

	_, err := w.e.Attempts.SettleDivergence(w.ctx, a.ID, "op-2", "dispute "+dp+" won; the held share goes back", attempts.HoldRelease)
	require.NoError(t, err)
	require.Equal(t, before, merchantBalances(t, w.pool), "released back to available")
	require.Equal(t, "0.00", heldBalance(t, w))
	require.Equal(t, false, w.get(t, "/v1/merchants/m1/charges/"+c.ID)["needs_attention"])
	w.auditOK(t, true)
}

// R9, R17, R19: Stripe does not promise the order of its events. The
// dispute's closing (won) arrives before the events that opened it: the
// first event that says the money was withdrawn (here closed, with status
// won) records the dispute divergence, and created and funds_withdrawn,
// arriving late, are notes only: one divergence, one charge.diverged,
// nothing broken. An inquiry (which withdraws nothing) on another charge
// is a note: no divergence, no review, still refundable.
func TestStripeDisputeEventsOutOfOrder_R9_R17_R19(t *testing.T) {
	t.Parallel()
	w := newDisputeAPI(t)
	c, a := w.paidCharge(t, "40.00")
	d, opened := w.fake.OpenDispute(a.ProviderID, 4000, "duplicate", false)
	dp := d["id"].(string)
	_, won := w.fake.CloseDispute(dp, true)
	w.handled(t, won[1]) // closed (won) first
	first := w.diverged(t, c, a, dp)
	w.handled(t, won[0], opened[1], opened[0]) // reinstated, withdrawn, created
	again := w.diverged(t, c, a, dp)
	require.Equal(t, first.DivergedAt, again.DivergedAt)
	require.Equal(t, first.Divergence, again.Divergence)
	require.Len(t, w.notes(t, a), 4)

	c2, a2 := w.paidCharge(t, "30.00")
	_, inq := w.fake.OpenDispute(a2.ProviderID, 3000, "general", true)
	w.handled(t, inq...)
	got, err := w.e.Attempts.Get(w.ctx, w.pool, a2.ID)
	require.NoError(t, err)
	require.Nil(t, got.DivergedAt, "an inquiry withdraws nothing")
	require.False(t, got.Review)
	require.Contains(t, w.notes(t, a2)[eventID(t, inq[0])], "inquiry")
	code, p := w.refund(t, c2.ID)
	require.Equal(t, http.StatusCreated, code, "a charge under inquiry stays refundable: %v", p)

	_, err = w.e.Attempts.SettleDivergence(w.ctx, a.ID, "op-3", "dispute "+dp+" won", attempts.HoldRelease)
	require.NoError(t, err)
	// The refund of c2 is open or settled at Stripe; the audit is clean
	// once the dispute divergence is settled.
	res, err := w.e.Attempts.Execute(w.ctx, mustUUID(t, p["current_attempt_id"]))
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, res.Attempt.Status)
	w.auditOK(t, true)
}

// heldBalance is m1's held BRL balance as the API shows it.
func heldBalance(t *testing.T, w disputeAPI) string {
	t.Helper()
	b := w.get(t, "/v1/merchants/m1/balances")
	for _, x := range b["balances"].([]any) {
		if m := x.(map[string]any); m["currency"] == "BRL" {
			return m["held"].(string)
		}
	}
	return "0.00"
}

func mustUUID(t *testing.T, v any) uuid.UUID {
	t.Helper()
	s, _ := v.(string)
	id, err := uuid.Parse(s)
	require.NoError(t, err, "%v", v)
	return id
}
