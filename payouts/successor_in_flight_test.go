package payouts_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// gatedProvider is the sim provider whose Submit for one reference waits,
// once, at a gate: the call is in flight (marked, unrecorded) for as long
// as the test wants.
type gatedProvider struct {
	*sim.Provider
	mu      sync.Mutex
	ref     string
	entered chan struct{}
	release chan struct{}
}

func (g *gatedProvider) gate(ref string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ref, g.entered, g.release = ref, make(chan struct{}), make(chan struct{})
}

func (g *gatedProvider) Submit(ctx context.Context, req providers.SubmitRequest) providers.SubmitResult {
	g.mu.Lock()
	gated := g.ref != "" && req.Reference == g.ref
	entered, release := g.entered, g.release
	if gated {
		g.ref = ""
	}
	g.mu.Unlock()
	if gated {
		close(entered)
		<-release
	}
	return g.Provider.Submit(ctx, req)
}

// setupGated is setup with the attempts core calling through a gatedProvider.
func setupGated(t *testing.T, balance string) (*env, *gatedProvider) {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, ctx: ctx, pool: testdb.New(t), clock: sim.NewManualClock(t0)}
	e.srv = sim.NewServer(sim.Config{Clock: e.clock.Now}).Start()
	t.Cleanup(e.srv.Close)
	e.prov = e.srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{
		ConnectTimeout: time.Second, ReadTimeout: simReadTimeout}))
	g := &gatedProvider{Provider: e.prov}
	var err error
	e.att, err = attempts.New(attempts.Config{Pool: e.pool, Clock: e.clock,
		Providers: map[string]providers.Provider{e.prov.Name(): g}})
	require.NoError(t, err)
	e.svc, err = payouts.New(payouts.Config{Pool: e.pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock})
	require.NoError(t, err)
	_, err = merchants.Create(ctx, e.pool, merchant, "Loja da Ana")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, e.pool, merchants.Funding{MerchantID: merchant, Amount: brl(balance),
		Key: "initial", Reason: "test funding", Actor: "test"})
	require.NoError(t, err)
	t.Cleanup(e.auditClean)
	return e, g
}

// R6, R9, R19: the retry policy opened attempt 2 after attempt 1 was failed
// by "not found". Attempt 2's first call is in flight when the provider's
// webhook says attempt 1 paid after all (a divergence): holdSiblings leaves
// an attempt in flight to the resolver. The call then comes back rate
// limited (429: nothing processed), so attempt 2 is pending again with a
// re-send scheduled. Booking the divergence (SettleDivergence) does not
// make it sendable: no attempt of a subject is sent once another diverged,
// settled or not (sendableSQL, as anyDiverged opens none); Execute holds it
// in review, and the recipient is paid once.
func TestSuccessorInFlightAtADivergenceIsNeverSent_R6_R9_R19(t *testing.T) {
	t.Parallel()
	e, g := setupGated(t, "100.00")
	e.withRetry(payouts.RetryPolicy{MaxAttempts: 3, Within: 24 * time.Hour, Backoff: 30 * time.Second})
	p, err := e.svc.CreatePayout(e.ctx, e.pix("10.00"))
	require.NoError(t, err)
	first := e.attempt(p)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: first.Reference}))
	require.Equal(t, attempts.StatusUnknown, e.execute(p).Status)
	require.Equal(t, attempts.StatusFailed, e.resolveAfter(p, time.Hour).Attempt.Status)
	second := e.attempt(e.get(p).Payout)
	require.NotEqual(t, first.ID, second.ID)

	// Attempt 2's first call: in flight at the gate, then a 429.
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultRateLimit, Reference: second.Reference,
		Times: 1, RetryAfter: sim.Duration(5 * time.Minute)}))
	g.gate(second.Reference)
	e.clock.Advance(time.Minute) // past the backoff
	done := make(chan attempts.ExecuteResult, 1)
	go func() {
		r, err := e.att.Execute(e.ctx, second.ID)
		if err != nil {
			t.Errorf("execute attempt 2: %v", err)
		}
		done <- r
	}()
	<-g.entered

	e.lateSuccess(first, "10.00") // attempt 1 paid after all: divergence, while attempt 2's call is in flight
	close(g.release)
	r := <-done
	require.Equal(t, attempts.StatusPending, r.Attempt.Status, "429: nothing processed, sent again later")
	sec, err := e.att.Get(e.ctx, e.pool, second.ID)
	require.NoError(t, err)
	t.Logf("attempt 2 after its 429: status %s review %v next_send_at %v", sec.Status, sec.Review, sec.NextSendAt)

	// The operator books the divergence (the provider did pay attempt 1).
	e.settleDivergence(first)

	e.clock.Advance(10 * time.Minute) // past the Retry-After
	r2, err := e.att.Execute(e.ctx, second.ID)
	require.NoError(t, err)
	t.Logf("attempt 2 after settlement: status %s review %v calls %d", r2.Attempt.Status, r2.Attempt.Review, r2.Attempt.CallCount)
	require.Zero(t, e.opsFor(second),
		"attempt 2 was sent after attempt 1 was known to have paid: the recipient is paid twice (R6, R9, R19)")
	require.True(t, r2.Attempt.Review, "attempt 2 waits for an operator, never sent")
}
