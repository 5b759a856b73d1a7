package charges_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers/sim"
)

// REVIEW (holds), PASSES (regression guard): split charges with crossed
// merchants (m1 -> m2 share, m2 -> m1 share, m1 -> agent...), all disputed
// at once, the merchants' held accounts not existing yet (the first holds
// create them concurrently). Every hold locks its merchants' available and
// held accounts in one id order (ledger.Deferred.AddLocked) after creating
// them in merchant order: no deadlock, no error, every share held whole
// (each merchant's available covers its shares), and the sum is conserved.
func TestReviewHolds_ConcurrentCrossedSplitDisputes_R9_R22_R23(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{})
	pairs := [][2]string{{merchant, partner}, {partner, merchant}, {merchant, agent}, {agent, partner}, {partner, agent}, {agent, merchant}}
	var as []attempts.Attempt
	for i := range 12 {
		p := pairs[i%len(pairs)]
		req := charges.ChargeRequest{MerchantID: p[0], Kind: charges.KindCard, Amount: brl("10.00"), CardToken: "tok_visa",
			ClientKey: fmt.Sprintf("k%d", i)}
		req.Splits = []charges.SplitRule{{RecipientID: p[1], Percent: decimal.RequireFromString("30")}}
		c := e.create(req)
		a := e.execute(c)
		require.Equal(t, attempts.StatusSucceeded, a.Status)
		as = append(as, a)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(as))
	for i, a := range as {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.att.RecordDispute(e.ctx, attempts.DisputeReport{Provider: a.Provider, ProviderID: a.ProviderID,
				EventID: fmt.Sprintf("evt_%d", i), DisputeID: fmt.Sprintf("dp_%d", i), Withdrawn: true, Note: "dispute: withdrawn"})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "dispute %d", i)
	}
	for _, m := range []string{merchant, partner, agent} {
		require.Equal(t, "0.00", e.available(m, money.BRL), "merchant %s: every share held", m)
		require.Equal(t, "40.00", e.held(m), "merchant %s: 4 x 7.00 net + 4 x 3.00 shares", m)
	}
	// Settle them all concurrently, half released and half booked.
	for i, a := range as {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := attempts.HoldRelease
			if i%2 == 1 {
				d = attempts.HoldBook
			}
			_, errs[i] = e.att.SettleDivergence(e.ctx, a.ID, "op-1", "settled", d)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "settlement %d", i)
	}
	for _, m := range []string{merchant, partner, agent} {
		require.Equal(t, "0.00", e.held(m))
	}
}
