package charges_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers/sim"
)

// End to end on a real River client: the submit job captures a card (and
// the credit commits with it); for Pix the submit job creates the cob, the
// PollPixCharge job enqueued with the charge shows it awaiting payment and,
// with no webhooks at all, finds it paid and credits it once.
func TestRiverEndToEnd(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{
		tune:    func(c *charges.Config) { c.PollInterval = 50 * time.Millisecond },
		attTune: func(c *attempts.Config) { c.ResolveSchedule = []time.Duration{time.Hour} },
	})
	workers := river.NewWorkers()
	e.att.AddWorkers(workers)
	e.svc.AddWorkers(workers)
	client, err := river.NewClient(riverpgxv5.New(e.pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers:           workers,
		FetchPollInterval: 20 * time.Millisecond,
		FetchCooldown:     5 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		TestOnly:          true,
	})
	require.NoError(t, err)
	e.att.SetRiverClient(client)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = client.Stop(stopCtx)
	})
	wait := func(c charges.Charge, want charges.Status) charges.Charge {
		t.Helper()
		var got charges.Charge
		require.Eventually(t, func() bool {
			got = e.get(c)
			return got.Status == want
		}, 10*time.Second, 20*time.Millisecond, "charge %s never reached %s (last %s)", c.ID, want, got.Status)
		return got
	}

	card := e.create(e.card("12.00", "tok_visa"))
	got := wait(card, charges.StatusPaid)
	require.Equal(t, "worker", got.PaidBy)

	px := e.create(e.pix("8.50"))
	got = wait(px, charges.StatusAwaitingPayment)
	require.NotEmpty(t, got.Pix.CopyPaste)
	_, err = e.srv.PayCob(got.Reference, "", "")
	require.NoError(t, err)
	got = wait(px, charges.StatusPaid)
	require.Equal(t, "resolver", got.PaidBy)
	require.Equal(t, 1, e.credits(px))
	require.Equal(t, "20.50", e.available(merchant, money.BRL))

	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM river_job WHERE kind = $1
			AND state <> 'completed'`, charges.PollPixChargeKind).Scan(&n))
		return n == 0
	}, 30*time.Second, 20*time.Millisecond, "the poll job completes once the charge is paid")
}
