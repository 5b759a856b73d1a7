package engine_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers/stripe/stripefake"
)

// (R9, R19, R21): the chargeback is reported while the card
// charge's attempt is still open, and the success then comes from the
// resolver's lookup, whose transaction hands finals to their owners
// together at its end (inTxFinals, finalTogether): the dispute divergence
// must be recorded there too, after the charge is credited. Needs
// attempts.disputesAfterSuccess wired after finalTogether in runTx.
func TestChargebackBeforeALookupSuccessIsADivergence_R9_R19_R21(t *testing.T) {
	t.Parallel()
	w := newDisputeAPI(t)
	ch, err := w.e.Charges.Create(w.ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindCard,
		Amount: money.MustParse("100.00", "BRL"), CardToken: stripefake.PMProcessing, Description: "Pedido 9"})
	require.NoError(t, err)
	res, err := w.e.Attempts.Execute(w.ctx, *ch.AttemptID)
	require.NoError(t, err)
	a := res.Attempt
	require.True(t, a.Status.Open(), "%s", a.Status)

	w.fake.SetStatus(a.ProviderID, "succeeded", "")
	_, opened := w.fake.OpenDispute(a.ProviderID, 10000, "fraudulent", false)
	w.handled(t, opened...)

	// Before the success: noted, and refunds already refused (the charge
	// is not paid yet anyway).
	kind, err := attempts.DivergenceKind(w.ctx, w.pool, a.ID)
	require.NoError(t, err)
	require.Empty(t, kind)

	_, err = w.pool.Exec(w.ctx, `UPDATE attempts SET next_lookup_at = now() - interval '1 second' WHERE id = $1`, a.ID)
	require.NoError(t, err)
	rr, err := w.e.Attempts.Resolve(w.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, rr.Attempt.Status)

	c, err := w.e.Charges.Get(w.ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, c.Status)
	kind, err = attempts.DivergenceKind(w.ctx, w.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.DivergenceDispute, kind)
	require.True(t, c.NeedsAttention)

	code, p := w.refund(t, c.ID)
	require.Equal(t, http.StatusConflict, code, "%v", p)
	require.Equal(t, "charge_disputed", p["code"], "%v", p)
}

// (R9, R19, R21): a won dispute (the money reinstated) does not make
// the charge refundable again: the disputed charge stays unrefundable, as
// the existing design keeps it.
func TestChargebackWonStaysUnrefundable_R19_R21(t *testing.T) {
	t.Parallel()
	w := newDisputeAPI(t)
	c, a := w.paidCharge(t, "100.00")
	d, opened := w.fake.OpenDispute(a.ProviderID, 10000, "fraudulent", false)
	w.handled(t, opened...)
	_, closed := w.fake.CloseDispute(d["id"].(string), true)
	w.handled(t, closed...)

	kind, err := attempts.DivergenceKind(w.ctx, w.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.DivergenceDispute, kind)
	var marked int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM attempt_events WHERE attempt_id = $1 AND type = 'note'
		AND evidence @> $2::jsonb`, a.ID, attempts.WithdrawnDisputeEvidence).Scan(&marked))
	require.GreaterOrEqual(t, marked, 1)

	code, p := w.refund(t, c.ID)
	require.Equal(t, http.StatusConflict, code, "%v", p)
	require.Equal(t, "charge_disputed", p["code"], "%v", p)
}

// (R19, R21): an inquiry (nothing withdrawn) is a note whose
// evidence says so; it does not refuse a refund.
func TestChargebackInquiryStaysRefundable_R19_R21(t *testing.T) {
	t.Parallel()
	w := newDisputeAPI(t)
	c, a := w.paidCharge(t, "100.00")
	_, opened := w.fake.OpenDispute(a.ProviderID, 10000, "general", true)
	w.handled(t, opened...)
	var marked, notes int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FILTER (WHERE evidence @> $2::jsonb),
		count(*) FILTER (WHERE evidence @> '{"dispute_withdrawn": false}') FROM attempt_events
		WHERE attempt_id = $1 AND type = 'note'`, a.ID, attempts.WithdrawnDisputeEvidence).Scan(&marked, &notes))
	require.Zero(t, marked)
	require.Equal(t, 1, notes)
	code, p := w.refund(t, c.ID)
	require.Equal(t, http.StatusCreated, code, "%v", p)
}
