package reconcile_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/reconcile"
)

// R19: an operation listed twice with the same provider id (a page of the
// statement repeated) is one operation for the totals too, as for the
// matching: no ledger_totals for money that moved once.
func TestRepeatedLineCountsOnceInTheTotals_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.paid("10.00")
	require.NotEmpty(t, a.ProviderID)
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieDuplicate, Reference: a.Reference, ID: a.ProviderID}))
	e.clock.Set(day.Add(51 * time.Hour))
	r := e.run()
	require.Equal(t, 2, r.StatementLines)
	require.Equal(t, []reconcile.Totals{{Currency: "BRL", Direction: "out", Statement: "10", Ledger: "10", Lines: 1}}, r.Totals)
	require.Empty(t, e.all(), "one operation listed twice is neither a double payment nor a difference in the totals")
}

// R19: a statement line whose currency is not an ISO currency saldo knows
// is refused on its own (unreadable_line, critical, the currency only
// quoted), kept out of the matching and of the totals; the day's other
// lines are reconciled.
func TestLineWithUnknownCurrencyIsUnreadable_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.paid("10.00")
	const evil = `=HYPERLINK("http://evil.example/","x")`
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: a.Reference, ID: "op_other",
		Operation: providers.OpPixTransfer, Amount: "10.00", Currency: evil, At: day.Add(13 * time.Hour)}))
	e.clock.Set(day.Add(51 * time.Hour))
	r := e.run()
	require.Equal(t, 2, r.StatementLines)
	require.Equal(t, 1, r.Matched)
	require.Equal(t, []reconcile.Totals{{Currency: "BRL", Direction: "out", Statement: "10", Ledger: "10", Lines: 1}}, r.Totals)
	ds := e.all()
	require.Len(t, ds, 1)
	d := ds[0]
	require.Equal(t, reconcile.KindUnreadableLine, d.Kind)
	require.Equal(t, reconcile.SeverityCritical, d.Severity)
	require.Empty(t, d.Currency, "never stored as a currency")
	require.Equal(t, a.Reference, d.Reference)
	require.Equal(t, "op_other", d.ProviderID)
	require.Contains(t, d.Detail, "its currency is not one saldo knows")
	require.Len(t, e.alerts, 1)

	// A re-run finds the same line: the same row.
	again := e.run()
	require.Zero(t, again.NewDivergences)
	require.Len(t, e.all(), 1)
}

// R19: a divergence's detail longer than its column is cut on a character
// boundary: never half a multi-byte character, which PostgreSQL refuses
// (the whole run failed). Three references shifted by a byte: whatever the
// length of the text before them, two would be cut inside a "€".
func TestLongDetailIsCutOnACharacter_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for i, prefix := range []string{"", "a", "aa"} {
		require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: prefix + strings.Repeat("€", 700),
			ID: fmt.Sprintf("op_euro_%d", i), Operation: providers.OpPixTransfer, Amount: "1.00", Currency: "BRL",
			At: day.Add(13 * time.Hour)}))
	}
	e.clock.Set(day.Add(51 * time.Hour))
	e.run()
	ds := byKind(e.all())[reconcile.KindUnknownToUs]
	require.Len(t, ds, 3)
	for _, d := range ds {
		require.True(t, utf8.ValidString(d.Detail))
		require.LessOrEqual(t, len(d.Detail), 2000)
	}
}
