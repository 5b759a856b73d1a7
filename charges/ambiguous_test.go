package charges_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/pgproxy"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers/sim"
)

// Issue 13 finding 1 (R10): card charges recorded together, the record
// batch's commit answer lost (it committed): each charge is credited once,
// and every Execute answers the paid attempt.
func TestAmbiguousCommitOfChargeRecordBatchCreditsOnce_R10(t *testing.T) {
	t.Parallel()
	e, proxy := setupProxied(t)
	const n = 12
	cs := make([]charges.Charge, n)
	for i := range cs {
		cs[i] = e.create(e.card("10.00", "tok_visa"))
	}
	proxy.LoseCommitAnswer("calls_recorded = GREATEST(a.calls_recorded", 1) // recordSQL: batches only
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, c := range cs {
		wg.Go(func() {
			<-start
			res, err := e.att.Execute(e.ctx, *c.AttemptID)
			if err != nil || res.Attempt.Status != attempts.StatusSucceeded {
				t.Errorf("charge %s: %v (attempt %s)", c.ID, err, res.Attempt.Status)
			}
		})
	}
	close(start)
	wg.Wait()
	require.Equal(t, 1, proxy.Cuts(), "a record batch lost its commit answer")
	for _, c := range cs {
		got := e.get(c)
		require.Equal(t, charges.StatusPaid, got.Status)
		require.Equal(t, 1, e.credits(c), "credited once (R10)")
		require.Equal(t, 1, e.moneyMoving(got.Reference), "charged once at the provider")
	}
	require.Equal(t, "120.00", e.available(merchant, money.BRL))
}

// setupProxied is setup with the attempts' and charges' pool reached through
// a pgproxy (which can lose a COMMIT's answer or cut a connection); e.pool
// stays direct.
func setupProxied(t *testing.T) (*env, *pgproxy.Proxy) {
	t.Helper()
	var proxy *pgproxy.Proxy
	var proxied *pgxpool.Pool
	viaProxy := func(pool *pgxpool.Pool) *pgxpool.Pool {
		if proxied == nil {
			url := testdb.AdminURL(t, pool)
			proxy = pgproxy.Start(t, url)
			var err error
			proxied, err = pgxpool.New(context.Background(), proxy.URL(url))
			require.NoError(t, err)
			t.Cleanup(proxied.Close)
		}
		return proxied
	}
	e := setup(t, sim.Config{}, opts{readTimeout: 10 * time.Second,
		attTune: func(c *attempts.Config) { c.Pool = viaProxy(c.Pool) },
		tune:    func(c *charges.Config) { c.Pool = viaProxy(c.Pool) }})
	return e, proxy
}
