package payouts_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers/sim"
)

// R6, R9: a payout failed by "not found" (no retry policy); the provider
// then reports that attempt paid (divergence, needs_attention). The
// merchant's POST .../retry is refused (ErrNotRetryable): a new attempt with
// a new key and reserve would pay the recipient twice and debit the
// merchant again (it did).
func TestRetryRefusedForDivergedPayout_R6_R9(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	p, err := e.svc.CreatePayout(e.ctx, e.pix("10.00"))
	require.NoError(t, err)
	first := e.attempt(p)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: first.Reference}))
	require.Equal(t, attempts.StatusUnknown, e.execute(p).Status)
	require.Equal(t, attempts.StatusFailed, e.resolveAfter(p, time.Hour).Attempt.Status)
	require.Equal(t, payouts.StatusFailed, e.get(p).Status)

	e.lateSuccess(first, "10.00")
	require.True(t, e.get(p).NeedsAttention)
	t.Cleanup(func() { e.settleDivergence(first) })

	np, err := e.svc.Retry(e.ctx, merchant, p.ID)
	if err == nil {
		second := e.execute(np)
		t.Errorf("Retry of a payout whose failed attempt the provider reports paid opened attempt %s (%s, %d provider operation(s)): "+
			"the recipient is paid twice", second.ID, second.Status, e.opsFor(second))
		return
	}
	require.True(t, errors.Is(err, payouts.ErrNotRetryable), "got %v", err)
}
