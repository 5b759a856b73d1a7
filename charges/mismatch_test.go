package charges_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// misreading is the sim's adapter reading every found operation's amount
// and currency as the test says: what a provider (or an adapter bug) that
// reports another amount for our reference looks like. Every exchange is
// still real HTTP against the sim.
type misreading struct {
	*sim.Provider
	amount, currency string
}

func (p misreading) Lookup(ctx context.Context, op providers.Operation, ref string) (providers.LookupResult, error) {
	lr, err := p.Provider.Lookup(ctx, op, ref)
	if lr.Found {
		lr.Amount, lr.Currency = p.amount, p.currency
	}
	return lr, err
}

// Issue 13 finding 4 (R14, R17). The resolver confirming a paid Pix cob
// compares the amount and currency the lookup reports with the charge's: a
// paid cob of another amount credits nothing; the attempt stays open and
// goes to review with an alert. The poll job sees the same lookup and does
// the same (no error loop; the alert is raised once). An operator then
// decides with the provider's statement.
func TestPixPaidWithOtherAmountGoesToReview_R14_R17(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, amount, currency string }{
		{"amount", "1.00", "BRL"},
		{"currency", "10.00", "USD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var e *env
			e = setup(t, sim.Config{}, opts{attTune: func(c *attempts.Config) {
				for name, p := range c.Providers {
					c.Providers[name] = misreading{Provider: p.(*sim.Provider), amount: tc.amount, currency: tc.currency}
				}
			}})
			c := e.create(e.pix("10.00"))
			a := e.execute(c)
			require.Equal(t, attempts.StatusPending, a.Status)
			_, err := e.srv.PayCob(a.Reference, "", "")
			require.NoError(t, err)

			r := e.resolveAfter(c, 31*time.Second)
			require.False(t, r.Transitioned)
			require.True(t, r.Attempt.Status.Open(), "a paid cob of another amount is not our payment")
			require.True(t, r.Attempt.Review)
			require.Contains(t, r.Attempt.ReviewReason, tc.name)
			require.Equal(t, 0, e.credits(c))
			require.NotEqual(t, charges.StatusPaid, e.get(c).Status)

			// The poll job reads the same lookup: no credit, no error loop;
			// it keeps looking (the cob may still expire).
			res, err := e.svc.Poll(e.ctx, c.ID)
			require.NoError(t, err)
			require.False(t, res.Changed)
			require.Positive(t, res.RetryIn)
			require.Equal(t, 0, e.credits(c))

			// The operator settles it from the provider's statement.
			m, err := e.att.ResolveManually(e.ctx, a.ID, attempts.StatusSucceeded, "op_1", "statement: paid 10.00 BRL", nil)
			require.NoError(t, err)
			require.True(t, m.Transitioned)
			require.Equal(t, 1, e.credits(c))
		})
	}
}
