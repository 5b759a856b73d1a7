package charges_test

import (
	"testing"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers/sim"
)

// R4: a charge created under a client key with a fixed split that fits; the
// platform then raises its fee; the client repeats the same request with
// the same key (its first answer was lost). The repeat gets the charge that
// exists. It used to be refused (400 on splits[0].amount): Create computed
// the breakdown under the new fee rule before it looked the key up.
func TestChargeRepeatedAfterFeeRuleChangeGetsTheCharge(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{})
	req := e.card("10.00", "tok_visa")
	req.ClientKey = "order-7"
	req.Splits = []charges.SplitRule{{RecipientID: partner, Amount: decimal.RequireFromString("9.00")}}
	c1 := e.create(req)

	require.NoError(t, e.svc.SetFeeRule(e.ctx, "", money.BRL, charges.FeeRule{Percent: decimal.RequireFromString("20")}))
	again, err := e.svc.Create(e.ctx, req)
	require.NoError(t, err, "same key, same request: the existing charge")
	require.Equal(t, c1.ID, again.ID)
	require.Equal(t, attempts.StatusSucceeded, e.execute(c1).Status)
}
