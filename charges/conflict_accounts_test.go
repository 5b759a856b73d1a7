package charges_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers/sim"
)

// R4, and a refused request writes nothing: a charge request that reuses a
// client key with another body (another currency, a split recipient) is
// refused with ErrIdempotencyConflict before prepareCreate opens the ledger
// accounts the new body would credit: no merchant's balances list a
// currency it never held.
func TestConflictingChargeOpensNoLedgerAccount_R4(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{})
	first := e.card("10.00", "tok_visa")
	first.ClientKey = "order-42"
	c := e.create(first)
	require.Equal(t, charges.StatusPaid, func() charges.Status { e.execute(c); return e.get(c).Status }())

	var before int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM ledger_accounts`).Scan(&before))

	other := charges.ChargeRequest{MerchantID: merchant, ClientKey: "order-42", Kind: charges.KindCard,
		Amount: money.MustParse("10.00", "USD"), CardToken: "tok_visa",
		Splits: []charges.SplitRule{{RecipientID: agent, Percent: money.MustParse("10", "BRL").Decimal()}}}
	_, err := e.svc.Create(e.ctx, other)
	require.ErrorIs(t, err, charges.ErrIdempotencyConflict)

	var after int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM ledger_accounts`).Scan(&after))
	m3, err := ledger.MerchantBalances(e.ctx, e.pool, agent)
	require.NoError(t, err)
	var listed []string
	for _, b := range m3 {
		listed = append(listed, b.Currency.Code())
	}
	require.Equal(t, before, after, "a refused charge created %d ledger accounts; m3's balances now list %v", after-before, listed)
}
