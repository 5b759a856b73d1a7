package charges_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// A "paid" report for a cob whose charge
// already expired (the PSP settling a payment made at the last second,
// reported late) credits nothing and leaves the charge expired (R9), but
// is not lost: the attempt records a divergence and goes to review (R18,
// R19), and a repeat of the report changes nothing more.
func TestPixPaidReportAfterExpiryIsADivergenceNotACredit_R9_R19(t *testing.T) {
	t.Parallel()
	var told []string // OnDiverged: the charge's notification hook
	e := setup(t, sim.Config{}, opts{tune: func(c *charges.Config) {
		c.PollInterval = time.Hour
		c.OnDiverged = func(_ context.Context, _ pgx.Tx, ch charges.Charge, a attempts.Attempt) error {
			told = append(told, ch.ID+" "+string(ch.Status)+" "+a.ID.String())
			return nil
		}
	}})
	req := e.pix("20.00")
	req.PixExpiresIn = 10 * time.Minute
	c := e.create(req)
	e.execute(c)
	res, err := e.svc.Poll(e.ctx, c.ID)
	require.NoError(t, err)
	e.clock.Advance(res.RetryIn)
	res, err = e.svc.Poll(e.ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusExpired, res.Charge.Status)

	paid := providers.WebhookEvent{ID: "evt_late_paid", Type: "pix_charge.succeeded", Operation: providers.OpPixCharge,
		Reference: res.Charge.Reference, ProviderID: "E2E-late", State: providers.StateSucceeded, Amount: "20.00", Currency: "BRL"}
	for range 2 {
		handled, err := e.svc.HandleProviderEvent(e.ctx, e.prov.Name(), paid)
		require.NoError(t, err)
		require.True(t, handled)
	}
	got := e.get(c)
	require.Equal(t, charges.StatusExpired, got.Status)
	require.Equal(t, 0, e.credits(c))
	require.Equal(t, "0.00", e.available(merchant, money.BRL))
	a, err := e.att.Get(e.ctx, e.pool, *c.AttemptID)
	require.NoError(t, err)
	require.NotNil(t, a.DivergedAt, "the late payment is recorded as a divergence")
	require.True(t, a.Review, "and is in front of a human")
	require.Equal(t, []string{c.ID + " expired " + a.ID.String()}, told, "the merchant is told once (charge.diverged)")
	// Settled so the audit after the test is clean.
	_, err = e.att.SettleDivergence(e.ctx, a.ID, "op-1", "payer refunded outside saldo", attempts.HoldNone)
	require.NoError(t, err)
}
