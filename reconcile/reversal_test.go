package reconcile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/reconcile"
)

// R9, R19: a statement that lists a succeeded payout's operation failed (a
// payout the bank returned) is missing_at_provider, and the attempts core
// records it on the attempt as a divergence (a reversal): in review, the
// audit failing, the status and the ledger as they were, until an operator
// books the return and settles it.
func TestStatementListingASucceededOperationFailedIsAReversal_R9_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.paid("12.00")
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieHide, Reference: a.Reference}))
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: a.Reference, ID: a.ProviderID,
		Operation: providers.OpPixTransfer, Amount: "12.00", Currency: "BRL", State: providers.StateFailed,
		At: day.Add(15 * time.Hour)}))
	e.clock.Set(day.Add(51 * time.Hour))
	e.run()

	got := byKind(e.all())
	require.Len(t, got[reconcile.KindMissingAtProvider], 1)
	ra, err := e.att.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, ra.Status, "finals never change (R9)")
	require.NotNil(t, ra.DivergedAt, "the reversal is recorded on the attempt")
	require.True(t, ra.Review)
	require.Equal(t, 1, e.settles(a), "nothing moves automatically")
	res, err := audit.Run(e.ctx, e.pool)
	require.NoError(t, err)
	require.False(t, res.OK(), res.Summary())

	_, err = e.att.SettleDivergence(e.ctx, a.ID, "op-rc", "returned by the bank; merchant re-credited by funding f-9", attempts.HoldBook)
	require.NoError(t, err)
	res, err = audit.Run(e.ctx, e.pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}
