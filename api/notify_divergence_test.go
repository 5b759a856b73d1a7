package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// A merchant told "payout.failed" hears again when the provider later
// reports the payout paid (a divergence): a payout.diverged event, recorded
// in the divergence's transaction; otherwise it would re-send the money
// itself (pay twice) on the strength of saldo's word.
func TestDivergenceAfterFailedTellsTheMerchant_R24(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	r := e.post("/v1/merchants/m1/notification-endpoints", e.m1, "", map[string]any{"url": "http://127.0.0.1:9/hook"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))

	p := e.createPix("10.00", "rv-div-1")
	a := e.attemptOf(p)
	e.failThenReportPaid(t, a, "10.00", "op_late_rv")

	got, err := e.att.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusFailed, got.Status)
	require.NotNil(t, got.DivergedAt, "the provider's late success is a divergence")
	// Settled (after the assertions) so the audit after the test is clean.
	t.Cleanup(func() {
		_, err := e.att.SettleDivergence(e.ctx, a.ID, "op-rv", "review test", attempts.HoldBook)
		require.NoError(t, err)
	})

	rows, err := e.pool.Query(e.ctx, `SELECT type FROM notification_events WHERE object_id = $1 ORDER BY created_at, id`, p["id"])
	require.NoError(t, err)
	var types []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		types = append(types, s)
	}
	require.NoError(t, rows.Err())
	t.Logf("events for %s: %v", p["id"], types)
	require.ElementsMatch(t, []string{"payout.failed", "payout.diverged"}, types,
		"told failed, then told the provider paid after all")
}

func (e *env) eventTypes(objectID any) []string {
	e.t.Helper()
	rows, err := e.pool.Query(e.ctx, `SELECT type FROM notification_events WHERE object_id = $1 ORDER BY created_at, id`, objectID)
	require.NoError(e.t, err)
	var types []string
	for rows.Next() {
		var s string
		require.NoError(e.t, rows.Scan(&s))
		types = append(types, s)
	}
	require.NoError(e.t, rows.Err())
	return types
}

// The retry policy's variant: attempt 1 is failed by "not found" and the
// policy opens attempt 2 (no event). The provider then reports attempt 1
// paid (divergence; attempt 2 is held in review, so the recipient is paid
// exactly once), and the merchant gets payout.diverged before the operator
// fails the held attempt 2 and the payout ends failed: "payout.failed" is
// never the only word it has.
func TestRetriedPayoutPaidByItsFirstAttemptIsAnnouncedDiverged_R24(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	pay, err := payouts.New(payouts.Config{Pool: e.pool, Attempts: e.att, Provider: "sim", Clock: e.clock,
		Charges: e.charges, OnFinal: e.notif.PayoutFinal, OnDiverged: e.notif.PayoutDiverged,
		Retry: payouts.RetryPolicy{MaxAttempts: 3, Within: 24 * time.Hour, Backoff: 30 * time.Second}})
	require.NoError(t, err) // registers itself as the attempts' owner: the retry policy applies
	e.pay = pay
	r := e.post("/v1/merchants/m1/notification-endpoints", e.m1, "", map[string]any{"url": "http://127.0.0.1:9/hook"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))

	p := e.createPix("10.00", "rv-retry-1")
	first := e.attemptOf(p)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: first.Reference}))
	res, err := e.att.Execute(e.ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, res.Attempt.Status)
	e.clock.Advance(time.Hour)
	rr, err := e.att.Resolve(e.ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusFailed, rr.Attempt.Status)
	second := e.attemptOf(p)
	require.NotEqual(t, first.ID, second.ID, "the retry policy opened attempt 2")
	require.Empty(t, e.eventTypes(p["id"]), "no event while the payout goes on")

	// The provider says attempt 1 paid after all.
	_, err = e.att.ResolveByReference(e.ctx, attempts.ResolveInput{Reference: first.Reference, Provider: first.Provider,
		Operation: providers.OpPixTransfer, Amount: "10.00", Currency: "BRL", State: providers.StateSucceeded,
		ProviderID: "op_rv_late", Source: attempts.SourceWebhook, Actor: "evt_rv_late"})
	require.NoError(t, err)
	_, err = e.att.SettleDivergence(e.ctx, first.ID, "op-rv", "recipient paid by attempt 1", attempts.HoldBook)
	require.NoError(t, err)
	// Attempt 2 is held in review; the operator fails it (it was never sent).
	_, err = e.att.ResolveManually(e.ctx, second.ID, attempts.StatusFailed, "op-rv",
		"attempt 1 paid the recipient (divergence settled)", nil)
	require.NoError(t, err)

	v, err := e.pay.Get(e.ctx, "m1", p["id"].(string))
	require.NoError(t, err)
	require.Empty(t, e.srv.Operations(second.Reference), "attempt 2 was never sent: attempt 1 is the payment")
	types := e.eventTypes(p["id"])
	t.Logf("payout status %s; events for %s: %v", v.Status, p["id"], types)
	require.ElementsMatch(t, []string{"payout.diverged", "payout.failed"}, types,
		"the recipient was paid by attempt 1: the merchant hears it, not only that the payout ended failed")
}

// A notification URL whose scheme is written in capitals ("HTTPS://...") is
// a URL like any other (RFC 3986 schemes are case-insensitive): stored
// lowercased as the table's CHECK expects, never a 500.
func TestNotificationURLWithUppercaseSchemeIsNot5xx(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	for _, u := range []string{"HTTPS://93.184.216.34/hook", "Http://127.0.0.1:9/hook"} {
		r := e.post("/v1/merchants/m1/notification-endpoints", e.m1, "", map[string]any{"url": u})
		t.Logf("%s -> %d %s", u, r.Status, r.Body)
		require.Less(t, r.Status, 500, "a merchant's URL with a capitalised scheme answers %d", r.Status)
	}
}
