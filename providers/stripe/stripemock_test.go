package stripe_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/saldo/saldo/providers"
)

// TestStripeMockAcceptsEveryRequest_R12 sends every request the adapter can
// make (each create, each lookup, a statement) to stripe-mock, which checks
// it against Stripe's published OpenAPI description: a request it refuses
// (unknown or ill-typed parameter, wrong path) fails the test.
func TestStripeMockAcceptsEveryRequest_R12(t *testing.T) {
	p := newProvider(t, stripeMock(t))
	ctx := context.Background()
	creates := []providers.OperationInput{
		charge("10.50", "USD", "pm_card_visa"),
		charge("500", "JPY", "pm_card_visa"),
		charge("5.12", "KWD", "pm_card_visa"),
		refund("pi_3MtwBwLkdIwHu7ix28a3tqPa", "2.00", "USD"),
		transfer("acct_1MTfjCQ9PRzxEwkZ", "7.25", "USD"),
		payout("100.00", "USD"),
		func() providers.OperationInput { in := payout("1000", "JPY"); in.Description = ""; return in }(),
	}
	for _, in := range creates {
		t.Run(string(in.Operation)+"_"+in.Currency, func(t *testing.T) {
			r := ref()
			if in.Operation == providers.OpBankPayout {
				// The payout names its bank account (stripe_bank_account):
				// stripe-mock checks the destination parameter too.
				b, err := p.EncodePayload(in, r)
				if err != nil || !strings.Contains(string(b), "destination="+payoutBankAccount) {
					t.Fatalf("the payout does not name its destination: %s %v", b, err)
				}
			}
			res := submit(t, p, in, r, key())
			if res.Exchange.StatusCode != http.StatusOK || res.Exchange.Err != nil {
				t.Fatalf("stripe-mock refused %s: %d %v %s", in.Operation, res.Exchange.StatusCode, res.Exchange.Err, res.Exchange.Body)
			}
			if res.ProviderID == "" || res.State == "" {
				t.Fatalf("answer not read: id %q state %q: %s", res.ProviderID, res.State, res.Exchange.Body)
			}
			lr, err := p.Lookup(ctx, in.Operation, r)
			if err != nil {
				t.Fatal(err)
			}
			if lr.Exchange.StatusCode != http.StatusOK {
				t.Fatalf("stripe-mock refused the %s lookup: %d %s", in.Operation, lr.Exchange.StatusCode, lr.Exchange.Body)
			}
			// stripe-mock answers fixtures (not our metadata): the lookup
			// must read them as a list and find nothing of ours; a search
			// result counts as "complete", a has_more list as inconclusive.
			if lr.Found {
				t.Fatalf("a fixture matched our reference: %+v", lr)
			}
		})
	}
	t.Run("statement", func(t *testing.T) {
		entries, err := p.Statement(ctx, time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC))
		if err != nil {
			t.Fatalf("stripe-mock refused a statement request: %v", err)
		}
		if len(entries) == 0 {
			t.Fatal("no statement entries read from stripe-mock's fixtures")
		}
	})
}
