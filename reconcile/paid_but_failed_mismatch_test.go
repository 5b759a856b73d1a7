package reconcile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/reconcile"
)

// Money the provider moved under an attempt saldo resolved failed (its
// reserve released) is a critical paid_but_failed divergence, recorded on
// the attempt (diverged_at), which fails the audit and refuses a Retry
// (R6, R19, R22), also when the statement line names another amount than
// the payout's: the amount_mismatch it is as well does not hide it.
func TestPaidButFailedWithAnotherAmountIsStillCritical_R19_R22(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p, failed := e.withFault("15.00", sim.FaultUnavailable)
	e.clock.Advance(time.Hour)
	rr, err := e.att.Resolve(e.ctx, failed.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusFailed, rr.Attempt.Status, "not found past the window (R16): reserve released")

	// The provider's statement shows money left under that reference
	// (a different amount: say the provider's own fee added, or a bug).
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: failed.Reference, ID: "op_paid_late",
		Operation: providers.OpPixTransfer, Amount: "15.50", Currency: "BRL", At: day.Add(14 * time.Hour)}))
	e.clock.Set(day.Add(51 * time.Hour))
	e.run()

	got := byKind(e.all())
	t.Logf("divergences: %v", func() map[reconcile.Kind]int {
		m := map[reconcile.Kind]int{}
		for k, v := range got {
			m[k] = len(v)
		}
		return m
	}())
	fa, err := e.att.Get(e.ctx, e.pool, failed.ID)
	require.NoError(t, err)
	res, err := audit.Run(e.ctx, e.pool)
	require.NoError(t, err)
	t.Logf("audit: %s", res.Summary())

	assert.Len(t, got[reconcile.KindPaidButFailed], 1,
		"money moved under a failed (released) attempt must be a critical paid_but_failed divergence")
	assert.Len(t, got[reconcile.KindAmountMismatch], 1, "the other amount is reported too")
	assert.NotNil(t, fa.DivergedAt, "the attempts core must record the divergence (review queue, Retry refused)")
	assert.False(t, res.OK(), "audit verify must not say OK while money left under a released reserve")
	_, err = e.po.Retry(e.ctx, merchant, p.ID)
	assert.ErrorIs(t, err, payouts.ErrNotRetryable, "a new attempt would pay the recipient twice (R6)")
}
