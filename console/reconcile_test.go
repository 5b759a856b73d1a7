package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/reconcile"
)

// Reconciliation runs and their divergences: a payout left unknown after a
// hang-after-commit is found on the provider's statement and settled by
// the run; the console lists the run and the divergence, links it to the
// attempt, and lets an operator (not an auditor) resolve an open one.
func TestReconcilePages(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	_, a := e.stuckPayout("12.00")
	day := reconcile.Day(e.clock.Now())
	e.clock.Advance(day.Add(27 * time.Hour).Sub(e.clock.Now())) // the day closed, past the settle margin
	run, err := e.e.Reconcile.Run(e.ctx, "sim", day, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, e.attemptStatus(a), "settled by the statement")

	auditor := e.client()
	token := auditor.signIn(e.secret["auditor"])
	res, body := auditor.get("/console/reconcile?status=")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "succeeded")
	require.Contains(t, body, run.Provider)
	require.Contains(t, body, string(reconcile.KindResolved))
	require.Contains(t, body, "/console/attempts/"+a.ID.String())
	m := regexp.MustCompile(`href="/console/reconcile/divergences/(dv_[0-9a-f]+)"`).FindStringSubmatch(body)
	require.NotNil(t, m)
	res, body = auditor.get("/console/reconcile/divergences/" + m[1])
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NotContains(t, body, `id="resolve-divergence"`)
	res, _ = auditor.post("/console/reconcile/divergences/"+m[1]+"/resolve", url.Values{"csrf": {token}, "reason": {"x"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	res, _ = auditor.get("/console/reconcile?kind=nonsense")
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	res, _ = auditor.get("/console/reconcile/divergences/dv_nosuch")
	require.Equal(t, http.StatusNotFound, res.StatusCode)

	d, err := reconcile.Get(e.ctx, e.pool, m[1])
	require.NoError(t, err)
	op := e.client()
	token = op.signIn(e.secret["operator"])
	res, body = op.get("/console/reconcile/divergences/" + m[1])
	require.Equal(t, http.StatusOK, res.StatusCode)
	if d.Open() {
		require.Contains(t, body, `id="resolve-divergence"`)
		res, _ = op.post("/console/reconcile/divergences/"+m[1]+"/resolve", url.Values{"csrf": {token}, "reason": {""}})
		require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
		res, _ = op.post("/console/reconcile/divergences/"+m[1]+"/resolve", url.Values{"csrf": {token}, "reason": {"checked with the PSP"}})
		require.Equal(t, http.StatusSeeOther, res.StatusCode)
		d, err = reconcile.Get(e.ctx, e.pool, m[1])
		require.NoError(t, err)
		require.False(t, d.Open())
		require.Equal(t, e.keyID["operator"], d.ResolvedBy)
	} else {
		require.NotContains(t, body, `id="resolve-divergence"`, "a resolved divergence has no form")
	}
	m2 := e.client()
	m2.signIn(e.secret["m2"])
	res, _ = m2.get("/console/reconcile")
	require.Equal(t, http.StatusForbidden, res.StatusCode)
}
