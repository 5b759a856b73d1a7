package reconcile_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/reconcile"
)

// R19, issue 16: a statement that lies in every way (an operation hidden,
// one duplicated, an amount changed, operations added that we never sent
// or that we resolved failed), an unknown the statement resolves and an
// attempt unknown for two days: each kind is found, with both sides, and
// stored once across re-runs; the critical ones alert and fail the audit.
func TestEachKindFoundOnceAcrossRuns_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	honest := e.paid("10.00")
	hidden := e.paid("11.00")
	dup := e.paid("12.00")
	changed := e.paid("13.00")
	_, unknown := e.withFault("14.00", sim.FaultErrorAfter)
	require.Equal(t, attempts.StatusUnknown, unknown.Status)
	_, failed := e.withFault("15.00", sim.FaultUnavailable)
	_, stale := e.withFault("16.00", sim.FaultUnavailable)
	require.Equal(t, attempts.StatusUnknown, stale.Status)
	e.clock.Advance(time.Hour)
	rr, err := e.att.Resolve(e.ctx, failed.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusFailed, rr.Attempt.Status, "not found past the window (R16)")

	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieHide, Reference: hidden.Reference}))
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieDuplicate, Reference: dup.Reference}))
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAmount, Reference: changed.Reference, Amount: "130.00"}))
	never := strings.Repeat("ab", 16)
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: never,
		Operation: providers.OpPixTransfer, Amount: "9.99", Currency: "BRL", At: day.Add(13 * time.Hour)}))
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: failed.Reference, ID: "op_paid_late",
		Operation: providers.OpPixTransfer, Amount: "15.00", Currency: "BRL", At: day.Add(14 * time.Hour)}))
	// A line saldo cannot read (PostgreSQL stores no NUL): reported on its
	// own, in no total.
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: "bad\x00ref", ID: "op_unreadable",
		Operation: providers.OpPixTransfer, Amount: "3.00", Currency: "BRL", At: day.Add(15 * time.Hour)}))

	// Too early: the day has not closed plus the margin.
	_, err = e.rec.Run(e.ctx, e.prov.Name(), day, reconcile.RunOptions{TriggeredBy: "test"})
	require.ErrorIs(t, err, reconcile.ErrDayNotClosed)

	// Two days later: the day and the next have closed.
	e.clock.Set(day.Add(51 * time.Hour))
	first := e.run()
	require.Equal(t, 8, first.StatementLines) // 10, 12, 12 dup, 130, 14, 9.99, 15 added, 3 unreadable; 11 hidden; the 503s never ran
	require.Equal(t, 1, first.Resolved)
	require.Equal(t, 9, first.NewDivergences)
	require.Zero(t, first.Deferred)

	ds := e.all()
	got := byKind(ds)
	for _, k := range reconcile.Kinds {
		require.Len(t, got[k], 1, "kind %s: %v", k, got)
	}
	require.Len(t, ds, 9)

	// An unknown payout resolved by reconciliation: settled once, recorded
	// as reconciliation's doing, the divergence stored resolved.
	ua, err := e.att.Get(e.ctx, e.pool, unknown.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, ua.Status)
	require.Equal(t, string(attempts.ActorReconciliation), ua.ResolvedBy)
	require.Equal(t, 1, e.settles(ua))
	res := got[reconcile.KindResolved][0]
	require.Equal(t, "resolved", res.Status)
	require.Equal(t, "reconciliation", res.ResolvedBy)
	require.Equal(t, unknown.ID, *res.AttemptID)
	evs, err := e.att.Events(e.ctx, e.pool, unknown.ID)
	require.NoError(t, err)
	last := evs[len(evs)-1]
	require.Equal(t, attempts.ActorReconciliation, last.Actor)
	require.Equal(t, first.ID, last.ActorID)
	require.Contains(t, last.Reason, "statement of 2026-12-02")

	// Each kind with both sides.
	side := func(raw json.RawMessage) map[string]any {
		var m map[string]any
		require.NoError(t, json.Unmarshal(raw, &m))
		return m
	}
	pbf := got[reconcile.KindPaidButFailed][0]
	require.Equal(t, reconcile.SeverityCritical, pbf.Severity)
	require.Equal(t, failed.Reference, pbf.Reference)
	require.Equal(t, "failed", side(pbf.OurSide)["status"])
	require.Equal(t, "op_paid_late", side(pbf.ProviderSide)["lines"].([]any)[0].(map[string]any)["provider_id"])
	fa, err := e.att.Get(e.ctx, e.pool, failed.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusFailed, fa.Status, "never an automatic ledger move (R9)")
	require.NotNil(t, fa.DivergedAt, "the attempts core keeps the divergence and the review queue lists it")
	require.Zero(t, e.settles(fa))

	unk := got[reconcile.KindUnknownToUs][0]
	require.Equal(t, never, unk.Reference)
	require.Nil(t, unk.AttemptID)
	require.Equal(t, "9.99", side(unk.ProviderSide)["lines"].([]any)[0].(map[string]any)["amount"])

	dp := got[reconcile.KindDoublePayment][0]
	require.Equal(t, dup.Reference, dp.Reference)
	require.Len(t, side(dp.ProviderSide)["lines"], 2)
	require.Equal(t, "12", side(dp.OurSide)["amount"])

	mis := got[reconcile.KindMissingAtProvider][0]
	require.Equal(t, hidden.ID, *mis.AttemptID)
	require.Equal(t, reconcile.SeverityHigh, mis.Severity)

	am := got[reconcile.KindAmountMismatch][0]
	require.Equal(t, changed.Reference, am.Reference)
	require.Contains(t, am.Detail, `amount "130.00"`)
	require.Equal(t, "13", side(am.OurSide)["amount"])

	st := got[reconcile.KindStaleOpen][0]
	require.Equal(t, stale.ID, *st.AttemptID)
	require.Equal(t, reconcile.SeverityMedium, st.Severity)

	lt := got[reconcile.KindLedgerTotals][0]
	require.Equal(t, "BRL", lt.Currency)
	// statement: 10 + 12 + 12 + 130 + 14 + 9.99 + 15; ledger: 10 + 11 (missing) + 12 + 13 + 14 settled.
	require.Equal(t, "202.99", side(lt.ProviderSide)["amount"])
	require.Equal(t, "60", side(lt.OurSide)["amount"])
	require.Equal(t, []reconcile.Totals{{Currency: "BRL", Direction: "out", Statement: "202.99", Ledger: "60", Lines: 7}}, first.Totals)

	ur := got[reconcile.KindUnreadableLine][0]
	require.Equal(t, reconcile.SeverityCritical, ur.Severity)
	require.Empty(t, ur.Reference, "a reference PostgreSQL cannot store is only quoted")
	require.Equal(t, "op_unreadable", ur.ProviderID)
	require.Contains(t, ur.Detail, `reference "bad\x00ref"`)
	require.Equal(t, `"bad\x00ref"`, side(ur.ProviderSide)["line"].(map[string]any)["reference"])

	require.Len(t, e.alerts, 4, "paid_but_failed, unknown_to_us, double_payment, unreadable_line alert")
	_ = honest

	// Re-run: nothing new, nothing twice; the reserve was settled once.
	second := e.run()
	require.Zero(t, second.NewDivergences)
	require.Zero(t, second.Resolved)
	again := e.all()
	require.Len(t, again, 9)
	for _, d := range again {
		if d.Kind != reconcile.KindResolved {
			require.Equal(t, 2, d.SeenCount, d.Kind)
			require.Equal(t, second.ID, d.LastRunID)
			require.Equal(t, first.ID, d.FirstRunID)
		}
	}
	require.Equal(t, 1, e.settles(ua))
	require.Len(t, e.alerts, 4)

	// Operators resolve; a resolved divergence stays resolved on re-runs.
	d, changedNow, err := reconcile.Resolve(e.ctx, e.pool, dp.ID, "key_operator", "refund asked to the PSP, ticket 42", e.clock.Now())
	require.NoError(t, err)
	require.True(t, changedNow)
	require.Equal(t, "key_operator", d.ResolvedBy)
	_, changedNow, err = reconcile.Resolve(e.ctx, e.pool, dp.ID, "key_other", "again", e.clock.Now())
	require.NoError(t, err)
	require.False(t, changedNow)
	_, _, err = reconcile.Resolve(e.ctx, e.pool, dp.ID, "key_other", " ", e.clock.Now())
	require.ErrorIs(t, err, reconcile.ErrInvalid)
	_, _, err = reconcile.Resolve(e.ctx, e.pool, "dv_nope", "key_other", "x", e.clock.Now())
	require.ErrorIs(t, err, reconcile.ErrNotFound)
	e.run()
	d, err = reconcile.Get(e.ctx, e.pool, dp.ID)
	require.NoError(t, err)
	require.Equal(t, "resolved", d.Status)
	require.Equal(t, "key_operator", d.ResolvedBy)
	require.Equal(t, "refund asked to the PSP, ticket 42", d.ResolutionReason)
	require.Len(t, e.all(), 9)

	// The database refuses to reopen or rewrite a resolved divergence.
	_, err = e.pool.Exec(e.ctx, `UPDATE reconcile_divergences SET status = 'open', resolved_at = NULL,
		resolved_by = NULL, resolution_reason = NULL WHERE id = $1`, dp.ID)
	require.Error(t, err)

	// The age report closes itself once the attempt is final.
	_, err = e.att.ResolveManually(e.ctx, stale.ID, attempts.StatusFailed, "key_operator", "never reached the PSP", nil)
	require.NoError(t, err)
	e.run()
	d, err = reconcile.Get(e.ctx, e.pool, st.ID)
	require.NoError(t, err)
	require.Equal(t, "resolved", d.Status)
	require.Equal(t, "reconciliation", d.ResolvedBy)
}

