package reconcile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/reconcile"
)

// R19: a statement line in a state saldo does not know (every adapter maps
// its provider's statuses to succeeded, processing or failed; anything
// else is an adapter's or a provider's surprise) may say money moved: it
// is an unreadable_line (critical), never a line quietly taken as "did not
// move". The day's other lines are reconciled. Before, any state but
// succeeded counted as nothing moved, and the run reported nothing.
func TestLineInAnUnknownStateIsUnreadable_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.paid("12.00")
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: "ref_unknown_state", ID: "op_odd",
		Operation: providers.OpPixTransfer, Amount: "30.00", Currency: "BRL", State: providers.State("settled_partially"),
		At: day.Add(15 * time.Hour)}))
	e.clock.Set(day.Add(51 * time.Hour))
	e.run()
	got := byKind(e.all())
	require.Len(t, got[reconcile.KindUnreadableLine], 1, "a state saldo does not know is not 'nothing moved'")
	require.Contains(t, got[reconcile.KindUnreadableLine][0].Detail, "state")
	require.Empty(t, got[reconcile.KindLedgerTotals], "the day's readable lines agree with the ledger")
}
