package charges_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// TestChaos drives card and Pix charges against the simulated PSP with
// random faults on submits and lookups (resets, hangs and 500s after the
// operation was recorded, 503s, 429s, failing lookups), duplicated and
// reordered webhooks racing the submit calls, the resolver and the poll,
// and payers paying some cobs while others expire. At the end every charge
// is final, our status matches what the PSP executed (the oracle), a charge
// is credited exactly when it is paid and exactly once, and the audit and
// the oracle's duplicate check pass (setup's cleanup).
func TestChaos(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{Seed: 42, LookupLag: 2 * time.Second, WebhookDuplicateRate: 0.5, WebhookReorderRate: 0.3,
		Random: sim.FaultProfile{ResetBefore: 0.05, HangAfter: 0.05, ErrorAfter: 0.05, Unavailable: 0.05,
			RateLimit: 0.05, LookupFail: 0.1}}, opts{webhooks: true})

	var all []charges.Charge
	pay := map[string]bool{}
	for i := range 16 {
		token := "tok_visa"
		if i%5 == 0 {
			token = sim.TokenDecline
		}
		all = append(all, e.create(e.card(fmt.Sprintf("%d.%02d", 10+i, i*7%100), token)))
	}
	for i := range 16 {
		c := e.create(e.pix(fmt.Sprintf("%d.%02d", 5+i, i*13%100)))
		pay[c.ID] = i%3 != 0 // two thirds are paid, the rest expire
		all = append(all, c)
	}

	final := func(c charges.Charge) bool { return e.get(c).Status.Final() }
	step := func(c charges.Charge, paying bool) {
		a, err := e.att.Get(e.ctx, e.pool, *c.AttemptID)
		require.NoError(t, err)
		if a.Status == attempts.StatusPending && a.ProviderState != string(providers.StateProcessing) {
			_, err := e.att.Execute(e.ctx, a.ID)
			require.NoError(t, err)
		}
		if _, err := e.att.Resolve(e.ctx, a.ID); err != nil {
			require.NoError(t, err)
		}
		if c.Kind == charges.KindPix {
			got, err := e.svc.Poll(e.ctx, c.ID)
			require.NoError(t, err)
			if paying && pay[c.ID] && got.Charge.Status == charges.StatusAwaitingPayment {
				_, err := e.srv.PayCob(got.Charge.Reference, "", "")
				if err != nil && !errors.Is(err, sim.ErrCobPaid) {
					require.NoError(t, err)
				}
			}
		}
	}
	run := func(rounds int, paying bool) {
		for range rounds {
			var wg sync.WaitGroup
			for _, c := range all {
				if final(c) {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					step(c, paying)
				}()
			}
			wg.Wait()
			e.flush()
			e.clock.Advance(31 * time.Second)
		}
	}
	run(40, true)
	e.clock.Advance(2 * time.Hour) // every unpaid cob expires (default expiry 1h)
	run(40, false)

	counts := map[charges.Status]int{}
	for _, c := range all {
		got := e.get(c)
		counts[got.Status]++
		require.True(t, got.Status.Final(), "charge %s (%s) is still %s", got.ID, got.Kind, got.Status)
		psp := providers.StateFailed
		for _, op := range e.srv.Operations(got.Reference) {
			if op.State == providers.StateSucceeded {
				psp = providers.StateSucceeded
			}
		}
		if got.Status == charges.StatusPaid {
			require.Equal(t, providers.StateSucceeded, psp, "charge %s paid, the PSP holds no money for it", got.ID)
			require.Equal(t, 1, e.credits(got))
		} else {
			require.Equal(t, providers.StateFailed, psp, "charge %s %s, the PSP took the money", got.ID, got.Status)
			require.Equal(t, 0, e.credits(got))
		}
	}
	var unknowns, resent int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FILTER (WHERE unknown_at IS NOT NULL),
		count(*) FILTER (WHERE call_count > 1) FROM attempts`).Scan(&unknowns, &resent))
	dups := 0
	for _, d := range e.srv.WebhookDeliveries() {
		if d.Copy == 1 && d.Delivered {
			dups++
		}
	}
	t.Logf("final statuses: %v; %d attempts went unknown, %d were re-sent, %d duplicate webhooks", counts, unknowns, resent, dups)
	require.Positive(t, unknowns, "the faults must bite")
	require.Positive(t, resent)
	require.Positive(t, dups)
	require.Positive(t, counts[charges.StatusPaid])
	require.Positive(t, counts[charges.StatusExpired])
	require.Positive(t, counts[charges.StatusFailed])
}
