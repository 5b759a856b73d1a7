package stripe_test

import (
	"context"
	"testing"
	"time"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/stripe/stripefake"
)

// TestPayoutExpectedByIsEndOfArrivalDate_R18: a bank payout in transit is
// expected by the end of its arrival_date (UTC: Stripe gives a day, the
// payout becomes paid during it), and the submit answer, a lookup and a
// webhook all say so (ExpectedBy), so that the attempts core reviews a slow
// payout once it is late, not after a fixed day. A paid payout, and
// operations without an arrival date, state none.
func TestPayoutExpectedByIsEndOfArrivalDate_R18(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, 3, 6, 15, 4, 5, 0, time.UTC) // a Friday: the fake's arrival is 48h later
	f, p := newFake(t, stripefake.WithFakeClock(start))
	const secret = "whsec_test_secret"
	want := time.Date(2026, 3, 9, 0, 0, 0, 0, time.UTC) // the end of Sunday 8 March, arrival_date's day

	rp := ref()
	po := submit(t, p, payout("30.00", "EUR"), rp, key())
	if po.State != providers.StateProcessing || !po.ExpectedBy.Equal(want) {
		t.Fatalf("submit: state %s, expected by %s, want processing by %s", po.State, po.ExpectedBy, want)
	}
	lr, err := p.Lookup(ctx, providers.OpBankPayout, rp)
	if err != nil || !lr.Found || lr.State != providers.StateProcessing || !lr.ExpectedBy.Equal(want) {
		t.Fatalf("lookup: %+v %v; want expected by %s", lr, err, want)
	}
	f.SetStatus(po.ProviderID, "in_transit", "")
	ev, err := signed(t, p, f.Event("payout.updated", po.ProviderID), time.Now(), secret)
	if err != nil || ev.Reference != rp || ev.State != providers.StateProcessing || !ev.ExpectedBy.Equal(want) {
		t.Fatalf("webhook: %+v %v; want expected by %s", ev, err, want)
	}

	f.SetStatus(po.ProviderID, "paid", "")
	if lr, _ := p.Lookup(ctx, providers.OpBankPayout, rp); lr.State != providers.StateSucceeded || !lr.ExpectedBy.IsZero() {
		t.Errorf("paid payout: state %s, expected by %s; want none", lr.State, lr.ExpectedBy)
	}
	rt := ref()
	if tr := submit(t, p, transfer("acct_1ABC", "5.00", "EUR"), rt, key()); !tr.ExpectedBy.IsZero() {
		t.Errorf("transfer: expected by %s; want none", tr.ExpectedBy)
	}
}
