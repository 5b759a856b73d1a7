package console_test

// The console's operator actions on divergences, and what the pages tell
// an operator before a decision.

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// divergedPayout: a Pix transfer of m1 whose call the sim refused
// (unavailable), resolved failed by the resolver's "not found" past the
// window (the reserve went back), then reported paid by a signed webhook: a
// divergence, flagged for review (as api's failThenReportPaid).
func (e *env) divergedPayout(amount string) (payouts.Payout, attempts.Attempt) {
	e.t.Helper()
	p, err := e.e.Payouts.CreatePayout(e.ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: money.MustParse(amount, "BRL"), Destination: pixDestination()})
	require.NoError(e.t, err)
	a, err := e.e.Attempts.Get(e.ctx, e.pool, *p.CurrentAttemptID)
	require.NoError(e.t, err)
	require.NoError(e.t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: a.Reference}))
	r, err := e.e.Attempts.Execute(e.ctx, a.ID)
	require.NoError(e.t, err)
	require.Equal(e.t, attempts.StatusUnknown, r.Attempt.Status)
	e.clock.Advance(time.Hour)
	rr, err := e.e.Attempts.Resolve(e.ctx, a.ID)
	require.NoError(e.t, err)
	require.Equal(e.t, attempts.StatusFailed, rr.Attempt.Status)
	_, err = e.e.Attempts.ResolveByReference(e.ctx, attempts.ResolveInput{Reference: a.Reference, Provider: a.Provider,
		Operation: providers.OpPixTransfer, Amount: amount, Currency: "BRL", State: providers.StateSucceeded,
		ProviderID: "late_" + a.Reference, Source: attempts.SourceWebhook, Actor: "evt_late_" + a.Reference})
	require.NoError(e.t, err)
	a, err = e.e.Attempts.Get(e.ctx, e.pool, a.ID)
	require.NoError(e.t, err)
	require.NotNil(e.t, a.DivergedAt, "the late success is a divergence")
	return p, a
}

// factsOf is the attempt page's facts list (not the timeline).
func factsOf(t *testing.T, body string) string {
	t.Helper()
	_, rest, ok := strings.Cut(body, `<dl class="facts">`)
	require.True(t, ok, "no facts on the page")
	facts, _, _ := strings.Cut(rest, "</dl>")
	return facts
}

// Once an operator has settled an attempt's divergence, the attempt page
// says so, as the API's attempt does (divergence_settled_at, _by,
// divergence_settlement): who, when, why, and no longer in red, so the
// next operator can tell that the money is booked.
func TestSettledDivergenceShownAsSettled_R19(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	_, a := e.divergedPayout("10.00")
	op := e.client()
	op.signIn(e.secret["operator"])

	res, body := op.get("/console/review")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, a.Reference, "the divergence waits in the review queue")

	_, err := e.e.Attempts.SettleDivergence(e.ctx, a.ID, e.keyID["operator"], "booked the 10.00 by a funding adjustment", attempts.HoldBook)
	require.NoError(t, err)
	_, body = op.get("/console/review")
	require.NotContains(t, body, a.Reference, "a settled divergence leaves the queue")

	res, body = op.get("/console/attempts/" + a.ID.String())
	require.Equal(t, http.StatusOK, res.StatusCode)
	facts := factsOf(t, body)
	require.Contains(t, facts, "booked the 10.00 by a funding adjustment",
		"the facts must show the settlement (as the API's divergence_settlement); they show:\n%s", facts)
	require.Contains(t, facts, e.keyID["operator"], "and who settled it (divergence_settled_by)")
}

