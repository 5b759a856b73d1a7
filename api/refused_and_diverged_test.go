package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers/sim"
)

// R9, R19, R24: a Pix transfer's attempt is resolved failed by "not found"
// past the window (reserve released, payout failed), then the provider's
// webhook says it was paid: a divergence, in the review queue. The API
// tells the merchant: status failed, needs_attention true (its natural
// next step, a new payout, would pay the recipient twice), until an
// operator settles the divergence.
func TestDivergedFailedPayoutNeedsAttention_R9_R19(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	p := e.createPix("10.00", "rv-div-1")
	a := e.attemptOf(p)
	e.failThenReportPaid(t, a, "10.00", "late_op_1")

	v, err := e.pay.Get(e.ctx, "m1", p["id"].(string))
	require.NoError(t, err)
	require.True(t, v.NeedsAttention, "the domain says the diverged payout needs attention")
	q := e.get("/v1/review-queue", e.operator).json(t)
	require.Len(t, q["data"], 1, "the diverged attempt waits in the review queue")

	got := e.get("/v1/merchants/m1/payouts/"+p["id"].(string), e.m1)
	require.Equal(t, http.StatusOK, got.Status, string(got.Body))
	j := got.json(t)
	require.Equal(t, "failed", j["status"])
	require.Equal(t, true, j["needs_attention"], "the provider reports this failed payout paid: %s", got.Body)

	// Once an operator has settled the divergence, nobody's attention is needed.
	_, err = e.att.SettleDivergence(e.ctx, a.ID, e.operatorID, "booked with the merchant", attempts.HoldBook)
	require.NoError(t, err)
	got = e.get("/v1/merchants/m1/payouts/"+p["id"].(string), e.m1)
	require.Equal(t, false, got.json(t)["needs_attention"], string(got.Body))
}

// A refused request writes nothing (as TestHardeningRefusedRequestWritesNothing
// holds for payouts): a negative funding adjustment in a currency the
// merchant never held is refused 422 insufficient_balance before any
// account is opened, so the merchant's balances list no new currency.
func TestRefusedNegativeFundingOpensNoAccount(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	accounts := e.countRows("ledger_accounts")
	r := e.post("/v1/merchants/m2/fundings", e.admin, "rv-neg-usd",
		map[string]any{"amount": "-5.00", "currency": "USD", "reason": "chargeback fee"})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(t, "insufficient_balance", r.code(t))
	bs := e.get("/v1/merchants/m2/balances", e.m2)
	require.Equal(t, http.StatusOK, bs.Status)
	require.Empty(t, bs.json(t)["balances"], "m2 never held a currency, yet a refused funding made it list one: %s", bs.Body)
	require.Equal(t, accounts, e.countRows("ledger_accounts"), "a refused funding created ledger accounts")
}

// R21, R6, R9 end to end: a paid card charge of 100.00; a refund of 60.00 is
// failed by "not found" past the window; the provider's signed webhook then
// reports that refund paid (a divergence: the payer has the 60.00). Retry
// of the diverged refund is refused, and a new refund is bounded the same
// way: a full refund is the 40.00 left, and one cent more is refused.
func TestFullRefundAfterADivergedRefundIsWhatIsLeft_R21(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	c := e.paidCard(t, "rv-rf-ch", "100.00")
	path := "/v1/merchants/m1/charges/" + c["id"].(string) + "/refunds"
	r := e.post(path, e.m1, "rv-rf-1", map[string]any{"amount": "60.00", "currency": "BRL"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	ref := e.attemptOf(r.json(t))
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: ref.Reference}))
	res, err := e.att.Execute(e.ctx, ref.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, res.Attempt.Status)
	e.clock.Advance(time.Hour)
	rr, err := e.att.Resolve(e.ctx, ref.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusFailed, rr.Attempt.Status)

	now := e.clock.Now()
	ev, _ := json.Marshal(map[string]any{"id": "evt_late_refund", "type": "operation.succeeded", "created_at": now,
		"data": map[string]any{"id": "op_late_refund", "reference": ref.Reference, "operation": "refund",
			"amount": "60.00", "currency": "BRL", "state": "succeeded", "created_at": now}})
	w := e.webhook(ev, now, webhookSecret)
	require.Equal(t, http.StatusOK, w.Status, string(w.Body))
	got, err := e.att.Get(e.ctx, e.pool, ref.ID)
	require.NoError(t, err)
	require.NotNil(t, got.DivergedAt, "saldo knows the failed refund was paid")
	t.Cleanup(func() {
		_, err := e.att.SettleDivergence(e.ctx, ref.ID, e.operatorID, "review test", attempts.HoldBook)
		require.NoError(t, err)
	})

	retry := e.post("/v1/merchants/m1/payouts/"+got.SubjectID+"/retry", e.m1, "rv-rf-retry", nil)
	require.Equal(t, http.StatusConflict, retry.Status, "retry of the diverged refund is refused: %s", retry.Body)

	// A full refund now is what is left: 40.00, not 100.00.
	again := e.post(path, e.m1, "rv-rf-2", map[string]any{})
	require.Equal(t, http.StatusCreated, again.Status, string(again.Body))
	require.Equal(t, "40.00", again.json(t)["amount"], "the refund the provider reports paid still counts against the charge")
	// And nothing more after it.
	more := e.post(path, e.m1, "rv-rf-3", map[string]any{"amount": "0.01", "currency": "BRL"})
	require.Equal(t, http.StatusUnprocessableEntity, more.Status, string(more.Body))
}
