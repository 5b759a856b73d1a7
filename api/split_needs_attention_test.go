package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers/sim"
)

// R9, R19, R24: GET .../splits/{id}, the documented way to poll a split
// (R24), says which legs need a human: the split JSON carries
// needs_attention and legs_needing_attention, as the payout view does
// (TestDivergedFailedPayoutNeedsAttention_R9_R19). A split of two legs: leg
// 0's attempt is resolved failed by "not found" past the window, then the
// provider's webhook says it was paid (a divergence); leg 1 succeeds. The
// split names leg 0 as needing attention. Before, the split view showed leg
// 0 only as "failed", and a merchant retrying or re-paying that recipient
// paid twice (found by review).
func TestSplitViewSaysWhichLegsNeedAttention_R19_R24(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	dest := pixBody("1")["destination"]
	r := e.post("/v1/merchants/m1/splits", e.m1, "rs-div-1", map[string]any{"currency": "BRL", "legs": []any{
		map[string]any{"operation": "pix_transfer", "amount": "10.00", "destination": dest},
		map[string]any{"operation": "pix_transfer", "amount": "20.00", "destination": dest}}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	sp := r.json(t)
	legs := sp["legs"].([]any)
	leg0, leg1 := legs[0].(map[string]any), legs[1].(map[string]any)

	a0 := e.attemptOf(leg0)
	e.failThenReportPaid(t, a0, "10.00", "late_leg_0")
	t.Cleanup(func() {
		_, err := e.att.SettleDivergence(e.ctx, a0.ID, e.operatorID, "test cleanup", attempts.HoldBook)
		require.NoError(t, err)
	})
	res, err := e.att.Execute(e.ctx, e.attemptOf(leg1).ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, res.Attempt.Status)

	pv := e.get("/v1/merchants/m1/payouts/"+leg0["id"].(string), e.m1).json(t)
	require.Equal(t, "failed", pv["status"])
	require.Equal(t, true, pv["needs_attention"], "the payout view flags the diverged leg")

	got := e.get("/v1/merchants/m1/splits/"+sp["id"].(string), e.m1)
	require.Equal(t, http.StatusOK, got.Status, string(got.Body))
	j := got.json(t)
	gl0 := j["legs"].([]any)[0].(map[string]any)
	t.Logf("split status %q, leg 0 status %q", j["status"], gl0["status"])
	require.Equal(t, true, j["needs_attention"], "the split says a leg needs a human: %s", got.Body)
	require.Equal(t, []any{leg0["id"]}, j["legs_needing_attention"])
}
