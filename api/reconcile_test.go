package api_test

import (
	"context"
	"encoding/csv"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/reconcile"
)

// reconcileEnv is setup's world without the after-test audit: the test
// plants divergences the audit reports for ever (a provider success for a
// failed attempt stays attempts/diverged).
func reconcileEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, ctx: ctx, pool: testdb.New(t), clock: sim.NewManualClock(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)), router: openAPIRouter(t),
		logs: &syncBuffer{}}
	e.srv = sim.NewServer(sim.Config{Clock: e.clock.Now}).Start()
	t.Cleanup(e.srv.Close)
	e.prov = e.srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 500 * time.Millisecond}))
	byName := map[string]providers.Provider{"sim": e.prov}
	var err error
	e.att, err = attempts.New(attempts.Config{Pool: e.pool, Clock: e.clock, Providers: byName})
	require.NoError(t, err)
	e.charges, err = charges.New(charges.Config{Pool: e.pool, Attempts: e.att, Provider: "sim", Clock: e.clock})
	require.NoError(t, err)
	e.pay, err = payouts.New(payouts.Config{Pool: e.pool, Attempts: e.att, Provider: "sim", Clock: e.clock, Charges: e.charges})
	require.NoError(t, err)
	_, err = merchants.Create(ctx, e.pool, "m1", "Loja m1")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, e.pool, merchants.Funding{MerchantID: "m1", Amount: brl("1000.00"), Key: "initial", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	key := func(role api.Role, merchant string) (string, string) {
		k, secret, err := api.CreateKey(ctx, e.pool, role, merchant, string(role), e.clock.Now())
		require.NoError(t, err)
		return k.ID, secret
	}
	_, e.admin = key(api.RoleAdmin, "")
	_, e.auditor = key(api.RoleAuditor, "")
	e.operatorID, e.operator = key(api.RoleOperator, "")
	_, e.m1 = key(api.RoleMerchant, "m1")
	e.api, err = api.New(api.Config{Pool: e.pool, Payouts: e.pay, Attempts: e.att, Charges: e.charges,
		Logger: slog.New(slog.NewJSONHandler(e.logs, nil)), Providers: byName, Clock: e.clock})
	require.NoError(t, err)
	e.http = httptest.NewServer(e.api)
	t.Cleanup(e.http.Close)
	return e
}

