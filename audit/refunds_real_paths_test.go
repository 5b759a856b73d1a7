package audit_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
)

// Review (R21, R22): write paths the landed healthy-database tests leave
// out, through the real services: a refund that failed, then retried by
// its merchant (a second attempt under the same refund row: reserve,
// release, reserve, settle), a refund of a split charge (part of its net
// went to another merchant), a JPY charge and refund, and a reversal of a
// reversal. refunds/charge_match and the ledger's reversal checks must
// stay quiet, and the ledger's chain replays clean.
func TestRefundsAndReversalsOnRealPathsStayQuiet_R21_R22(t *testing.T) {
	t.Parallel()
	w := newRefundWorld(t)
	_, err := merchants.Fund(w.ctx, w.pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("5000", "JPY"),
		Key: "fund-m1-JPY", Reason: "test", Actor: "test"})
	require.NoError(t, err)

	// Failed, then retried to success.
	c1 := w.paidCharge("m1", "100.00", "BRL")
	r := w.refund(c1, "40.00", false, true)
	r, err = w.po.Retry(w.ctx, "m1", r.ID)
	require.NoError(t, err)
	res, err := w.att.Execute(w.ctx, *r.CurrentAttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, res.Attempt.Status)

	// A split charge, refunded in full.
	sc, err := w.ch.Create(w.ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindCard,
		Amount: money.MustParse("80.00", "BRL"), CardToken: "tok_visa",
		Splits: []charges.SplitRule{{RecipientID: "m2", Percent: money.MustParse("25", "BRL").Decimal()}}})
	require.NoError(t, err)
	res, err = w.att.Execute(w.ctx, *sc.AttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, res.Attempt.Status)
	sc, err = w.ch.Get(w.ctx, "m1", sc.ID)
	require.NoError(t, err)
	w.refund(sc, "80.00", false, false)

	// JPY.
	cj := w.paidCharge("m1", "1500", "JPY")
	w.refund(cj, "500", false, false)
	w.refund(cj, "300", false, true)

	// A reversal of a reversal (ledger.Reverse).
	f, err := merchants.Fund(w.ctx, w.pool, merchants.Funding{MerchantID: "m2", Amount: money.MustParse("7.10", "BRL"),
		Key: "fund-m2-extra", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	rv, err := ledger.Reverse(w.ctx, w.pool, f.ID, "undo-extra", "mistake")
	require.NoError(t, err)
	_, err = ledger.Reverse(w.ctx, w.pool, rv.ID, "undo-undo-extra", "mistake after all")
	require.NoError(t, err)

	vs, err := audit.Refunds.Run(w.ctx, w.pool)
	require.NoError(t, err)
	require.Empty(t, vs)
	vs, err = audit.Reversals.Run(w.ctx, w.pool)
	require.NoError(t, err)
	require.Empty(t, vs)
	rep, err := ledger.Verify(w.ctx, w.pool)
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Violations)
	requireAuditOK(t, w.pool)
}
