package reconcile_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/reconcile"
)

// R19 (unknown_to_us, stored once per provider operation): an orphan
// payment (a reference no attempt has) is resolved by an operator; days
// later the provider moves money again under the same foreign reference
// (another operation, another id, another day). It must be a new, open,
// alerting divergence. Found by the reviewer: the fingerprint was
// "ref:<reference>" alone, so the run only bumped seen_count of the
// resolved row, raised no alert, and saldo audit verify passed.
func TestSecondOrphanUnderSameReferenceIsReported_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	foreign := strings.Repeat("cd", 16)
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: foreign, ID: "op_orphan_1",
		Operation: providers.OpPixTransfer, Amount: "5.00", Currency: "BRL", At: day.Add(12 * time.Hour)}))
	e.clock.Set(day.Add(51 * time.Hour))
	e.run()
	first := byKind(e.all())[reconcile.KindUnknownToUs]
	require.Len(t, first, 1)
	require.Len(t, e.alerts, 1)
	_, _, err := reconcile.Resolve(e.ctx, e.pool, first[0].ID, "key_operator", "PSP refunded op_orphan_1, ticket 7", e.clock.Now())
	require.NoError(t, err)

	// Three days later, another operation under the same foreign reference.
	later := day.AddDate(0, 0, 3)
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: foreign, ID: "op_orphan_2",
		Operation: providers.OpPixTransfer, Amount: "700.00", Currency: "BRL", At: later.Add(12 * time.Hour)}))
	e.clock.Set(later.Add(51 * time.Hour))
	r, err := e.rec.Run(e.ctx, e.prov.Name(), later, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(t, err)
	t.Logf("run of %s: lines %d, divergences seen %d, new %d, alerts %d", later.Format(time.DateOnly), r.StatementLines,
		r.Divergences, r.NewDivergences, len(e.alerts))
	for _, d := range e.all() {
		t.Logf("after the second run: %s %s %s seen %d: %.120s", d.Kind, d.Status, d.Severity, d.SeenCount, d.Detail)
	}
	v, err := reconcile.Verify(e.ctx, e.pool)
	require.NoError(t, err)
	var open []reconcile.Divergence
	require.NoError(t, reconcile.Stream(e.ctx, e.pool, reconcile.Filter{Kind: reconcile.KindUnknownToUs, Status: "open"},
		func(d reconcile.Divergence) error { open = append(open, d); return nil }))
	require.NotEmpty(t, open, "op_orphan_2 (700.00 BRL, never sent by saldo) must be an open unknown_to_us divergence")
	require.NotEmpty(t, v, "saldo audit verify must fail while op_orphan_2 is unexplained")
	require.Len(t, e.alerts, 2, "the second orphan payment must alert")
}

// anonStatement adds lines to a provider's statement (lines without a
// reference or a provider id, which the sim cannot produce).
type anonStatement struct {
	providers.Provider
	extra map[time.Time][]providers.StatementEntry
}

func (p anonStatement) Statement(ctx context.Context, d time.Time) ([]providers.StatementEntry, error) {
	ls, err := p.Provider.Statement(ctx, d)
	return append(ls, p.extra[reconcile.Day(d)]...), err
}

// R19 (unknown_to_us): lines with neither reference nor provider id are
// each their own operation (their day and a hash of the line, and the
// occurrence among identical lines): two of them the same day are two
// divergences, and one on a later day is new even when the earlier ones
// were resolved. Before, they all shared the fingerprint "id:".
func TestAnonymousLinesAreEachReported_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	later := day.AddDate(0, 0, 3)
	anon := func(amount string, at time.Time) providers.StatementEntry {
		return providers.StatementEntry{Operation: providers.OpPixTransfer, State: providers.StateSucceeded,
			Amount: amount, Currency: "BRL", At: at}
	}
	prov := anonStatement{Provider: e.prov, extra: map[time.Time][]providers.StatementEntry{
		day:   {anon("5.00", day.Add(12*time.Hour)), anon("7.00", day.Add(13*time.Hour)), anon("7.00", day.Add(13*time.Hour))},
		later: {anon("5.00", later.Add(12*time.Hour))},
	}}
	rec, err := reconcile.New(reconcile.Config{Pool: e.pool, Attempts: e.att,
		Providers: map[string]providers.Provider{e.prov.Name(): prov}, Clock: e.clock})
	require.NoError(t, err)
	e.clock.Set(day.Add(51 * time.Hour))
	_, err = rec.Run(e.ctx, e.prov.Name(), day, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(t, err)
	first := byKind(e.all())[reconcile.KindUnknownToUs]
	require.Len(t, first, 3, "three operations moved money, none of them known")
	for _, d := range first {
		_, _, err := reconcile.Resolve(e.ctx, e.pool, d.ID, "key_operator", "booked", e.clock.Now())
		require.NoError(t, err)
	}
	r, err := rec.Run(e.ctx, e.prov.Name(), day, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(t, err)
	require.Zero(t, r.NewDivergences, "a re-run stores nothing twice")

	e.clock.Set(later.Add(51 * time.Hour))
	_, err = rec.Run(e.ctx, e.prov.Name(), later, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(t, err)
	var open []reconcile.Divergence
	require.NoError(t, reconcile.Stream(e.ctx, e.pool, reconcile.Filter{Kind: reconcile.KindUnknownToUs, Status: "open"},
		func(d reconcile.Divergence) error { open = append(open, d); return nil }))
	require.Len(t, open, 1, "the later day's 5.00 is another operation")
}
