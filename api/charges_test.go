package api_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/providers/sim"
)

func (e *env) execute(attemptID string) attempts.Attempt {
	e.t.Helper()
	res, err := e.att.Execute(e.ctx, uuid.MustParse(attemptID))
	require.NoError(e.t, err)
	return res.Attempt
}

// Card charges credit the merchant once paid; refunds are payouts of kind
// refund bounded by the charge (R21); a declined charge is not refundable.
func TestChargesAndRefunds(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	card := map[string]any{"kind": "card", "amount": "100.00", "currency": "BRL", "card_token": "tok_visa", "description": "order 9"}
	require.Equal(t, http.StatusBadRequest, e.post("/v1/merchants/m1/charges", e.m1, "", card).Status)
	r := e.post("/v1/merchants/m1/charges", e.m1, "ch-1", card)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	c := r.json(t)
	require.Equal(t, "processing", c["status"])
	require.Equal(t, string(r.Body), string(e.post("/v1/merchants/m1/charges", e.m1, "ch-1", card).Body))
	require.Equal(t, http.StatusForbidden, e.post("/v1/merchants/m1/charges", e.auditor, "ch-x", card).Status)
	bad := map[string]any{"kind": "card", "amount": "1.00", "currency": "BRL", "card_token": "4111111111111111"}
	r = e.post("/v1/merchants/m1/charges", e.m1, "ch-bad", bad)
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "card_token", r.json(t)["field"])

	require.Equal(t, attempts.StatusSucceeded, e.execute(c["attempt_id"].(string)).Status)
	path := "/v1/merchants/m1/charges/" + c["id"].(string)
	got := e.get(path, e.m1).json(t)
	require.Equal(t, "paid", got["status"])
	require.Equal(t, http.StatusNotFound, e.get("/v1/merchants/m2/charges/"+c["id"].(string), e.m2).Status)
	require.Equal(t, http.StatusNotFound, e.get(path, e.m2).Status)
	av, _ := e.balances("m1", e.m1)
	require.Equal(t, "1100.00", av, "credited net of a zero fee")
	require.Len(t, e.get("/v1/merchants/m1/charges?status=paid&kind=card", e.auditor).json(t)["data"], 1)

	// The notification hook for charges (charges.Config.OnFinal in the
	// engine) records one event per final status, however often called.
	require.Equal(t, http.StatusCreated, e.do(req{method: http.MethodPost, path: "/v1/merchants/m1/notification-endpoints",
		key: e.m1, body: map[string]any{"url": "http://127.0.0.1:1/hook"}}).Status)
	paid, err := e.charges.Get(e.ctx, "m1", c["id"].(string))
	require.NoError(t, err)
	for range 2 {
		require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error { return e.notif.ChargeFinal(e.ctx, tx, paid) }))
	}
	var events int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM notification_events WHERE type = 'charge.paid' AND object_id = $1`,
		paid.ID).Scan(&events))
	require.Equal(t, 1, events, "one event per final status")

	r = e.post(path+"/refunds", e.m1, "rf-1", map[string]any{"amount": "30.00", "currency": "BRL"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	rf := r.json(t)
	require.Equal(t, "refund", rf["kind"])
	require.Equal(t, c["id"], rf["charge_id"])
	r = e.post(path+"/refunds", e.m1, "rf-2", map[string]any{"amount": "80.00", "currency": "BRL"})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(t, "refund_exceeds_charge", r.code(t))
	require.Equal(t, attempts.StatusSucceeded, e.execute(rf["current_attempt_id"].(string)).Status)
	require.Equal(t, "succeeded", e.get("/v1/merchants/m1/payouts/"+rf["id"].(string), e.m1).json(t)["status"])
	av, re := e.balances("m1", e.m1)
	require.Equal(t, []string{"1070.00", "0.00"}, []string{av, re})

	// A declined card is failed and not refundable.
	r = e.post("/v1/merchants/m1/charges", e.m1, "ch-2", map[string]any{"kind": "card", "amount": "5.00", "currency": "BRL", "card_token": "tok_decline"})
	require.Equal(t, http.StatusCreated, r.Status)
	d := r.json(t)
	require.Equal(t, attempts.StatusFailed, e.execute(d["attempt_id"].(string)).Status)
	r = e.post("/v1/merchants/m1/charges/"+d["id"].(string)+"/refunds", e.m1, "rf-3", nil)
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Equal(t, "not_refundable", r.code(t))
}

// R24: ChargesFinal (charges.Config.OnFinalMany in the engine, called once
// for the charges of a group-committed record) records what ChargeFinal
// records for each: one event per final charge and endpoint, none for a
// charge not final, and the same dedupe key, so the two never notify twice.
func TestChargesFinalRecordsEachFinalCharge(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	require.Equal(t, http.StatusCreated, e.do(req{method: http.MethodPost, path: "/v1/merchants/m1/notification-endpoints",
		key: e.m1, body: map[string]any{"url": "http://127.0.0.1:1/hook"}}).Status)
	var cs []charges.Charge
	for i, token := range []string{"tok_visa", "tok_decline", "tok_visa"} {
		r := e.post("/v1/merchants/m1/charges", e.m1, fmt.Sprint("chf-", i),
			map[string]any{"kind": "card", "amount": "10.00", "currency": "BRL", "card_token": token})
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		c := r.json(t)
		if i < 2 {
			e.execute(c["attempt_id"].(string)) // the third stays processing
		}
		got, err := e.charges.Get(e.ctx, "m1", c["id"].(string))
		require.NoError(t, err)
		cs = append(cs, got)
	}
	require.Equal(t, []charges.Status{charges.StatusPaid, charges.StatusFailed, charges.StatusProcessing},
		[]charges.Status{cs[0].Status, cs[1].Status, cs[2].Status})
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error { return e.notif.ChargesFinal(e.ctx, tx, cs) }))
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error { return e.notif.ChargeFinal(e.ctx, tx, cs[0]) }))
	rows, err := e.pool.Query(e.ctx, `SELECT object_id || ' ' || type FROM notification_events
		WHERE type LIKE 'charge.%' ORDER BY type`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{cs[1].ID + " charge.failed", cs[0].ID + " charge.paid"}, got)
	var jobs int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM river_job WHERE kind = 'saldo_deliver_notification'`).Scan(&jobs))
	require.Equal(t, 2, jobs, "a delivery job per event")
}

