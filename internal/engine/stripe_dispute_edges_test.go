package engine_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/stripe/stripefake"
)

// (R9, R19, R21): a card charge paid twice (a second_operation
// divergence on its succeeded attempt) that the cardholder then charges
// back. RecordDispute sees the attempt already diverged and only notes the
// chargeback; before, LockForRefund skipped second_operation divergences,
// so the charge whose money the card network took back was refundable
// again (found by review). Every dispute note now carries its marker and
// a withdrawn one refuses refunds whatever else diverged.
func TestDisputeAfterASecondOperationRefusesRefunds_R9_R19_R21(t *testing.T) {
	t.Parallel()
	w := newDisputeAPI(t)
	c, a := w.paidCharge(t, "100.00")

	// A second PaymentIntent under the charge's reference, succeeded.
	_, err := w.e.Attempts.ResolveByReference(w.ctx, attempts.ResolveInput{Reference: a.Reference, Provider: "stripe",
		Operation: providers.OpCardCharge, Amount: "100.00", Currency: "BRL", State: providers.StateSucceeded,
		ProviderID: "pi_review_second", Source: attempts.SourceWebhook, Actor: "evt_review_second", Reason: "review"})
	if err != nil {
		require.ErrorIs(t, err, attempts.ErrProviderIDMismatch)
	}
	kind, err := attempts.DivergenceKind(w.ctx, w.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.DivergenceSecondOperation, kind)

	// The cardholder charges back the payment saldo credited.
	_, opened := w.fake.OpenDispute(a.ProviderID, 10000, "fraudulent", false)
	w.handled(t, opened...)

	code, p := w.refund(t, c.ID)
	require.Equal(t, http.StatusConflict, code, "the card network took this charge's money back: no refund (R21): %v", p)
	require.Equal(t, "charge_disputed", p["code"], "%v", p)
}

// (R9, R17, R19): Stripe does not order its events. The chargeback
// events arrive while saldo still holds the card charge's attempt open
// (payment_intent.succeeded not yet delivered): RecordDispute only notes
// them. When payment_intent.succeeded then arrives, the attempt succeeds
// and the charge is credited; the chargeback noted before becomes its
// dispute divergence in the same transaction. Before, it never did: no
// review, no needs_attention, the audit clean, and the charge refundable
// while the platform's balance no longer held the money (found by review).
func TestDisputeReportedBeforeTheSuccessIsADivergence_R9_R17_R19(t *testing.T) {
	t.Parallel()
	w := newDisputeAPI(t)
	ch, err := w.e.Charges.Create(w.ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindCard,
		Amount: money.MustParse("100.00", "BRL"), CardToken: stripefake.PMProcessing, Description: "Pedido 8"})
	require.NoError(t, err)
	res, err := w.e.Attempts.Execute(w.ctx, *ch.AttemptID)
	require.NoError(t, err)
	a := res.Attempt
	require.True(t, a.Status.Open(), "%s", a.Status)
	require.Regexp(t, `^pi_`, a.ProviderID)

	// Stripe settles the payment; its success webhook is delayed, the
	// chargeback's events come first.
	w.fake.SetStatus(a.ProviderID, "succeeded", "")
	_, opened := w.fake.OpenDispute(a.ProviderID, 10000, "fraudulent", false)
	w.handled(t, opened...)
	w.handled(t, w.fake.Event("payment_intent.succeeded", a.ProviderID))

	got, err := w.e.Attempts.Get(w.ctx, w.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, got.Status)
	c, err := w.e.Charges.Get(w.ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, c.Status)

	kind, err := attempts.DivergenceKind(w.ctx, w.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.DivergenceDispute, kind, "a withdrawn chargeback of a paid charge is a dispute divergence, whatever the events' order")
	require.True(t, c.NeedsAttention)
}
