package payouts_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/providers/stripe"
)

// freshService is a second process (another API replica, or this one after
// a restart): the same database, an empty account cache.
func (e *env) freshService(t *testing.T, withCharges bool) *payouts.Service {
	t.Helper()
	cfg := payouts.Config{Pool: e.pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock}
	if withCharges {
		ch, err := charges.New(charges.Config{Pool: e.pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock})
		require.NoError(t, err)
		cfg.Charges = ch
	}
	svc, err := payouts.New(cfg)
	require.NoError(t, err)
	return svc
}

// R4: a refund created under a client key, then repeated with the same key
// and the same request on a process that has not cached the merchant's
// accounts (the documented recovery after a 503: "send it again with the
// same Idempotency-Key to learn which"). The repeat gets the refund that
// exists. It used to be refused "insufficient balance, nothing was
// reserved", the balance check running before the key was looked up and
// the first refund's own reserve having taken the balance: a caller told
// that may pay by another route.
func TestRefundRepeatedOnAnotherProcessGetsTheRefund(t *testing.T) {
	t.Parallel()
	e, c := refundEnv(t) // available 600.00 (500 funded + 100 charge)
	req := payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, Amount: brl("100.00"), ClientKey: "refund-once"}
	r1, err := e.svc.CreateRefund(e.ctx, req)
	require.NoError(t, err)
	// Spend the rest of available with an ordinary payout.
	p, err := e.svc.CreatePayout(e.ctx, e.pix("500.00"))
	require.NoError(t, err)
	av, _ := e.balances()
	require.Equal(t, "0.00", av)

	other := e.freshService(t, true)
	again, err := other.CreateRefund(e.ctx, req)
	require.NoError(t, err, "same key, same request: the existing refund, not a refusal")
	require.Equal(t, r1.ID, again.ID)
	changed := req
	changed.Amount = brl("90.00")
	_, err = e.freshService(t, true).CreateRefund(e.ctx, changed)
	require.ErrorIs(t, err, payouts.ErrIdempotencyConflict, "same key, another request, refused by the balance first")

	require.Equal(t, attempts.StatusSucceeded, e.execute(r1).Status)
	require.Equal(t, attempts.StatusSucceeded, e.execute(p).Status)
}

// R4: the same for a payout; the same key with another request is still a
// conflict, and only the first request reserved anything.
func TestPayoutRepeatedOnAnotherProcessGetsThePayout(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	req := e.pix("100.00")
	req.ClientKey = "payout-once"
	p1, err := e.svc.CreatePayout(e.ctx, req)
	require.NoError(t, err)

	other := e.freshService(t, false)
	again, err := other.CreatePayout(e.ctx, req)
	require.NoError(t, err, "same key, same request: the existing payout, not a refusal")
	require.Equal(t, p1.ID, again.ID)
	other2 := e.freshService(t, false)
	changed := req
	changed.Amount = brl("50.00")
	_, err = other2.CreatePayout(e.ctx, changed)
	require.ErrorIs(t, err, payouts.ErrIdempotencyConflict, "same key, another request")
	av, _ := e.balances()
	require.Equal(t, "0.00", av, "one reserve of 100.00, not two")
	require.Equal(t, attempts.StatusSucceeded, e.execute(p1).Status)
}

