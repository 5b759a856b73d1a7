package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers/sim"
)

// paidCard makes a card charge of m1 and executes its attempt: paid.
func (e *env) paidCard(t *testing.T, idem, amount string) map[string]any {
	t.Helper()
	r := e.post("/v1/merchants/m1/charges", e.m1, idem, map[string]any{"kind": "card", "amount": amount,
		"currency": "BRL", "card_token": "tok_visa"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	c := r.json(t)
	require.Equal(t, attempts.StatusSucceeded, e.execute(c["attempt_id"].(string)).Status)
	return c
}

// "Bad input gets a clear 4xx naming the field and loses nothing" (R21):
// a full refund (amount left out) that names another currency than the
// charge's, or an unknown one, is 400 on currency; it was accepted and
// refunded the charge in its own currency. Naming the charge's own
// currency is fine.
func TestFullRefundWithOtherCurrencyIsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	c := e.paidCard(t, "rfv-ch-1", "10.00")
	path := "/v1/merchants/m1/charges/" + c["id"].(string) + "/refunds"
	refunds := e.countRows("payouts")
	for i, cur := range []string{"USD", "XXQ", "brl"} {
		r := e.post(path, e.m1, "rfv-rf-bad-"+string(rune('a'+i)), map[string]any{"currency": cur})
		require.Equal(t, http.StatusBadRequest, r.Status, "currency %s on a BRL charge: %s", cur, string(r.Body))
		require.Equal(t, "currency", r.field(t), string(r.Body))
	}
	require.Equal(t, refunds, e.countRows("payouts"), "nothing was refunded")
	// Another merchant's charge stays a 404, whatever the currency.
	r := e.post(path, e.m2, "rfv-rf-m2", map[string]any{"currency": "BRL"})
	require.Equal(t, http.StatusNotFound, r.Status, string(r.Body))
	r = e.post(path, e.m1, "rfv-rf-ok", map[string]any{"currency": "BRL"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.Equal(t, "10.00", r.json(t)["amount"])
	e.execute(r.json(t)["current_attempt_id"].(string))
}

// A second full refund of a fully refunded charge is 422
// refund_exceeds_charge, like a partial one (what the OpenAPI document
// promises for "succeeded plus open refunds never exceed the charge"), not
// 400 validation_failed.
func TestFullRefundOfFullyRefundedChargeIs422(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	c := e.paidCard(t, "rfv-ch-2", "10.00")
	path := "/v1/merchants/m1/charges/" + c["id"].(string) + "/refunds"
	r := e.post(path, e.m1, "rfv-rf-2", nil)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	e.execute(r.json(t)["current_attempt_id"].(string))
	r = e.post(path, e.m1, "rfv-rf-3", map[string]any{"amount": "0.01", "currency": "BRL"})
	require.Equal(t, "refund_exceeds_charge", r.code(t))
	r = e.post(path, e.m1, "rfv-rf-4", nil)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(t, "refund_exceeds_charge", r.code(t))
}

// "Bad input gets a clear 4xx naming the field": pix_expires_in_seconds was
// multiplied by time.Second without a bound, and 2^55 + 3600 seconds
// wrapped to exactly one hour: a 1-hour cob for a request that asked for
// ~1.1 billion years. Above 86400 is 400 on the field; 86400 is accepted.
func TestPixExpiryOverflowRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	for i, v := range []int64{int64(1)<<55 + 3600, 82801, 86400, -1} {
		r := e.post("/v1/merchants/m1/charges", e.m1, "rfv-pix-bad-"+string(rune('a'+i)), map[string]any{"kind": "pix",
			"amount": "10.00", "currency": "BRL", "pix_expires_in_seconds": v})
		require.Equal(t, http.StatusBadRequest, r.Status, "%d: %s", v, string(r.Body))
		require.Equal(t, "pix_expires_in_seconds", r.field(t), string(r.Body))
	}
	r := e.post("/v1/merchants/m1/charges", e.m1, "rfv-pix-ok", map[string]any{"kind": "pix", "amount": "10.00",
		"currency": "BRL", "pix_expires_in_seconds": 82800})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	e.execute(r.json(t)["attempt_id"].(string))
}

// "Every 5xx a client can trigger is a defect": extreme but well-formed
// amounts and split values never answer 5xx.
func TestChargeExtremeAmountsNever5xx(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	bodies := []map[string]any{
		{"kind": "card", "amount": "99999999999999999999.99", "currency": "BRL", "card_token": "tok_visa"},
		{"kind": "pix", "amount": "99999999999999999999.99", "currency": "BRL"},
		{"kind": "card", "amount": "99999999999999999999", "currency": "JPY", "card_token": "tok_visa"},
		{"kind": "card", "amount": "10.00", "currency": "BRL", "card_token": "tok_visa",
			"splits": []map[string]any{{"recipient_id": "m2", "percent": "99999999999999999999.9999"}}},
		{"kind": "card", "amount": "10.00", "currency": "BRL", "card_token": "tok_visa",
			"splits": []map[string]any{{"recipient_id": "m2", "amount": "99999999999999999999.99"}}},
		{"kind": "card", "amount": "10.00", "currency": "BRL", "card_token": "tok_visa",
			"splits": []map[string]any{{"recipient_id": "m2", "percent": "50", "amount": "1.00"}}},
	}
	for i, b := range bodies {
		r, err := e.exchange(req{method: http.MethodPost, path: "/v1/merchants/m1/charges", key: e.m1, body: b,
			header: map[string]string{"Idempotency-Key": "rfv-x-" + string(rune('a'+i))}})
		require.NoError(t, err)
		require.Less(t, r.Status, 500, "body %d: %s", i, string(r.Body))
		if r.Status == http.StatusCreated {
			e.execute(r.json(t)["attempt_id"].(string))
		}
	}
}
