package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

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
