package payouts_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/pgproxy"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// setupProxied is setup with the services' connections going through a
// pgproxy (e.pool, for the test's own reads and the audit, goes direct).
func setupProxied(t *testing.T, balance string) (*env, *pgproxy.Proxy) {
	t.Helper()
	e, proxy, _ := setupProxiedPool(t, balance)
	return e, proxy
}

// setupProxiedPool is setupProxied that also returns the proxied pool (for
// services the test builds itself).
func setupProxiedPool(t *testing.T, balance string) (*env, *pgproxy.Proxy, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	proxy, direct, proxied := proxiedPools(t)
	var err error
	e := &env{t: t, ctx: ctx, pool: direct, clock: sim.NewManualClock(t0)}
	e.srv = sim.NewServer(sim.Config{Clock: e.clock.Now}).Start()
	t.Cleanup(e.srv.Close)
	e.prov = e.srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{
		ConnectTimeout: time.Second, ReadTimeout: simReadTimeout}))
	e.att, err = attempts.New(attempts.Config{Pool: proxied, Clock: e.clock,
		Providers: map[string]providers.Provider{e.prov.Name(): e.prov}})
	require.NoError(t, err)
	e.svc, err = payouts.New(payouts.Config{Pool: proxied, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock})
	require.NoError(t, err)
	_, err = merchants.Create(ctx, direct, merchant, "Loja da Ana")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, direct, merchants.Funding{MerchantID: merchant, Amount: brl(balance),
		Key: "initial", Reason: "test funding", Actor: "test"})
	require.NoError(t, err)
	t.Cleanup(e.auditClean)
	return e, proxy, proxied
}

// Issue 13 finding 1 (R22, R4): the opening batch's COMMIT reaches the
// server and commits, but its answer is lost. The fallback must not create
// the batch's payouts a second time (new ids, new attempts, new reserves,
// new submit jobs: paid twice): each request gets the payout that
// committed, and the database holds one payout, one attempt, one reserve
// and one submit job per request.
func TestAmbiguousCommitOfOpeningBatchCreatesNothingTwice_R22(t *testing.T) {
	t.Parallel()
	e, proxy := setupProxied(t, "100.00")
	proxy.LoseCommitAnswer("INSERT INTO payouts", 1)
	reqs := []payouts.PayoutRequest{e.pix("10.00"), e.pix("11.00"), e.pix("12.00")}
	ps, errs := e.svc.CreateTogether(e.ctx, reqs)
	require.Equal(t, 1, proxy.Cuts(), "the opening batch's commit answer was lost")
	for i := range reqs {
		require.NoError(t, errs[i], "request %d", i)
		require.Equal(t, reqs[i].Amount.String(), ps[i].Amount.String())
	}
	require.Equal(t, 3, e.count(`SELECT count(*) FROM payouts`))
	require.Equal(t, 3, e.count(`SELECT count(*) FROM attempts`))
	require.Equal(t, 3, e.count(`SELECT count(*) FROM ledger_transactions WHERE cause_kind = 'payout_reserve'`))
	require.Equal(t, 3, e.count(`SELECT count(*) FROM river_job WHERE kind = $1`, attempts.SubmitAttemptKind))
	for _, p := range ps {
		require.Equal(t, 1, e.count(`SELECT count(*) FROM payouts WHERE id = $1`, p.ID), "the answer names the committed payout")
	}
	avail, reserved := e.balances()
	require.Equal(t, "67.00", avail)
	require.Equal(t, "33.00", reserved)
}

// The one-at-a-time path too: a lone CreatePayout whose commit answer is
// lost answers with the payout that committed, not an error that would make
// a caller without a key ask again and pay twice.
func TestAmbiguousCommitOfOnePayoutAnswersWhatCommitted_R22(t *testing.T) {
	t.Parallel()
	e, proxy := setupProxied(t, "100.00")
	proxy.LoseCommitAnswer("INSERT INTO payouts", 1)
	p, err := e.svc.CreatePayout(e.ctx, e.pix("10.00"))
	require.Equal(t, 1, proxy.Cuts())
	require.NoError(t, err)
	require.Equal(t, 1, e.count(`SELECT count(*) FROM payouts WHERE id = $1`, p.ID))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM payouts`))
	// The payout is executed and settles once.
	a := e.execute(p)
	require.Equal(t, attempts.StatusSucceeded, a.Status)
}

// proxiedPools makes a test database and two pools on it: direct, and
// proxied through a pgproxy (which can lose a COMMIT's answer or cut the
// connections, as a process dying would).
func proxiedPools(t *testing.T) (*pgproxy.Proxy, *pgxpool.Pool, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	url := testdb.NewURL(t)
	proxy := pgproxy.Start(t, url)
	direct, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(direct.Close)
	proxied, err := pgxpool.New(ctx, proxy.URL(url))
	require.NoError(t, err)
	t.Cleanup(proxied.Close)
	return proxy, direct, proxied
}
