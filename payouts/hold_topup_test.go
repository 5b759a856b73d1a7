package payouts_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/holds"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers/sim"
)

// R9, R21, R22: a refund of 40.00 is in flight when its 100.00 charge is
// disputed: the dispute holds the 60.00 the refund leaves in doubt (the
// refund counts against the charge while open). The refund then fails: its
// release tops the hold up by the 40.00 it gives back, in the release's
// transaction (key divergence_hold:<charge attempt>:<refund attempt>), and
// "book" moves the whole 100.00 once. The audit is clean all along.
func TestDisputeHoldIsToppedUpByAFailedRefundsRelease_R9_R21_R22(t *testing.T) {
	t.Parallel()
	e, c := refundEnv(t)
	r, err := e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, Amount: brl("40.00")})
	require.NoError(t, err)
	ra := e.attempt(r)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: ra.Reference}))
	require.Equal(t, attempts.StatusUnknown, e.execute(r).Status, "the refund is in flight")

	ca := e.disputeCharge(c)
	require.Equal(t, "60.00", e.heldOf(merchant), "the open refund of 40.00 counts against the charge")
	e.requireHoldsClean()

	require.Equal(t, attempts.StatusFailed, e.resolveAfter(r, time.Hour).Attempt.Status)
	avail, reserved := e.balances()
	require.Equal(t, "100.00", e.heldOf(merchant), "the failed refund's 40.00 joins the hold")
	require.Equal(t, "500.00", avail)
	require.Equal(t, "0.00", reserved)
	require.Equal(t, 1, e.count(`SELECT count(*) FROM ledger_transactions WHERE idempotency_key = $1 AND cause_kind = $2 AND cause_id = $3`,
		holds.CauseHold+":"+ca.ID.String()+":"+ra.ID.String(), holds.CauseHold, ca.ID.String()))
	e.requireHoldsClean()

	before, err := ledger.Balance(e.ctx, e.pool, ledger.ProviderClearing(e.prov.Name(), money.BRL).Code())
	require.NoError(t, err)
	_, err = e.att.SettleDivergence(e.ctx, ca.ID, "op-1", "dispute lost", attempts.HoldBook)
	require.NoError(t, err)
	after, err := ledger.Balance(e.ctx, e.pool, ledger.ProviderClearing(e.prov.Name(), money.BRL).Code())
	require.NoError(t, err)
	require.Equal(t, "100.00", after.Decimal().Sub(before.Decimal()).StringFixed(2))
	require.Equal(t, "0.00", e.heldOf(merchant))
}

// R19, R22: the audit's hold_exceeds compares a dispute's hold with what
// the refunds leave in doubt (the formula the hold takes from), not with
// the charge's whole net: 10.00 more held by hand after a 40.00 refund of a
// 100.00 charge is reported.
func TestAuditReportsADisputeHoldAboveWhatRefundsLeave_R19_R22(t *testing.T) {
	t.Parallel()
	e, c := refundEnv(t)
	e.tampered = true
	r, err := e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, Amount: brl("40.00")})
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, e.execute(r).Status)
	ca := e.disputeCharge(c)
	require.Equal(t, "60.00", e.heldOf(merchant))
	e.requireHoldsClean()
	_, err = ledger.Post(e.ctx, e.pool, ledger.TransactionInput{IdempotencyKey: "hand:" + ca.ID.String(),
		CauseKind: holds.CauseHold, CauseID: ca.ID.String(), Description: "by hand",
		Postings: []ledger.PostingInput{leg(ledger.MerchantAvailable(merchant, money.BRL), "-10.00"),
			leg(ledger.MerchantHeld(merchant, money.BRL), "10.00")}})
	require.NoError(t, err)
	e.requireAuditReports("holds/hold_exceeds", "70.00 held where the dispute puts 60.00 in doubt")
}

// requireHoldsClean: the audit's holds checks find nothing (an open
// divergence is itself reported under attempts/diverged until settled).
func (e *env) requireHoldsClean() {
	e.t.Helper()
	vs, err := holds.Verify(e.ctx, e.pool)
	require.NoError(e.t, err)
	require.Empty(e.t, vs)
}