// R4: the same for a split payout.
func TestSplitRepeatedOnAnotherProcessGetsTheSplit(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	leg := func(amount, email string) payouts.SplitLeg {
		return payouts.SplitLeg{Operation: providers.OpPixTransfer, Amount: brl(amount), Destination: pixTo(email)}
	}
	req := payouts.SplitRequest{MerchantID: merchant, ClientKey: "split-once",
		Legs: []payouts.SplitLeg{leg("60.00", "a@example.com"), leg("40.00", "b@example.com")}}
	sp, err := e.svc.CreateSplit(e.ctx, req)
	require.NoError(t, err)

	other := e.freshService(t, false)
	again, err := other.CreateSplit(e.ctx, req)
	require.NoError(t, err, "same key, same request: the existing split, not a refusal")
	require.Equal(t, sp.ID, again.ID)
	changed := req
	changed.Legs = []payouts.SplitLeg{leg("50.00", "a@example.com"), leg("50.00", "b@example.com")}
	_, err = e.freshService(t, false).CreateSplit(e.ctx, changed)
	require.ErrorIs(t, err, payouts.ErrIdempotencyConflict, "same key, another request, refused by the balance first")
	av, _ := e.balances()
	require.Equal(t, "0.00", av, "one reserve of 100.00, not two")
	for _, l := range sp.Legs {
		require.Equal(t, attempts.StatusSucceeded, e.execute(l).Status)
	}
}

// R4: a payout or split accepted under a client key and repeated after the
// routes changed (a deploy moved its operation to a provider that does not
// take its destination) is answered from its key, not refused "not routed":
// a caller told 422 may pay by another route. A new request is still
// refused.
func TestRepeatAfterARouteChangeGetsTheOriginal_R4(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	acct := &providers.Destination{BankAccount: &providers.BankAccount{ISPB: "60701190", Branch: "1", Account: "12345", Type: "checking"}}
	req := payouts.PayoutRequest{MerchantID: merchant, Operation: providers.OpBankPayout, Amount: brl("60.00"),
		Destination: acct, ClientKey: "payout-before-the-deploy"}
	p1, err := e.svc.CreatePayout(e.ctx, req)
	require.NoError(t, err)
	leg := payouts.SplitLeg{Operation: providers.OpBankPayout, Amount: brl("40.00"), Destination: acct}
	splitReq := payouts.SplitRequest{MerchantID: merchant, ClientKey: "split-before-the-deploy", Legs: []payouts.SplitLeg{leg}}
	sp, err := e.svc.CreateSplit(e.ctx, splitReq)
	require.NoError(t, err)

	// After the deploy bank payouts go to Stripe, which pays no Brazilian
	// bank account.
	str, err := stripe.New(stripe.Config{APIKey: "sk_test_unused", BaseURL: "http://127.0.0.1:1"})
	require.NoError(t, err)
	att, err := attempts.New(attempts.Config{Pool: e.pool, Clock: e.clock,
		Providers: map[string]providers.Provider{e.prov.Name(): e.prov, str.Name(): str}})
	require.NoError(t, err)
	moved, err := payouts.New(payouts.Config{Pool: e.pool, Attempts: att, Provider: e.prov.Name(), Clock: e.clock,
		Routes: providers.Routes{providers.OpBankPayout: {str.Name()}}})
	require.NoError(t, err)
	again, err := moved.CreatePayout(e.ctx, req)
	require.NoError(t, err, "same key, same request: the existing payout, not a refusal")
	require.Equal(t, p1.ID, again.ID)
	spAgain, err := moved.CreateSplit(e.ctx, splitReq)
	require.NoError(t, err, "same key, same request: the existing split, not a refusal")
	require.Equal(t, sp.ID, spAgain.ID)

	var unroutable *payouts.UnroutableError
	fresh := req
	fresh.ClientKey = "after-the-deploy"
	_, err = moved.CreatePayout(e.ctx, fresh)
	require.ErrorAs(t, err, &unroutable, "a new request is refused")
	splitReq.ClientKey = "split-after-the-deploy"
	_, err = moved.CreateSplit(e.ctx, splitReq)
	require.ErrorAs(t, err, &unroutable, "a new split is refused")
	changed := req
	changed.Amount = brl("50.00")
	_, err = moved.CreatePayout(e.ctx, changed)
	require.ErrorIs(t, err, payouts.ErrIdempotencyConflict, "same key, another request")
	av, _ := e.balances()
	require.Equal(t, "0.00", av, "one reserve each, not two")
}
