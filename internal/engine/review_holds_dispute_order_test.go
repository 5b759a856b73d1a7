package engine_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers/stripe/stripefake"
)

// REVIEW (holds): the chargeback's events arrive before
// payment_intent.succeeded (TestDisputeReportedBeforeTheSuccessIsADivergence):
// the dispute divergence is recorded in the success's transaction, after
// the credit. The credit's net must be held in that transaction (the hold
// is built after the credit in one Deferred), the audit clean while it is
// open and after the settlement.
func TestReviewHolds_DisputeBeforeSuccessHoldsTheCredit_R9_R17_R22(t *testing.T) {
	t.Parallel()
	w := newDisputeAPI(t)
	ch, err := w.e.Charges.Create(w.ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindCard,
		Amount: money.MustParse("100.00", "BRL"), CardToken: stripefake.PMProcessing, Description: "Pedido 9"})
	require.NoError(t, err)
	res, err := w.e.Attempts.Execute(w.ctx, *ch.AttemptID)
	require.NoError(t, err)
	a := res.Attempt
	w.fake.SetStatus(a.ProviderID, "succeeded", "")
	_, opened := w.fake.OpenDispute(a.ProviderID, 10000, "fraudulent", false)
	w.handled(t, opened...)
	w.handled(t, w.fake.Event("payment_intent.succeeded", a.ProviderID))

	c, err := w.e.Charges.Get(w.ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, c.Status)
	b, err := ledger.MerchantBalanceIn(w.ctx, w.pool, "m1", money.BRL)
	require.NoError(t, err)
	t.Logf("after: available %s held %s (net %s)", b.Available, b.Held, c.MerchantNet)
	require.Equal(t, c.MerchantNet.Decimal().StringFixed(2), b.Held.StringFixed(2), "the disputed credit is held")

	r, err := audit.Run(context.Background(), w.pool)
	require.NoError(t, err)
	t.Logf("audit while open: %s", r.Summary())
	_, err = w.e.Attempts.SettleDivergence(w.ctx, a.ID, "op-1", "dispute lost", attempts.HoldBook)
	require.NoError(t, err)
	r, err = audit.Run(context.Background(), w.pool)
	require.NoError(t, err)
	require.True(t, r.OK(), r.Summary())
}
