package charges_test

import (
	"testing"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/holds"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers/sim"
)

// held is a merchant's held balance in BRL.
func (e *env) held(m string) string {
	b, err := ledger.MerchantBalanceIn(e.ctx, e.pool, m, money.BRL)
	require.NoError(e.t, err)
	return b.Held.StringFixed(2)
}

// R9, R19, R21, R22: a paid card charge with a fee and a split, disputed
// (a chargeback: attempts.RecordDispute, as a Stripe charge.dispute.*
// webhook records it). In the dispute divergence's own transaction each
// share the charge's credit put in a merchant's available balance is held
// (the merchant's net from m1, the split's share from m2); the platform's
// fee is not. Settled with "release" (the dispute won), the shares go back
// to available and held is zero; the audit is clean. Before, nothing moved
// until an operator acted, and the merchant could pay the disputed money
// out.
func TestDisputedSplitChargeHoldsEachShare_R9_R19_R21_R22(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{})
	require.NoError(t, e.svc.SetFeeRule(e.ctx, "", money.BRL, charges.FeeRule{Percent: decimal.RequireFromString("10")}))
	req := e.card("100.00", "tok_visa")
	req.Splits = []charges.SplitRule{{RecipientID: partner, Percent: decimal.RequireFromString("20")}}
	c := e.create(req)
	a := e.execute(c)
	require.Equal(t, attempts.StatusSucceeded, a.Status)
	// fee 10.00; net 90.00; partner 20% of the net: 18.00; m1 72.00.
	require.Equal(t, "72.00", e.available(merchant, money.BRL))
	require.Equal(t, "18.00", e.available(partner, money.BRL))
	fees := e.balance(ledger.PlatformFees(money.BRL))

	res, err := e.att.RecordDispute(e.ctx, attempts.DisputeReport{Provider: a.Provider, ProviderID: a.ProviderID,
		EventID: "evt_dp_1", DisputeID: "dp_1", Withdrawn: true, Note: "dispute dp_1 of 100.00 BRL: funds withdrawn"})
	require.NoError(t, err)
	require.True(t, res.Diverged)
	require.Equal(t, "0.00", e.available(merchant, money.BRL), "m1's net is held")
	require.Equal(t, "72.00", e.held(merchant))
	require.Equal(t, "0.00", e.available(partner, money.BRL), "the split recipient's share is held")
	require.Equal(t, "18.00", e.held(partner))
	require.Equal(t, fees, e.balance(ledger.PlatformFees(money.BRL)), "the platform's fee is not held")
	open, err := holds.Open(e.ctx, e.pool, a.ID.String())
	require.NoError(t, err)
	require.Len(t, open, 2)

	// A second report of the same dispute holds nothing more.
	_, err = e.att.RecordDispute(e.ctx, attempts.DisputeReport{Provider: a.Provider, ProviderID: a.ProviderID,
		EventID: "evt_dp_2", DisputeID: "dp_1", Withdrawn: true, Note: "dispute dp_1: closed"})
	require.NoError(t, err)
	require.Equal(t, "72.00", e.held(merchant))

	// Won: released back to available.
	settled, err := e.att.SettleDivergence(e.ctx, a.ID, "op-1", "dispute dp_1 won", attempts.HoldRelease)
	require.NoError(t, err)
	require.Contains(t, settled.DivergenceSettlement, "72.00 BRL of merchant "+merchant)
	require.Contains(t, settled.DivergenceSettlement, "released")
	require.Equal(t, "72.00", e.available(merchant, money.BRL))
	require.Equal(t, "18.00", e.available(partner, money.BRL))
	require.Equal(t, "0.00", e.held(merchant))
	require.Equal(t, "0.00", e.held(partner))
}
