package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// A divergence (the provider paid a payout saldo resolved failed) is settled
// by an operator with a reason: the evidence stays on the attempt, the
// audit lets it go. Auditors cannot; a second settlement is a 409; no
// reason is a 400 naming it.
func TestOperatorSettlesADivergence_R19(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	p := e.createPix("10.00", "dv-1")
	a := e.attemptOf(p)
	e.failThenReportPaid(t, a, "10.00", "op_late")

	path := "/v1/attempts/" + a.ID.String() + "/divergence-settlement"
	res := e.post(path, e.auditor, "dv-s-0", map[string]any{"reason": "x"})
	require.Equal(t, http.StatusForbidden, res.Status)
	res = e.post(path, e.operator, "dv-s-1", map[string]any{"reason": "  "})
	require.Equal(t, http.StatusBadRequest, res.Status)
	require.Equal(t, "reason", res.json(t)["field"])
	res = e.post(path, e.operator, "dv-s-2", map[string]any{"reason": "the PSP paid after its 503; recovered, ticket 7", "hold": "release"})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	body := res.json(t)
	require.NotEmpty(t, body["diverged_at"], "the evidence stays")
	require.NotEmpty(t, body["divergence_settled_at"])
	require.Equal(t, e.operatorID, body["divergence_settled_by"])
	res = e.post(path, e.operator, "dv-s-3", map[string]any{"reason": "again"})
	require.Equal(t, http.StatusConflict, res.Status)
	require.Equal(t, "not_diverged", res.code(t))
	// auditClean (after the test) finds the audit clean again.
}

// heldOf is a merchant's held BRL balance as the API shows it.
func (e *env) heldOf(t *testing.T, merchant, key string) string {
	t.Helper()
	r := e.get("/v1/merchants/"+merchant+"/balances", key)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var b struct {
		Balances []struct{ Currency, Held string }
	}
	require.NoError(t, json.Unmarshal(r.Body, &b))
	for _, x := range b.Balances {
		if x.Currency == "BRL" {
			return x.Held
		}
	}
	return "0.00"
}

// R9, R19, R22: a payout paid after saldo failed it holds the merchant's
// 10.00 (the balances say held) from the divergence's transaction on. The
// settlement then needs a hold decision: without one it is a 422
// hold_decision_required naming the amount and the field, and nothing
// changes; an unknown decision is a 400; "book" settles it and moves the
// held money out, the statement naming the hold's entries by the payout.
// A divergence that holds nothing (a payout's reversal) is settled with a
// decision all the same, and the note says nothing was held.
func TestSettlementNeedsAHoldDecisionWhileMoneyIsHeld_R19_R22(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	p := e.createPix("10.00", "hd-1")
	a := e.attemptOf(p)
	e.failThenReportPaid(t, a, "10.00", "op_late_hd")
	require.Equal(t, "10.00", e.heldOf(t, "m1", e.m1))
	avail, _ := e.balances("m1", e.m1)

	path := "/v1/attempts/" + a.ID.String() + "/divergence-settlement"
	res := e.post(path, e.operator, "hd-s-1", map[string]any{"reason": "paid twice"})
	require.Equal(t, http.StatusUnprocessableEntity, res.Status, string(res.Body))
	require.Equal(t, "hold_decision_required", res.code(t))
	body := res.json(t)
	require.Equal(t, "hold", body["field"])
	require.Contains(t, body["detail"], "10.00 BRL of merchant m1")
	got, err := e.att.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Nil(t, got.DivergenceSettledAt, "nothing changed")
	require.Equal(t, "10.00", e.heldOf(t, "m1", e.m1))
	res = e.post(path, e.operator, "hd-s-2", map[string]any{"reason": "paid twice", "hold": "keep"})
	require.Equal(t, http.StatusBadRequest, res.Status, string(res.Body))
	require.Equal(t, "hold", res.json(t)["field"])

	res = e.post(path, e.operator, "hd-s-3", map[string]any{"reason": "paid twice; the recipient keeps it", "hold": "book"})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.Contains(t, res.json(t)["divergence_settlement"], "booked as gone")
	require.Equal(t, "0.00", e.heldOf(t, "m1", e.m1))
	after, _ := e.balances("m1", e.m1)
	require.Equal(t, avail, after, "booked from held")

	st := e.get("/v1/merchants/m1/statement?order=asc", e.m1)
	require.Equal(t, http.StatusOK, st.Status, string(st.Body))
	var page struct {
		Data []struct {
			Purpose string
			Amount  string
			Cause   struct{ Kind, Object, ObjectID, AttemptID string } `json:"cause"`
		}
	}
	require.NoError(t, json.Unmarshal(st.Body, &page))
	kinds := map[string]int{}
	for _, d := range page.Data {
		c := d.Cause
		if c.Kind == "divergence_hold" || c.Kind == "divergence_hold_book" {
			kinds[c.Kind]++
			require.Equal(t, "pix_transfer", c.Object, "%+v", d)
		}
	}
	require.Equal(t, map[string]int{"divergence_hold": 2, "divergence_hold_book": 1}, kinds, string(st.Body))

	// A payout's reversal holds nothing: a decision is accepted, nothing moves.
	p2 := e.createPix("5.00", "hd-2")
	a2 := e.attemptOf(p2)
	require.Equal(t, attempts.StatusSucceeded, e.execute(a2.ID.String()).Status)
	_, err = e.att.ResolveByReference(e.ctx, attempts.ResolveInput{Reference: a2.Reference, Provider: a2.Provider,
		Operation: providers.OpPixTransfer, Amount: "5.00", Currency: "BRL", State: providers.StateFailed,
		Source: attempts.SourceWebhook, Actor: "evt_returned_hd"})
	require.NoError(t, err)
	require.Equal(t, "0.00", e.heldOf(t, "m1", e.m1))
	res = e.post("/v1/attempts/"+a2.ID.String()+"/divergence-settlement", e.operator, "hd-s-4",
		map[string]any{"reason": "returned; re-credited by funding f-1", "hold": "release"})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.Contains(t, res.json(t)["divergence_settlement"], "nothing is held")
}