// A Pix charge: the cob is created, the payer pays, the sim's webhook is
// routed to charges first (outcome handled) and credits the merchant once,
// however often it is delivered.
func TestPixChargeWebhook(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{Seed: 3, WebhookURL: "api", WebhookDuplicateRate: 1})
	r := e.post("/v1/merchants/m2/charges", e.m2, "pix-1", map[string]any{"kind": "pix", "amount": "42.00", "currency": "BRL",
		"pix_expires_in_seconds": 600, "payer_name": "Maria"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	c := r.json(t)
	e.execute(c["attempt_id"].(string))
	path := "/v1/merchants/m2/charges/" + c["id"].(string)
	require.Eventually(t, func() bool {
		return e.get(path, e.m2).json(t)["status"] == "awaiting_payment"
	}, 30*time.Second, 20*time.Millisecond)
	got := e.get(path, e.m2).json(t)
	pix := got["pix"].(map[string]any)
	require.NotEmpty(t, pix["copy_paste"])

	_, err := e.srv.PayCob(pix["txid"].(string), "Maria", "")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return e.get(path, e.m2).json(t)["status"] == "paid"
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, e.srv.FlushWebhooks(e.ctx))
	var handled int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM webhook_events WHERE outcome = 'handled'`).Scan(&handled))
	require.GreaterOrEqual(t, handled, 1)
	av, _ := e.balances("m2", e.m2)
	require.Equal(t, "42.00", av, "credited once despite duplicate deliveries")
}
