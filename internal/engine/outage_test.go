package engine_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// Issue 20 end to end through River: payouts created during a PSP outage
// (connections refused for a while, then the first calls answered 503
// before processing) succeed after it
// without any client action: each attempt caught in the outage goes
// unknown, its lookup proves past the consistency window that nothing was
// done, the payout's next attempt (new key) takes over the reserve and
// succeeds. Each payout has exactly one provider-side operation and one
// reserve movement per attempt; reserves end at zero; audit clean.
func TestPayoutsRideOutAnOutageThroughRiver_R16_R22(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	srv := sim.NewServer(sim.Config{Seed: 601}).Start()
	t.Cleanup(srv.Close)
	const n = 8
	// The outage: first the PSP refuses connections (nothing listens on its
	// address), then, once it listens again, it answers 503 to the first n
	// calls.
	require.NoError(t, srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Times: n}))
	down := newForwarder(t, srv.URL())
	down.refuse()
	prov := sim.NewProvider(down.url(), sim.WithConfig(srv.Config()),
		sim.WithHTTPSettings(providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 2 * time.Second}))
	e, err := engine.New(engine.Config{
		Pool: pool, Providers: []providers.Provider{prov}, PayoutProvider: prov.Name(),
		RunWorkers: true, MaxWorkers: 20, FetchPollInterval: 20 * time.Millisecond,
		PayoutRetry: payouts.RetryPolicy{MaxAttempts: 3, Within: time.Hour, Backoff: 100 * time.Millisecond},
		Attempts: attempts.Config{SendBackoffBase: 20 * time.Millisecond, SendBackoffMax: 100 * time.Millisecond,
			ResolveSchedule: []time.Duration{300 * time.Millisecond, 500 * time.Millisecond}, StaleCallAfter: 10 * time.Second},
	})
	require.NoError(t, err)
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, e.Stop(stopCtx))
	})
	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("100.00", "BRL"),
		Key: "seed", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	var ps []payouts.Payout
	for i := range n {
		p, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", ClientKey: fmt.Sprint(i),
			Operation: providers.OpPixTransfer, Amount: money.MustParse("2.00", "BRL"),
			Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: fmt.Sprintf("p%d@example.com", i)}}})
		require.NoError(t, err)
		ps = append(ps, p)
	}
	time.Sleep(time.Second) // refused connections: the attempts wait, nothing fails
	for _, p := range ps {
		v, err := e.Payouts.Get(ctx, "m1", p.ID)
		require.NoError(t, err)
		require.Equal(t, payouts.StatusProcessing, v.Status)
	}
	require.Empty(t, srv.AllOperations(), "nothing reached the PSP while it refused connections")
	down.accept()
	deadline := time.Now().Add(60 * time.Second)
	for {
		left := 0
		for _, p := range ps {
			v, err := e.Payouts.Get(ctx, "m1", p.ID)
			require.NoError(t, err)
			require.NotEqual(t, payouts.StatusFailed, v.Status, "payout %s failed: %s %s", p.ID, v.FailureCode, v.FailureReason)
			if v.Status != payouts.StatusSucceeded {
				left++
			}
		}
		if left == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d payouts still processing", left)
		time.Sleep(50 * time.Millisecond)
	}
	retried := 0
	for _, p := range ps {
		v, err := e.Payouts.Get(ctx, "m1", p.ID)
		require.NoError(t, err)
		moving := 0
		for _, a := range v.Attempts {
			moving += len(srv.Operations(a.Reference))
		}
		require.Equal(t, 1, moving, "payout %s: one provider-side operation", p.ID)
		if v.AttemptCount > 1 {
			retried++
		}
	}
	require.Equal(t, n, retried, "every payout caught in the outage got its next attempt by itself")
	var carries int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ledger_transactions WHERE cause_kind = $1`,
		payouts.CauseReserveCarry).Scan(&carries))
	require.Equal(t, n, carries)
	bal, err := ledger.MerchantBalanceIn(ctx, pool, "m1", money.BRL)
	require.NoError(t, err)
	require.Equal(t, "84.00", bal.Available.StringFixed(2))
	require.Equal(t, "0.00", bal.Reserved.StringFixed(2))
	require.Empty(t, srv.Duplicates())
	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

// forwarder is a TCP forwarder to a PSP that can refuse connections (its
// listener closed) and accept them again on the same address.
type forwarder struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
}

func newForwarder(t *testing.T, targetURL string) *forwarder {
	t.Helper()
	u, err := url.Parse(targetURL)
	require.NoError(t, err)
	f := &forwarder{t: t, target: u.Host}
	f.accept()
	f.addr = f.ln.Addr().String()
	t.Cleanup(f.refuse)
	return f
}

func (f *forwarder) url() string { return "http://" + f.addr }

// accept listens (again) and forwards every connection.
func (f *forwarder) accept() {
	f.mu.Lock()
	defer f.mu.Unlock()
	addr := f.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	require.NoError(f.t, err)
	f.ln = ln
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", f.target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c) }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
}

// refuse closes the listener: connecting is refused.
func (f *forwarder) refuse() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != nil {
		f.ln.Close()
		f.ln = nil
	}
}
