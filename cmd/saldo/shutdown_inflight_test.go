package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// wireSim is a sim server behind a handler that reads each request's body
// whole before the sim sees it and counts the submits (POST
// /v1/operations) so read: a submit counted there was written whole by the
// client, so the call is on the wire (never not_sent, R1).
type wireSim struct {
	*sim.Server
	url     string
	submits atomic.Int32
}

func startWireSim(t *testing.T, cfg sim.Config) *wireSim {
	t.Helper()
	w := &wireSim{Server: sim.NewServer(cfg)}
	h := w.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if r.Method == http.MethodPost && r.URL.Path == "/v1/operations" {
			w.submits.Add(1)
		}
		h.ServeHTTP(rw, r)
	}))
	w.url = ts.URL
	// The sim first: it ends its slow requests, which the listener's Close
	// waits for.
	t.Cleanup(func() { w.Close(); ts.Close() })
	return w
}

// URL is the base URL of the counting handler.
func (w *wireSim) URL() string { return w.url }

// NewProvider is a provider calling the counting handler.
func (w *wireSim) NewProvider(opts ...sim.Option) *sim.Provider {
	return sim.NewProvider(w.url, append([]sim.Option{sim.WithConfig(w.Config())}, opts...)...)
}

// inflightPayout creates a funded merchant and one payout through e, and
// waits until its attempt's call is on the wire: the sim w has read its
// submit whole (a call count alone is not enough: the call is marked
// before it is sent, and a call cut off before it was written is not_sent).
func inflightPayout(t *testing.T, e *engine.Engine, w *wireSim) uuid.UUID {
	t.Helper()
	bg := context.Background()
	_, err := merchants.Create(bg, e.Pool, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(bg, e.Pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("100.00", "BRL"),
		Key: "f", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	p, err := e.Payouts.CreatePayout(bg, payouts.PayoutRequest{MerchantID: "m1", ClientKey: "k1",
		Operation: providers.OpPixTransfer, Amount: money.MustParse("10.00", "BRL"),
		Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "a@example.com"}}})
	require.NoError(t, err)
	id := *p.CurrentAttemptID
	require.Eventually(t, func() bool {
		a, err := e.Attempts.Get(bg, e.Pool, id)
		return err == nil && a.CallCount > 0 && w.submits.Load() > 0
	}, 30*time.Second, 10*time.Millisecond, "the payout's call reaches the provider")
	return id
}

// startProcess runs runProcess with a 1-second-connect, readTimeout-read
// provider and the given shutdown budget, and returns its engine.
func startProcess(t *testing.T, ctx context.Context, dbURL string, prov providers.Provider, budget time.Duration) (*engine.Engine, chan error) {
	t.Helper()
	ready := make(chan *engine.Engine, 1)
	done := make(chan error, 1)
	go func() {
		done <- runProcess(ctx, processConfig{DatabaseURL: dbURL, Listen: "127.0.0.1:0", RunAPI: true, RunWorkers: true,
			Providers: []providers.Provider{prov}, PayoutProvider: prov.Name(), MaxWorkers: 4,
			Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: budget,
			Attempts: attempts.Config{StaleCallAfter: 2 * time.Minute},
			Ready:    func(_ context.Context, e *engine.Engine, _ string) error { ready <- e; return nil }})
	}()
	select {
	case e := <-ready:
		return e, done
	case err := <-done:
		t.Fatalf("runProcess ended early: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("runProcess did not start")
	}
	return nil, nil
}

func attemptAfterStop(t *testing.T, dbURL string, prov providers.Provider, id uuid.UUID) attempts.Attempt {
	t.Helper()
	bg := context.Background()
	pool, err := pgxpool.New(bg, dbURL) // the process's pool is closed now
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	att, err := attempts.New(attempts.Config{Pool: pool, Providers: map[string]providers.Provider{prov.Name(): prov}})
	require.NoError(t, err)
	got, err := att.Get(bg, pool, id)
	require.NoError(t, err)
	return got
}

// The first SIGTERM stops gracefully: in-flight provider calls finish and
// record their real answer within the shutdown budget (R1, R11; runProcess;
// docs/pitfalls.md, "River's start context is its jobs' context"). River
// treats a cancelled start context as StopAndCancel, so it is started on one
// the signal does not cancel (engine.Start) and stopped by Engine.Stop.
func TestFirstSignalLetsInFlightProviderCallFinish(t *testing.T) {
	dbURL := testdb.NewURL(t)
	srv := startWireSim(t, sim.Config{Seed: 7})
	// The submit takes 1.5 s; the read timeout is 5 s, the shutdown budget 20 s.
	require.NoError(t, srv.AddFault(sim.FaultRule{Kind: sim.FaultSlow, Delay: sim.Duration(1500 * time.Millisecond)}))
	prov := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 5 * time.Second}))

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	e, done := startProcess(t, ctx, dbURL, prov, 20*time.Second)
	id := inflightPayout(t, e, srv)

	stop() // the first SIGTERM: a graceful stop with a 20 s budget
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(40 * time.Second):
		t.Fatal("runProcess did not stop")
	}
	got := attemptAfterStop(t, dbURL, prov, id)
	t.Logf("after a graceful stop: status=%s last_error=%v", got.Status, got.LastError)
	require.Equal(t, attempts.StatusSucceeded, got.Status,
		"a graceful stop must let the 1.5 s call finish and record its answer; it was cut off instead")
}

