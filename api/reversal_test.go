package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// R9, R19, R22: a payout the provider reports failed after it succeeded (a
// payout the bank returned, a transfer reversed in full) keeps its final
// status and its ledger entries, and is a divergence like a success after
// failed: in the review queue, needs_attention on the payout, reported by
// audit verify, announced to the merchant as payout.diverged with
// divergence_kind "reversal", until an operator books it and settles it.
// Before, it was a note and an ERROR log only: nothing a human had to act on.
func TestPayoutFailedAfterSuccessIsADivergenceInReview_R9_R19(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	r := e.post("/v1/merchants/m1/notification-endpoints", e.m1, "", map[string]any{"url": "http://127.0.0.1:9/hook"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	p := e.createPix("10.00", "rev-1")
	a := e.attemptOf(p)
	require.Equal(t, attempts.StatusSucceeded, e.execute(a.ID.String()).Status)
	before, _ := e.balances("m1", e.m1)

	// The provider's word, later: the transfer failed (returned).
	_, err := e.att.ResolveByReference(e.ctx, attempts.ResolveInput{Reference: a.Reference, Provider: a.Provider,
		Operation: providers.OpPixTransfer, Amount: "10.00", Currency: "BRL", State: providers.StateFailed,
		Source: attempts.SourceWebhook, Actor: "evt_returned"})
	require.NoError(t, err)

	got, err := e.att.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, got.Status, "finals never change (R9)")
	require.NotNil(t, got.DivergedAt, "a failure after success is a divergence")
	require.True(t, got.Review)
	after, _ := e.balances("m1", e.m1)
	require.Equal(t, before, after, "nothing moves automatically")

	v := e.get("/v1/merchants/m1/payouts/"+p["id"].(string), e.m1).json(t)
	require.Equal(t, "succeeded", v["status"])
	require.Equal(t, true, v["needs_attention"], "the merchant's view says a human is on it")

	q := e.get("/v1/review-queue", e.operator)
	require.Equal(t, http.StatusOK, q.Status, string(q.Body))
	require.Contains(t, string(q.Body), a.ID.String(), "the review queue lists the reversal")

	res, err := audit.Run(e.ctx, e.pool)
	require.NoError(t, err)
	require.False(t, res.OK(), "audit verify reports the unsettled reversal")
	require.Contains(t, res.Summary(), "diverged")

	var data []byte
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT payload FROM notification_events
		WHERE object_id = $1 AND type = 'payout.diverged'`, p["id"]).Scan(&data))
	var ev map[string]any
	require.NoError(t, json.Unmarshal(data, &ev))
	require.Equal(t, "reversal", ev["data"].(map[string]any)["divergence_kind"], string(data))

	// A second report of the same failure adds a note only.
	_, err = e.att.ResolveByReference(e.ctx, attempts.ResolveInput{Reference: a.Reference, Provider: a.Provider,
		Operation: providers.OpPixTransfer, Amount: "10.00", Currency: "BRL", State: providers.StateFailed,
		Source: attempts.SourceWebhook, Actor: "evt_returned_again"})
	require.NoError(t, err)
	again, err := e.att.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, got.DivergedAt, again.DivergedAt, "the evidence never changes")

	s := e.post("/v1/attempts/"+a.ID.String()+"/divergence-settlement", e.operator, "rev-s-1",
		map[string]any{"reason": "bank returned it; merchant re-credited by funding f-7"})
	require.Equal(t, http.StatusOK, s.Status, string(s.Body))
	// auditClean (after the test) finds the audit clean again.
}

// R9, R19, R21: a card charge the provider reports failed after it was paid
// (credited with money that may never have arrived) is not refundable: a
// refund would pay out what was not received. Refused with a clear 409,
// nothing reserved.
func TestChargeFailedAfterPaidIsNotRefundable_R9_R19_R21(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	card := map[string]any{"kind": "card", "amount": "100.00", "currency": "BRL", "card_token": "tok_visa"}
	r := e.post("/v1/merchants/m1/charges", e.m1, "rev-ch-1", card)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	c := r.json(t)
	a := e.execute(c["attempt_id"].(string))
	require.Equal(t, attempts.StatusSucceeded, a.Status)

	_, err := e.att.ResolveByReference(e.ctx, attempts.ResolveInput{Reference: a.Reference, Provider: a.Provider,
		Operation: providers.Operation(a.Operation), Amount: "100.00", Currency: "BRL", State: providers.StateFailed,
		Source: attempts.SourceWebhook, Actor: "evt_charge_failed"})
	require.NoError(t, err)
	got, err := e.att.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.NotNil(t, got.DivergedAt)

	av, re := e.balances("m1", e.m1)
	rf := e.post("/v1/merchants/m1/charges/"+c["id"].(string)+"/refunds", e.m1, "rev-rf-1",
		map[string]any{"amount": "30.00", "currency": "BRL"})
	require.Equal(t, http.StatusConflict, rf.Status, string(rf.Body))
	require.Equal(t, "not_refundable", rf.code(t))
	require.Contains(t, string(rf.Body), "failed after it was paid")
	av2, re2 := e.balances("m1", e.m1)
	require.Equal(t, []string{av, re}, []string{av2, re2}, "nothing reserved")

	_, err = e.att.SettleDivergence(e.ctx, a.ID, "op-rev", "charge reversed; merchant debited by adjustment a-3", attempts.HoldBook)
	require.NoError(t, err)
	rf = e.post("/v1/merchants/m1/charges/"+c["id"].(string)+"/refunds", e.m1, "rev-rf-2",
		map[string]any{"amount": "30.00", "currency": "BRL"})
	require.Equal(t, http.StatusConflict, rf.Status, "still not refundable once settled: the money did not arrive")
}

// R9, R19: the kind of a divergence is kept with its evidence (migration
// 00107): a charge the provider reports failed after it was paid is a
// reversal, its charge needs_attention until the operator settles it; the
// kind never changes once recorded, and a dispute or a reversal is only
// ever recorded on a succeeded attempt (PostgreSQL refuses the rest).
func TestDivergenceKindIsKeptWithTheEvidence_R9_R19(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	card := map[string]any{"kind": "card", "amount": "20.00", "currency": "BRL", "card_token": "tok_visa"}
	r := e.post("/v1/merchants/m1/charges", e.m1, "kind-ch-1", card)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	c := r.json(t)
	require.Equal(t, false, c["needs_attention"])
	a := e.execute(c["attempt_id"].(string))
	require.Equal(t, attempts.StatusSucceeded, a.Status)
	kind, err := attempts.DivergenceKind(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Empty(t, kind)

	_, err = e.att.ResolveByReference(e.ctx, attempts.ResolveInput{Reference: a.Reference, Provider: a.Provider,
		Operation: providers.Operation(a.Operation), Amount: "20.00", Currency: "BRL", State: providers.StateFailed,
		Source: attempts.SourceWebhook, Actor: "evt_kind_failed"})
	require.NoError(t, err)
	kind, err = attempts.DivergenceKind(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.DivergenceReversal, kind)
	require.Equal(t, true, e.get("/v1/merchants/m1/charges/"+c["id"].(string), e.m1).json(t)["needs_attention"])

	_, err = e.pool.Exec(e.ctx, `UPDATE attempts SET divergence_kind = 'dispute' WHERE id = $1`, a.ID)
	require.Error(t, err, "the kind is evidence: never changed")

	// A succeeded attempt's divergence is a reversal or a dispute, never
	// paid_after_failure, and no other kind exists; none without a kind.
	r = e.post("/v1/merchants/m1/charges", e.m1, "kind-ch-2", card)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	b := e.execute(r.json(t)["attempt_id"].(string))
	require.Equal(t, attempts.StatusSucceeded, b.Status)
	for _, k := range []string{"paid_after_failure", "refund"} {
		_, err = e.pool.Exec(e.ctx, `UPDATE attempts SET diverged_at = now(), divergence = 'x', divergence_kind = $2
			WHERE id = $1`, b.ID, k)
		require.Error(t, err, k)
	}
	_, err = e.pool.Exec(e.ctx, `UPDATE attempts SET divergence_kind = 'dispute' WHERE id = $1`, b.ID)
	require.Error(t, err, "a kind without a divergence")

	_, err = e.att.SettleDivergence(e.ctx, a.ID, "op-kind", "charge reversed; merchant debited by adjustment a-9", attempts.HoldBook)
	require.NoError(t, err)
	require.Equal(t, false, e.get("/v1/merchants/m1/charges/"+c["id"].(string), e.m1).json(t)["needs_attention"])
}