// The review queue lists a diverged attempt and the console is where
// operators work that queue: its attempt page offers an operator the
// settlement form (as the API's divergence-settlement), attributed to the
// operator; a second submit is refused (409), an auditor may not (403).
func TestOperatorSettlesADivergenceFromTheConsole_R19(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	_, a := e.divergedPayout("10.00")
	t.Cleanup(func() { // the audit after the test wants it settled
		_, _ = e.e.Attempts.SettleDivergence(e.ctx, a.ID, "cleanup", "test cleanup", attempts.HoldBook)
	})
	op := e.client()
	token := op.signIn(e.secret["operator"])
	res, body := op.get("/console/review")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "divergence: ")
	res, body = op.get("/console/attempts/" + a.ID.String())
	require.Equal(t, http.StatusOK, res.StatusCode)
	forms := regexp.MustCompile(`<form [^>]*action="/console/attempts/`+a.ID.String()+`/[^"]*"`).FindAllString(body, -1)
	require.NotEmpty(t, forms, "an operator looking at an unsettled divergence from the review queue has no action on the attempt page")

	// Settled from the console, attributed to the operator; a second
	// submit is refused, never recorded twice; an auditor cannot.
	aud := e.client()
	audToken := aud.signIn(e.secret["auditor"])
	res, _ = aud.post("/console/attempts/"+a.ID.String()+"/settle-divergence",
		url.Values{"csrf": {audToken}, "reason": {"auditors do not settle"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	path := "/console/attempts/" + a.ID.String() + "/settle-divergence"
	res, body = op.post(path, url.Values{"csrf": {token}, "reason": {"  "}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, errorOf(body))
	// The divergence holds the merchant's 10.00: no decision is refused
	// with the amount named, and nothing changes (R19, R22).
	res, body = op.post(path, url.Values{"csrf": {token}, "reason": {"booked: ticket PSP-1"}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, errorOf(body))
	require.Contains(t, errorOf(body), "10.00 BRL")
	res, _ = op.post(path, url.Values{"csrf": {token}, "reason": {"booked: the money left twice, ticket PSP-1"}, "hold": {"book"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	got, err := e.e.Attempts.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.NotNil(t, got.DivergenceSettledAt)
	require.Equal(t, e.keyID["operator"], got.DivergenceSettledBy)
	res, body = op.post(path, url.Values{"csrf": {token}, "reason": {"again"}})
	require.Equal(t, http.StatusConflict, res.StatusCode, errorOf(body))
	_, body = op.get("/console/attempts/" + a.ID.String())
	require.Contains(t, body, `id="divergence-settled"`)
	require.NotContains(t, body, `id="settle"`)
}

// A Pix charge that expired and was then reported paid (a late payment:
// the payer's money arrived, the merchant was not credited) is an unsettled
// divergence in the review queue: the charge page says it needs attention,
// as the payout page does, not plain "expired".
func TestDivergedChargeNotShownAsPlainExpired_R19(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	c, err := e.e.Charges.Create(e.ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindPix,
		Amount: money.MustParse("20.00", "BRL"), PixExpiresIn: 10 * time.Minute})
	require.NoError(t, err)
	_, err = e.e.Attempts.Execute(e.ctx, *c.AttemptID)
	require.NoError(t, err)
	for range 100 {
		res, err := e.e.Charges.Poll(e.ctx, c.ID)
		require.NoError(t, err)
		if res.Charge.Status == charges.StatusExpired {
			c = res.Charge
			break
		}
		require.Greater(t, res.RetryIn, time.Duration(0), "status %s", res.Charge.Status)
		e.clock.Advance(res.RetryIn)
	}
	require.Equal(t, charges.StatusExpired, c.Status)
	handled, err := e.e.Charges.HandleProviderEvent(e.ctx, e.prov.Name(), providers.WebhookEvent{ID: "evt_late_paid",
		Type: "pix_charge.succeeded", Operation: providers.OpPixCharge, Reference: c.Reference, ProviderID: "E2E-late",
		State: providers.StateSucceeded, Amount: "20.00", Currency: "BRL"})
	require.NoError(t, err)
	require.True(t, handled)
	a, err := e.e.Attempts.Get(e.ctx, e.pool, *c.AttemptID)
	require.NoError(t, err)
	require.NotNil(t, a.DivergedAt, "the late payment is a divergence")
	t.Cleanup(func() {
		_, _ = e.e.Attempts.SettleDivergence(e.ctx, a.ID, "cleanup", "test cleanup", attempts.HoldBook)
	})

	aud := e.client()
	aud.signIn(e.secret["auditor"])
	res, body := aud.get("/console/merchants/m1/charges/" + c.ID)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "expired")
	_, main, _ := strings.Cut(body, "<main>")
	require.Regexp(t, `(?i)diverg|review|attention`, main,
		"an expired charge whose payment arrived late (unsettled divergence) is shown as plain expired")
}

// A manual "failed" from the console, once the core's gates let it through
// (a lookup past the window came back not found), is attributed to the
// operator's key id with the reason and the evidence stored on the
// transition event; a double submit of the same form changes nothing more
// ("unchanged", one transition, the reserve released once); a later
// "succeeded" is refused (R9).
func TestResolveFailedDoubleSubmitAttributedOnce_R18(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	_, a := e.stuckPayout("10.00")
	e.prov.lost.Store(true)
	e.clock.Advance(time.Minute)
	c := e.client()
	token := c.signIn(e.secret["operator"])
	path := "/console/attempts/" + a.ID.String() + "/resolve"
	form := url.Values{"csrf": {token}, "status": {"failed"}, "reason": {"PSP ticket says never arrived"},
		"evidence": {`{"ticket":"PSP-77"}`}}
	res, body := c.post(path, form)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, errorOf(body))
	require.Contains(t, res.Header.Get("Location"), "done=transitioned")
	res, body = c.post(path, form)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, errorOf(body))
	require.Contains(t, res.Header.Get("Location"), "done=unchanged")
	res, body = c.post(path, url.Values{"csrf": {token}, "status": {"succeeded"}, "reason": {"changed my mind"}})
	require.Equal(t, http.StatusConflict, res.StatusCode, errorOf(body))

	evs, err := e.e.Attempts.Events(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	var toFailed []attempts.Event
	for _, ev := range evs {
		if ev.Type == attempts.EventTransition && ev.ToStatus == attempts.StatusFailed {
			toFailed = append(toFailed, ev)
		}
	}
	require.Len(t, toFailed, 1, "one transition for two submits")
	require.Equal(t, attempts.ActorOperator, toFailed[0].Actor)
	require.Equal(t, e.keyID["operator"], toFailed[0].ActorID, "attributed to the operator's key")
	require.Equal(t, "PSP ticket says never arrived", toFailed[0].Reason)
	require.JSONEq(t, `{"ticket":"PSP-77"}`, string(toFailed[0].Evidence), "evidence stored")
	b, err := ledger.MerchantBalanceIn(e.ctx, e.pool, "m1", money.MustParse("1", "BRL").Currency())
	require.NoError(t, err)
	require.Equal(t, "100.00", b.Available.StringFixed(2), "released once")
	require.Equal(t, "0.00", b.Reserved.StringFixed(2))
}

// The divergence resolve form promises "up to 2000 characters", the column
// allows 2000 characters, and reconcile.Resolve (and the API) count
// characters, not bytes: a 1500-character accented reason (3000 bytes) is
// accepted.
func TestDivergenceReasonCountsCharacters(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	now := e.clock.Now()
	_, err := e.pool.Exec(e.ctx, `INSERT INTO reconcile_runs (id, provider, day, status, triggered_by, started_at, finished_at)
		VALUES ('rr_00000000000000000000000000000001', 'sim', $1, 'succeeded', 'test', $2, $2)`, now, now)
	require.NoError(t, err)
	_, err = e.pool.Exec(e.ctx, `INSERT INTO reconcile_divergences (id, provider, day, kind, severity, fingerprint, detail,
		status, first_run_id, last_run_id, created_at, last_seen_at)
		VALUES ('dv_00000000000000000000000000000001', 'sim', $1, 'stale_open', 'medium', 'fp', 'a line we do not know',
		'open', 'rr_00000000000000000000000000000001', 'rr_00000000000000000000000000000001', $2, $2)`, now, now)
	require.NoError(t, err)
	op := e.client()
	token := op.signIn(e.secret["operator"])
	reason := strings.Repeat("ã", 1500) // 1500 characters, 3000 bytes
	res, body := op.post("/console/reconcile/divergences/dv_00000000000000000000000000000001/resolve",
		url.Values{"csrf": {token}, "reason": {reason}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "a 1500-character reason is refused: %s", errorOf(body))
}