// Issue 16 (R19): every kind of divergence a lying statement (and an
// unknown, a failed and a stale attempt) causes is listed once across
// re-runs (operators and auditors; filters by provider, day, kind, status;
// keyset pages), exported as CSV in the list's order, and resolved by an
// operator with a reason that records the operator's key id; a resolved
// divergence stays resolved across re-runs.
func TestReconcileDivergencesAPI_R19(t *testing.T) {
	t.Parallel()
	e := reconcileEnv(t)
	rec, err := reconcile.New(reconcile.Config{Pool: e.pool, Attempts: e.att,
		Providers: map[string]providers.Provider{"sim": e.prov}, Clock: e.clock})
	require.NoError(t, err)
	day := reconcile.Day(e.clock.Now())
	pays := map[string]attempts.Attempt{}
	for _, amount := range []string{"10.00", "11.00", "12.00", "13.00", "14.00", "15.00", "16.00"} {
		p := e.createPix(amount, "idem-"+amount)
		a := e.attemptOf(p)
		switch amount {
		case "14.00": // processed, answered 500: unknown, resolved by the statement
			require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultErrorAfter, Reference: a.Reference}))
		case "15.00", "16.00": // never processed: unknown (then failed, or stale)
			require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: a.Reference}))
		}
		res, err := e.att.Execute(e.ctx, a.ID)
		require.NoError(t, err)
		pays[amount] = res.Attempt
	}
	e.clock.Advance(time.Hour)
	rr, err := e.att.Resolve(e.ctx, pays["15.00"].ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusFailed, rr.Attempt.Status)
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieHide, Reference: pays["11.00"].Reference}))
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieDuplicate, Reference: pays["12.00"].Reference}))
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAmount, Reference: pays["13.00"].Reference, Amount: "1.30"}))
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: strings.Repeat("cd", 16),
		Operation: providers.OpPixTransfer, Amount: "5.00", Currency: "BRL", At: e.clock.Now()}))
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: pays["15.00"].Reference,
		Operation: providers.OpPixTransfer, Amount: "15.00", Currency: "BRL", At: e.clock.Now()}))
	// A line saldo cannot read: a currency it does not know (unreadable_line).
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: strings.Repeat("ef", 16),
		Operation: providers.OpPixTransfer, Amount: "7.00", Currency: "ZZZ", At: e.clock.Now()}))
	e.clock.Set(day.Add(51 * time.Hour))
	for range 2 { // a re-run stores nothing twice
		e.clock.Advance(time.Minute) // runs are ordered by when they started
		_, err = rec.Run(e.ctx, "sim", day, reconcile.RunOptions{TriggeredBy: "test"})
		require.NoError(t, err)
	}

	list := func(query, key string) []map[string]any {
		t.Helper()
		var out []map[string]any
		cursor := ""
		for {
			q := query + "&limit=2"
			if cursor != "" {
				q += "&cursor=" + url.QueryEscape(cursor)
			}
			r := e.get("/v1/reconcile/divergences?"+q, key)
			require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			m := r.json(t)
			for _, d := range m["data"].([]any) {
				out = append(out, d.(map[string]any))
			}
			next, _ := m["next_cursor"].(string)
			if next == "" {
				return out
			}
			cursor = next
		}
	}
	all := list("provider=sim&day="+day.Format(time.DateOnly), e.auditor)
	kinds := map[string]map[string]any{}
	for _, d := range all {
		require.NotContains(t, kinds, d["kind"], "stored once")
		kinds[d["kind"].(string)] = d
	}
	require.Len(t, all, 9)
	for _, k := range reconcile.Kinds {
		require.Contains(t, kinds, string(k))
		if k != reconcile.KindResolved {
			require.Equal(t, float64(2), kinds[string(k)]["seen_count"], k)
		}
	}
	require.Equal(t, "resolved", kinds["resolved_by_reconciliation"]["status"])
	require.Equal(t, "reconciliation", kinds["resolved_by_reconciliation"]["resolved_by"])
	require.Equal(t, pays["14.00"].ID.String(), kinds["resolved_by_reconciliation"]["attempt_id"])
	require.Equal(t, pays["15.00"].Reference, kinds["paid_but_failed"]["reference"])
	require.Equal(t, "failed", kinds["paid_but_failed"]["our_side"].(map[string]any)["status"])
	require.Equal(t, pays["16.00"].ID.String(), kinds["stale_open"]["attempt_id"])
	require.Equal(t, pays["11.00"].ID.String(), kinds["missing_at_provider"]["attempt_id"])
	require.Equal(t, "critical", kinds["double_payment"]["severity"])
	require.Len(t, kinds["double_payment"]["provider_side"].(map[string]any)["lines"], 2)
	require.Equal(t, pays["12.00"].Reference, kinds["double_payment"]["our_side"].(map[string]any)["reference"])
	require.Equal(t, "1.30", kinds["amount_mismatch"]["provider_side"].(map[string]any)["lines"].([]any)[0].(map[string]any)["amount"])

	require.Len(t, list("kind=unknown_to_us", e.operator), 1)
	require.Len(t, list("status=open", e.admin), 8)
	require.Len(t, list("severity=critical", e.admin), 4)
	require.Empty(t, list("provider=other", e.auditor))
	require.Empty(t, list("day=2020-01-01", e.auditor))
	require.Equal(t, "validation_failed", e.get("/v1/reconcile/divergences?kind=nope", e.auditor).code(t))
	require.Equal(t, "validation_failed", e.get("/v1/reconcile/divergences?day=yesterday", e.auditor).code(t))
	require.Equal(t, "validation_failed", e.get("/v1/reconcile/divergences?cursor=zz", e.auditor).code(t))
	require.Equal(t, http.StatusForbidden, e.get("/v1/reconcile/divergences", e.m1).Status)
	require.Equal(t, http.StatusUnauthorized, e.get("/v1/reconcile/divergences", "").Status)

	one := e.get("/v1/reconcile/divergences/"+kinds["double_payment"]["id"].(string), e.operator)
	require.Equal(t, http.StatusOK, one.Status)
	require.Equal(t, kinds["double_payment"]["id"], one.json(t)["id"])
	require.Equal(t, "not_found", e.get("/v1/reconcile/divergences/dv_nope", e.operator).code(t))

	// CSV, in the list's order.
	r := e.get("/v1/reconcile/divergences.csv?provider=sim", e.auditor)
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, "text/csv; charset=utf-8", r.Header.Get("Content-Type"))
	rows, err := csv.NewReader(strings.NewReader(string(r.Body))).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 10)
	require.Equal(t, "id", rows[0][0])
	for i, d := range all {
		require.Equal(t, d["id"], rows[i+1][0])
		require.Equal(t, d["kind"], rows[i+1][3])
	}
	r = e.get("/v1/reconcile/divergences.csv?kind=double_payment", e.operator)
	rows, err = csv.NewReader(strings.NewReader(string(r.Body))).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, http.StatusForbidden, e.get("/v1/reconcile/divergences.csv", e.m1).Status)

	// Operators resolve, with a reason; auditors cannot.
	path := "/v1/reconcile/divergences/" + kinds["double_payment"]["id"].(string) + "/resolution"
	require.Equal(t, http.StatusForbidden, e.post(path, e.auditor, "", map[string]any{"reason": "x"}).Status)
	require.Equal(t, "validation_failed", e.post(path, e.operator, "", map[string]any{"reason": ""}).code(t))
	require.Equal(t, "validation_failed", e.post(path, e.operator, "", map[string]any{"reason": "   "}).code(t))
	res := e.post(path, e.operator, "res-1", map[string]any{"reason": "PSP reversed the copy, ticket 9"})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	m := res.json(t)
	require.Equal(t, true, m["transitioned"])
	dv := m["divergence"].(map[string]any)
	require.Equal(t, "resolved", dv["status"])
	require.Equal(t, e.operatorID, dv["resolved_by"])
	require.Equal(t, "PSP reversed the copy, ticket 9", dv["resolution_reason"])
	again := e.post(path, e.operator, "res-2", map[string]any{"reason": "again"})
	require.Equal(t, http.StatusOK, again.Status)
	require.Equal(t, false, again.json(t)["transitioned"])
	require.Equal(t, "not_found", e.post("/v1/reconcile/divergences/dv_nope/resolution", e.operator, "",
		map[string]any{"reason": "x"}).code(t))

	e.clock.Advance(time.Minute)
	_, err = rec.Run(e.ctx, "sim", day, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(t, err)
	after := e.get("/v1/reconcile/divergences/"+kinds["double_payment"]["id"].(string), e.auditor).json(t)
	require.Equal(t, "resolved", after["status"])
	require.Equal(t, e.operatorID, after["resolved_by"])
	require.Len(t, list("status=resolved", e.auditor), 2)

	// The runs, newest first, with their counts and the ledger side.
	runs := e.get("/v1/reconcile/runs?provider=sim&day="+day.Format(time.DateOnly)+"&limit=2", e.auditor)
	require.Equal(t, http.StatusOK, runs.Status, string(runs.Body))
	rm := runs.json(t)
	data := rm["data"].([]any)
	require.Len(t, data, 2)
	require.NotEmpty(t, rm["next_cursor"])
	newest := data[0].(map[string]any)
	require.Equal(t, "succeeded", newest["status"])
	require.Equal(t, float64(0), newest["new_divergences"])
	tot := newest["totals"].([]any)[0].(map[string]any)
	require.Equal(t, "out", tot["direction"])
	require.NotEqual(t, tot["statement"], tot["ledger"])
	older := e.get("/v1/reconcile/runs?provider=sim&limit=2&cursor="+url.QueryEscape(rm["next_cursor"].(string)), e.operator).json(t)
	require.Len(t, older["data"], 1)
	require.Equal(t, float64(9), older["data"].([]any)[0].(map[string]any)["new_divergences"], "the first run found them all")
	one = e.get("/v1/reconcile/runs/"+newest["id"].(string), e.admin)
	require.Equal(t, http.StatusOK, one.Status)
	require.Equal(t, newest["id"], one.json(t)["id"])
	require.Equal(t, "not_found", e.get("/v1/reconcile/runs/rr_nope", e.auditor).code(t))
	require.Equal(t, "validation_failed", e.get("/v1/reconcile/runs?day=x", e.auditor).code(t))
	require.Equal(t, "validation_failed", e.get("/v1/reconcile/runs?cursor=zz", e.auditor).code(t))
	require.Equal(t, http.StatusForbidden, e.get("/v1/reconcile/runs", e.m1).Status)
	require.Empty(t, e.get("/v1/reconcile/runs?provider=other", e.auditor).json(t)["data"])
}
