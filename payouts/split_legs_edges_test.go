package payouts_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// 100 legs of 0.01 to the same destination: one transaction reserves 1.00,
// each leg gets its own attempt, key and reference, each is paid exactly
// once, and the split ends succeeded with the ledger balanced (audit at
// cleanup). A 101st leg is refused; a leg the route cannot pay
// (destination_not_routed) reserves nothing and writes nothing.
func TestHundredTinyLegsToOneDestinationAreEachPaidOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "5.00")
	var legs []payouts.SplitLeg
	for i := 0; i < payouts.MaxSplitLegs; i++ {
		legs = append(legs, payouts.SplitLeg{Operation: providers.OpPixTransfer, Amount: brl("0.01"), Destination: pixTo("same@example.com")})
	}
	_, err := e.svc.CreateSplit(e.ctx, payouts.SplitRequest{MerchantID: merchant, Legs: append(legs[:len(legs):len(legs)],
		payouts.SplitLeg{Operation: providers.OpPixTransfer, Amount: brl("0.01"), Destination: pixTo("same@example.com")})})
	require.ErrorIs(t, err, payouts.ErrInvalid)

	// A leg to a Stripe bank account: the sim cannot pay it.
	bad := append(legs[:2:2], payouts.SplitLeg{Operation: providers.OpBankPayout, Amount: brl("0.01"),
		Destination: &providers.Destination{StripeBankAccount: "ba_1"}})
	_, err = e.svc.CreateSplit(e.ctx, payouts.SplitRequest{MerchantID: merchant, ClientKey: "bad", Legs: bad})
	require.Error(t, err)
	t.Logf("unroutable leg: %v", err)
	av, res := e.balances()
	require.Equal(t, "5.00/0.00", av+"/"+res)
	require.Zero(t, e.count(`SELECT count(*) FROM payouts`))
	require.Zero(t, e.count(`SELECT count(*) FROM splits`))
	require.Zero(t, e.count(`SELECT count(*) FROM payout_requests`))

	sp, err := e.svc.CreateSplit(e.ctx, payouts.SplitRequest{MerchantID: merchant, ClientKey: "hundred", Legs: legs})
	require.NoError(t, err)
	require.Equal(t, "1.00 BRL", sp.Total.String())
	av, res = e.balances()
	require.Equal(t, "4.00/1.00", av+"/"+res)
	refs := map[string]bool{}
	for _, l := range sp.Legs {
		a := e.attempt(l)
		refs[a.Reference] = true
		require.Equal(t, attempts.StatusSucceeded, e.execute(l).Status)
		require.Equal(t, 1, e.opsFor(a))
	}
	require.Len(t, refs, payouts.MaxSplitLegs)
	got, err := e.svc.GetSplit(e.ctx, merchant, sp.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.SplitSucceeded, got.Status)
	av, res = e.balances()
	require.Equal(t, "4.00/0.00", av+"/"+res)
}