// R19: the filters and keyset pages of List cover every divergence once,
// newest first; Stream gives the same in the same order.
func TestListFiltersAndPages_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for i := range 7 {
		ref := strings.Repeat(string(rune('a'+i)), 32)
		require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: ref,
			Operation: providers.OpPixTransfer, Amount: "1.00", Currency: "BRL", At: day.Add(time.Duration(i) * time.Minute)}))
	}
	e.clock.Set(day.Add(51 * time.Hour))
	e.run()
	var seen []string
	cursor := ""
	for {
		page, next, err := reconcile.List(e.ctx, e.pool, reconcile.Filter{Kind: reconcile.KindUnknownToUs}, cursor, 3)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page), 3)
		for _, d := range page {
			seen = append(seen, d.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	require.Len(t, seen, 7)
	var streamed []string
	require.NoError(t, reconcile.Stream(e.ctx, e.pool, reconcile.Filter{Kind: reconcile.KindUnknownToUs},
		func(d reconcile.Divergence) error { streamed = append(streamed, d.ID); return nil }))
	require.Equal(t, seen, streamed)

	dd := day
	for f, n := range map[*reconcile.Filter]int{
		{Provider: "sim"}: 8, {Provider: "other"}: 0, {Day: &dd}: 8, {Status: "open"}: 8, {Status: "resolved"}: 0,
		{Kind: reconcile.KindLedgerTotals}: 1, {Severity: reconcile.SeverityCritical}: 7,
	} {
		page, _, err := reconcile.List(e.ctx, e.pool, *f, "", 100)
		require.NoError(t, err)
		require.Len(t, page, n, "%+v", *f)
	}
	_, _, err := reconcile.List(e.ctx, e.pool, reconcile.Filter{Kind: "nope"}, "", 10)
	require.ErrorIs(t, err, reconcile.ErrInvalid)
	_, _, err = reconcile.List(e.ctx, e.pool, reconcile.Filter{}, "zz", 10)
	require.ErrorIs(t, err, reconcile.ErrInvalid)
	stop := errors.New("stop")
	require.ErrorIs(t, reconcile.Stream(e.ctx, e.pool, reconcile.Filter{}, func(reconcile.Divergence) error { return stop }), stop)
}

// R19, R22: an unknown payout the statement resolves is settled exactly
// once, however many runs (and a concurrent run) see it; the audit is clean.
func TestUnknownPayoutSettledOnceByReconciliation_R19_R22(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p, a := e.withFault("25.00", sim.FaultHangAfter)
	require.Equal(t, attempts.StatusUnknown, a.Status)
	e.clock.Set(day.Add(51 * time.Hour))
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := e.rec.Run(e.ctx, e.prov.Name(), day, reconcile.RunOptions{TriggeredBy: "test"})
			errs <- err
		}()
	}
	for range 3 {
		require.NoError(t, <-errs)
	}
	e.run()
	got, err := e.att.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, got.Status)
	require.Equal(t, 1, e.settles(got))
	// The statement line is the transition's evidence.
	evs, err := e.att.Events(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	var evidence string
	for _, ev := range evs {
		if ev.Type == attempts.EventTransition && ev.ToStatus == attempts.StatusSucceeded {
			evidence = string(ev.Evidence)
		}
	}
	require.Contains(t, evidence, `"statement_line"`)
	require.Contains(t, evidence, a.Reference)
	v, err := e.po.Get(e.ctx, merchant, p.ID)
	require.NoError(t, err)
	require.Equal(t, "succeeded", string(v.Status))
	b, err := ledger.MerchantBalanceIn(e.ctx, e.pool, merchant, money.MustParse("1", "BRL").Currency())
	require.NoError(t, err)
	require.Equal(t, "975.00", b.Available.StringFixed(2))
	require.Equal(t, "0.00", b.Reserved.StringFixed(2))
	ds := e.all()
	require.Len(t, ds, 1)
	require.Equal(t, reconcile.KindResolved, ds[0].Kind)
	res, err := audit.Run(e.ctx, e.pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

// R19: an honest statement gives no divergence, equal totals, and a run
// whose next day has not closed defers the missing-at-provider judgement.
func TestHonestStatementIsClean_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.paid("10.00")
	e.paid("20.50")
	e.clock.Set(day.Add(27 * time.Hour)) // the day closed, the next not yet
	r := e.run()
	require.Equal(t, 2, r.StatementLines)
	require.Equal(t, 2, r.Matched)
	require.Equal(t, 2, r.Deferred)
	require.Zero(t, r.Divergences)
	require.Equal(t, []reconcile.Totals{{Currency: "BRL", Direction: "out", Statement: "30.5", Ledger: "30.5", Lines: 2}}, r.Totals)
	e.clock.Set(day.Add(51 * time.Hour))
	r = e.run()
	require.Zero(t, r.Deferred)
	require.Zero(t, r.Divergences)
	require.Empty(t, e.all())
	stored, err := reconcile.GetRun(e.ctx, e.pool, r.ID)
	require.NoError(t, err)
	require.Equal(t, "succeeded", stored.Status)
	require.Equal(t, 2, stored.Matched)
	require.NotNil(t, stored.FinishedAt)
	require.Equal(t, r.Totals, stored.Totals)
	res, err := audit.Run(e.ctx, e.pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

// A statement the provider cannot serve fails the run, which is stored
// failed with the error.
func TestStatementUnavailableFailsTheRun_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.clock.Set(day.Add(51 * time.Hour))
	e.srv.Close()
	r, err := e.rec.Run(e.ctx, e.prov.Name(), day, reconcile.RunOptions{TriggeredBy: "test"})
	require.ErrorIs(t, err, sim.ErrStatement)
	stored, gerr := reconcile.GetRun(e.ctx, e.pool, r.ID)
	require.NoError(t, gerr)
	require.Equal(t, "failed", stored.Status)
	require.Contains(t, stored.Error, "statement")
	_, err = e.rec.Run(e.ctx, "nobody", day, reconcile.RunOptions{})
	require.ErrorIs(t, err, reconcile.ErrUnknownProvider)
}

func TestDayToReconcile(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time { v, _ := time.Parse(time.RFC3339, s); return v }
	require.Equal(t, day, reconcile.DayToReconcile(at("2026-12-03T02:00:00Z"), 2*time.Hour))
	require.Equal(t, day.AddDate(0, 0, -1), reconcile.DayToReconcile(at("2026-12-03T01:59:00Z"), 2*time.Hour))
	require.Equal(t, day, reconcile.DayToReconcile(at("2026-12-04T02:00:00Z"), 26*time.Hour))
}
