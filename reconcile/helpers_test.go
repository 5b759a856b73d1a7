package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/reconcile"
)

// day is the day the tests reconcile; operations happen at 10:00.
var day = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)

const merchant = "m1"

// readTimeout is the read timeout of the tests' provider clients: they
// assert successes, so it must be long enough that a loaded machine's slow
// answer is not read as unknown (300 ms was not, R3); the hangs the tests
// script (an answer lost after the provider committed) last far longer.
const readTimeout = time.Second

// env is one test's world: its own database, a simulated PSP over real
// HTTP, attempts, payouts and reconcile on one manual clock.
type env struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	clock  *sim.ManualClock
	srv    *sim.Server
	prov   *sim.Provider
	att    *attempts.Service
	po     *payouts.Service
	rec    *reconcile.Service
	alerts []reconcile.Divergence
}

func setup(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), pool: testdb.New(t), clock: sim.NewManualClock(day.Add(10 * time.Hour))}
	e.srv = sim.NewServer(sim.Config{Clock: e.clock.Now}).Start()
	t.Cleanup(e.srv.Close)
	e.prov = e.srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ConnectTimeout: time.Second,
		ReadTimeout: readTimeout}))
	byName := map[string]providers.Provider{e.prov.Name(): e.prov}
	var err error
	e.att, err = attempts.New(attempts.Config{Pool: e.pool, Clock: e.clock, Providers: byName})
	require.NoError(t, err)
	e.po, err = payouts.New(payouts.Config{Pool: e.pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock})
	require.NoError(t, err)
	e.rec, err = reconcile.New(reconcile.Config{Pool: e.pool, Attempts: e.att, Providers: byName, Clock: e.clock,
		OnAlert: func(d reconcile.Divergence) { e.alerts = append(e.alerts, d) }})
	require.NoError(t, err)
	_, err = merchants.Create(e.ctx, e.pool, merchant, "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(e.ctx, e.pool, merchants.Funding{MerchantID: merchant, Amount: money.MustParse("1000.00", "BRL"),
		Key: "initial", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	return e
}

// payout creates a Pix payout of amount; fault, when set, is applied to its
// first call. It is not executed.
func (e *env) payout(amount string) (payouts.Payout, attempts.Attempt) {
	e.t.Helper()
	p, err := e.po.CreatePayout(e.ctx, payouts.PayoutRequest{MerchantID: merchant, Operation: providers.OpPixTransfer,
		Amount:      money.MustParse(amount, "BRL"),
		Destination: &providers.Destination{PixKey: &providers.PixKey{Type: payouts.PixKeyEmail, Value: "a@example.com"}}})
	require.NoError(e.t, err)
	a, err := e.att.Get(e.ctx, e.pool, *p.CurrentAttemptID)
	require.NoError(e.t, err)
	return p, a
}

// paid creates and executes a payout that succeeds.
func (e *env) paid(amount string) attempts.Attempt {
	e.t.Helper()
	_, a := e.payout(amount)
	r, err := e.att.Execute(e.ctx, a.ID)
	require.NoError(e.t, err)
	require.Equal(e.t, attempts.StatusSucceeded, r.Attempt.Status)
	return r.Attempt
}

// withFault creates and executes a payout whose call meets fault kind.
func (e *env) withFault(amount string, kind sim.FaultKind) (payouts.Payout, attempts.Attempt) {
	e.t.Helper()
	p, a := e.payout(amount)
	require.NoError(e.t, e.srv.AddFault(sim.FaultRule{Kind: kind, Reference: a.Reference, Times: 1}))
	r, err := e.att.Execute(e.ctx, a.ID)
	require.NoError(e.t, err)
	return p, r.Attempt
}

func (e *env) run() reconcile.Run {
	e.t.Helper()
	r, err := e.rec.Run(e.ctx, e.prov.Name(), day, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(e.t, err)
	require.Equal(e.t, "succeeded", r.Status)
	return r
}

func (e *env) all() []reconcile.Divergence {
	e.t.Helper()
	var out []reconcile.Divergence
	require.NoError(e.t, reconcile.Stream(e.ctx, e.pool, reconcile.Filter{}, func(d reconcile.Divergence) error {
		out = append(out, d)
		return nil
	}))
	return out
}

func byKind(ds []reconcile.Divergence) map[reconcile.Kind][]reconcile.Divergence {
	out := map[reconcile.Kind][]reconcile.Divergence{}
	for _, d := range ds {
		out[d.Kind] = append(out[d.Kind], d)
	}
	return out
}

// settles counts the payout_settle ledger transactions of an attempt.
func (e *env) settles(a attempts.Attempt) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM ledger_transactions
		WHERE cause_kind = 'payout_settle' AND cause_id = $1`, a.ID.String()).Scan(&n))
	return n
}
