package reconcile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/reconcile"
)

// R19, R22: a payout resolved failed (its reserve released) that the
// provider's statement shows paid is a paid_but_failed divergence, and the
// day's outgoing totals differ (the ledger settled nothing for it). Its
// divergence held the amount; the operator confirms the money left and
// books the hold (held -> the provider's clearing account). The ledger now
// shows the money gone under that attempt, so a re-run of the day finds
// the totals equal and closes ledger_totals. Before, the totals counted
// only payout_settle: the booked money never counted, and ledger_totals
// stayed open for a day whose books were right.
func TestBookedHoldCountsInTheDaysTotals_R19_R22(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, failed := e.withFault("15.00", sim.FaultUnavailable)
	e.clock.Advance(time.Hour)
	rr, err := e.att.Resolve(e.ctx, failed.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusFailed, rr.Attempt.Status, "not found past the window (R16): reserve released")
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: failed.Reference, ID: "op_paid_late",
		Operation: providers.OpPixTransfer, Amount: "15.00", Currency: "BRL", At: day.Add(14 * time.Hour)}))
	e.clock.Set(day.Add(51 * time.Hour))
	e.run()
	got := byKind(e.all())
	require.Len(t, got[reconcile.KindPaidButFailed], 1)
	require.Len(t, got[reconcile.KindLedgerTotals], 1)
	require.True(t, got[reconcile.KindLedgerTotals][0].Open())

	_, err = e.att.SettleDivergence(e.ctx, failed.ID, "op_1", "the PSP confirms 15.00 left: booked", attempts.HoldBook)
	require.NoError(t, err)
	e.run()
	got = byKind(e.all())
	require.Len(t, got[reconcile.KindLedgerTotals], 1)
	require.False(t, got[reconcile.KindLedgerTotals][0].Open(), "the booked hold is the day's paid money: the totals agree")
}
