package payouts_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// R6, R9, R21: a refund of 60.00 on a 100.00 charge is resolved failed by
// "not found" and the provider then reports it paid (a divergence: the payer
// got the 60.00 back). Its Retry is refused, and what is still refundable
// counts it: a new full refund is the 40.00 left, one cent more is refused.
func TestNewRefundCountsADivergedRefund_R21_R6(t *testing.T) {
	t.Parallel()
	e, c := refundEnv(t)
	r, err := e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, Amount: brl("60.00")})
	require.NoError(t, err)
	first := e.attempt(r)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: first.Reference}))
	require.Equal(t, attempts.StatusUnknown, e.execute(r).Status)
	require.Equal(t, attempts.StatusFailed, e.resolveAfter(r, time.Hour).Attempt.Status)
	require.Equal(t, payouts.StatusFailed, e.get(r).Status)

	// The provider's webhook: that refund was paid after all.
	_, err = e.att.ResolveByReference(e.ctx, attempts.ResolveInput{Reference: first.Reference, Provider: first.Provider,
		Operation: providers.OpRefund, Amount: "60.00", Currency: "BRL", State: providers.StateSucceeded,
		ProviderID: "late_refund_1", Source: attempts.SourceWebhook, Actor: "evt_late_refund"})
	require.NoError(t, err)
	got, err := e.att.Get(e.ctx, e.pool, first.ID)
	require.NoError(t, err)
	require.NotNil(t, got.DivergedAt, "saldo knows the failed refund was paid")
	t.Cleanup(func() { e.settleDivergence(first) })

	// Retry is refused (money left)...
	_, err = e.svc.Retry(e.ctx, merchant, r.ID)
	require.ErrorIs(t, err, payouts.ErrNotRetryable)

	// ...but a new full refund of the same charge is accepted for the whole
	// charged amount.
	again, err := e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, ClientKey: "after-divergence"})
	require.NoError(t, err)
	require.Equal(t, "40.00", again.Amount.Decimal().StringFixed(2),
		"a full refund after a refund of 60.00 the provider reports paid is what is left of the 100.00 charge (R21, R6)")
	_, err = e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, ClientKey: "one-cent-more",
		Amount: brl("0.01")})
	require.ErrorIs(t, err, payouts.ErrRefundExceedsCharge)
}