// At the end of the shutdown budget a call still in flight is cancelled
// (a hard stop) and the process ends: the attempt is safe, unknown, and
// resolved by lookup later (R1, R14).
func TestShutdownBudgetCancelsInFlightProviderCall(t *testing.T) {
	dbURL := testdb.NewURL(t)
	srv := startWireSim(t, sim.Config{Seed: 7})
	// The submit takes 30 s, within the read timeout (60 s), past the budget (1 s).
	require.NoError(t, srv.AddFault(sim.FaultRule{Kind: sim.FaultSlow, Delay: sim.Duration(30 * time.Second)}))
	prov := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: time.Minute}))

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	e, done := startProcess(t, ctx, dbURL, prov, time.Second)
	id := inflightPayout(t, e, srv)

	stop()
	start := time.Now()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("runProcess did not stop at the end of its 1 s budget")
	}
	require.Less(t, time.Since(start), 10*time.Second)
	got := attemptAfterStop(t, dbURL, prov, id)
	t.Logf("after the budget: status=%s last_error=%v", got.Status, got.LastError)
	require.Equal(t, attempts.StatusUnknown, got.Status, "a call cut off at the budget's end is unknown")
}

// `saldo serve` waits for an in-flight call on the first SIGTERM and stops
// at once on the second (runProcess).
func TestServeSecondSignalStopsAtOnce(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	dbURL := testdb.NewURL(t)
	secret := randomHex(16)
	srv := startWireSim(t, sim.Config{Seed: 7, WebhookSecret: secret})
	// The submit takes 12 s (the sim's server waits that long on Close).
	require.NoError(t, srv.AddFault(sim.FaultRule{Kind: sim.FaultSlow, Delay: sim.Duration(12 * time.Second)}))
	// Read timeout 50 s: the default budget is 3 + 5 + 50 + 10 = 68 s.
	p := startServe(t, bin, dbURL, srv.URL(), secret, "api,workers", "--provider-read-timeout", "50s", "--stale-call-after", "2m")

	// An insert-only engine on the same database creates the payout; the
	// serve process's workers send it.
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	defer pool.Close()
	prov := srv.NewProvider()
	e, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{prov}, PayoutProvider: prov.Name()})
	require.NoError(t, err)
	inflightPayout(t, e, srv)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.done:
		t.Fatalf("saldo serve stopped on the first SIGTERM with a call in flight (%v):\n%s", err, p.logText())
	case <-time.After(2 * time.Second):
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
		p.mu.Lock()
		logs := p.logs.String()
		p.mu.Unlock()
		require.Contains(t, logs, "second signal: stopping at once")
		require.Contains(t, logs, `"msg":"stopped"`)
	case <-time.After(15 * time.Second):
		t.Fatal("saldo serve did not stop on the second SIGTERM")
	}
}
