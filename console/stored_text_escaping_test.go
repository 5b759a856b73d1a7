package console_test

// Merchant- and provider-controlled text is escaped on every console page,
// and every answer carries the security headers.

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/reconcile"
)

// xssPayload is merchant- or provider-controlled text that would run script
// if a page rendered it unescaped.
const xssPayload = `"'><script>alert(1)</script><img src=x onerror=alert(1)><a href="javascript:alert(1)">`

// unescapedMarkers appear only when the payload reached the page unescaped.
var unescapedMarkers = []string{"<script>alert", "<img src=x", `href="javascript:`}

// Text a merchant or a provider controls (payout description and metadata,
// a provider report's code, reason, provider id, actor and evidence, a
// funding's reason and actor, a reconciliation run's trigger, query
// parameters) is escaped on every console page, for every role, and every
// answer carries Content-Security-Policy, X-Frame-Options and
// X-Content-Type-Options.
func TestMerchantAndProviderTextIsEscapedOnEveryPage(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true, unknownAfter: time.Minute})

	// A payout whose description and metadata are the merchant's text.
	p1, err := e.e.Payouts.CreatePayout(e.ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: money.MustParse("1.00", "BRL"), Destination: pixDestination(), Description: xssPayload,
		Metadata: map[string]string{"k<script>alert(1)</script>": xssPayload}})
	require.NoError(t, err)

	// A stuck payout failed by a provider report whose code, reason,
	// provider id, actor and evidence carry the payload.
	p2, a2 := e.stuckPayout("2.00")
	ev, _ := json.Marshal(map[string]string{"line": xssPayload})
	_, err = e.e.Attempts.ResolveByReference(e.ctx, attempts.ResolveInput{Reference: a2.Reference, Provider: a2.Provider,
		Operation: providers.OpPixTransfer, Amount: "2.00", Currency: "BRL", State: providers.StateFailed,
		ProviderID: "pid" + xssPayload, FailureCode: "c" + xssPayload, FailureReason: xssPayload,
		Source: attempts.SourceWebhook, Actor: "evt" + xssPayload, Reason: xssPayload, Evidence: ev})
	require.NoError(t, err)

	// A diverged payout (the provider paid after failed).
	p3, a3 := e.divergedPayout("3.00")

	// A funding whose reason is the ledger transaction's description.
	_, err = merchants.Fund(e.ctx, e.pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("5.00", "BRL"),
		Key: "xss", Reason: xssPayload, Actor: "actor" + xssPayload})
	require.NoError(t, err)

	// A reconciliation run over the day.
	day := reconcile.Day(e.clock.Now())
	e.clock.Advance(day.Add(27 * time.Hour).Sub(e.clock.Now()))
	_, err = e.e.Reconcile.Run(e.ctx, "sim", day, reconcile.RunOptions{TriggeredBy: "test" + xssPayload})
	require.NoError(t, err)

	pages := []string{"/console/", "/console/review", "/console/attempts/" + a2.ID.String(), "/console/attempts/" + a3.ID.String(),
		"/console/merchants", "/console/merchants/m1", "/console/merchants/m1/payouts/" + p1.ID,
		"/console/merchants/m1/payouts/" + p2.ID, "/console/merchants/m1/payouts/" + p3.ID,
		"/console/ledger", "/console/ledger?prefix=" + url.QueryEscape(xssPayload),
		"/console/ledger/account?code=" + url.QueryEscape("merchant/m1/available/BRL") + "&at=" + url.QueryEscape(xssPayload),
		"/console/audit", "/console/charts", "/console/providers", "/console/reconcile?status=",
		"/console/reconcile?provider=" + url.QueryEscape(xssPayload), "/console/login?next=" + url.QueryEscape("/console/"+xssPayload)}
	var txPages []string
	for i := int64(1); i <= 20; i++ {
		txPages = append(txPages, "/console/ledger/transactions/"+strconv.FormatInt(i, 10))
	}
	dvRe := regexp.MustCompile(`/console/reconcile/divergences/(dv_[0-9a-f]+)`)
	for _, role := range []string{"admin", "auditor", "operator", "m1"} {
		c := e.client()
		c.signIn(e.secret[role])
		_, rb := c.get("/console/reconcile?status=")
		all := append(append([]string{}, pages...), txPages...)
		for _, m := range dvRe.FindAllStringSubmatch(rb, -1) {
			all = append(all, m[0])
		}
		for _, path := range all {
			res, body := c.get(path)
			require.Less(t, res.StatusCode, 500, "%s as %s", path, role)
			for _, h := range []string{"Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options"} {
				require.NotEmpty(t, res.Header.Get(h), "%s as %s: %s", path, role, h)
			}
			for _, raw := range unescapedMarkers {
				require.NotContains(t, body, raw, "%s as %s: payload unescaped", path, role)
			}
		}
	}
	settleAllDivergences(t, e)
}

// settleAllDivergences settles every divergence so the helper's closing
// audit passes.
func settleAllDivergences(t *testing.T, e *env) {
	t.Helper()
	rows, err := e.pool.Query(e.ctx, `SELECT id FROM attempts WHERE diverged_at IS NOT NULL AND divergence_settled_at IS NULL`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	for _, id := range ids {
		_, err := e.e.Attempts.SettleDivergence(e.ctx, id, "test", "booked by the test", attempts.HoldBook)
		require.NoError(t, err)
	}
	ds, _, err := reconcile.List(e.ctx, e.pool, reconcile.Filter{Status: "open"}, "", 500)
	require.NoError(t, err)
	for _, d := range ds {
		_, _, err := reconcile.Resolve(e.ctx, e.pool, d.ID, "test", "test", e.clock.Now())
		require.NoError(t, err)
	}
}

// Only an operator posts an operator's form: an auditor, an admin or a
// merchant posting one by hand (with a valid CSRF token) is refused with 403
// and nothing changes (settle a divergence, resolve an attempt). TestRoles
// covers the auditor's resolve; this covers every non-operator role.
func TestNonOperatorsCannotPostOperatorForms(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	_, a := e.divergedPayout("3.00")
	for _, role := range []string{"auditor", "admin", "m1"} {
		c := e.client()
		token := c.signIn(e.secret[role])
		for _, path := range []string{"/console/attempts/" + a.ID.String() + "/settle-divergence",
			"/console/attempts/" + a.ID.String() + "/resolve"} {
			res, _ := c.post(path, url.Values{"csrf": {token}, "reason": {"booked"}, "status": {"succeeded"}})
			require.Equal(t, http.StatusForbidden, res.StatusCode, "%s as %s", path, role)
		}
	}
	got, err := e.e.Attempts.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Nil(t, got.DivergenceSettledAt, "nobody but an operator settles")
	require.Equal(t, attempts.StatusFailed, got.Status)
	settleAllDivergences(t, e)
}
