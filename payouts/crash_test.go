package payouts_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// The crash tests run a real second process (this test binary re-executed
// in child mode) that opens a payout and talks to the provider, and kill it
// with SIGKILL between phases. The parent then plays the restarted process.
const (
	childModeEnv = "SALDO_PAYOUTS_CRASH_CHILD"
	childDBEnv   = "SALDO_PAYOUTS_CRASH_DB"
	childSimEnv  = "SALDO_PAYOUTS_CRASH_SIM"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childModeEnv); mode != "" {
		if err := crashChild(mode, os.Getenv(childDBEnv), os.Getenv(childSimEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// crashChild opens a payout (phase 1) and, in mode "mid-call", calls the
// provider (phase 2), which the parent arranges to hang; the parent kills
// this process while the call is in flight. In mode "after-open" it exits
// right after the opening transaction committed, before any call.
func crashChild(mode, dbURL, simURL string) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	clock := sim.NewManualClock(t0)
	caps, err := sim.FetchCapabilities(ctx, simURL, providers.HTTPSettings{})
	if err != nil {
		return err
	}
	prov := sim.NewProvider(simURL, sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: time.Minute}), sim.WithCapabilities(caps))
	att, err := attempts.New(attempts.Config{Pool: pool, Clock: clock, Providers: map[string]providers.Provider{prov.Name(): prov}})
	if err != nil {
		return err
	}
	svc, err := payouts.New(payouts.Config{Pool: pool, Attempts: att, Provider: prov.Name(), Clock: clock})
	if err != nil {
		return err
	}
	if mode == "batch-mid-call" {
		return crashChildBatch(ctx, att, svc)
	}
	p, err := svc.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: merchant, ClientKey: "crash-1",
		Operation: providers.OpPixTransfer, Amount: brl("42.00"), Destination: pixTo("joao@example.com")})
	if err != nil {
		return err
	}
	fmt.Printf("payout %s %s\n", p.ID, p.CurrentAttemptID)
	if mode == "after-open" {
		os.Exit(0) // the process ends between phase 1 and phase 2
	}
	fmt.Println("calling")
	_, err = att.Execute(ctx, *p.CurrentAttemptID) // the parent kills us during this call
	return fmt.Errorf("call returned before the kill: %v", err)
}

// crashBatch is how many payouts the batch child opens and sends at once.
const crashBatch = 12

// crashChildBatch opens crashBatch payouts concurrently (their opening
// transactions group-committed), prints them, then executes them all at
// once (first sends marked in flight together); the parent kills this
// process while every call hangs at the provider.
func crashChildBatch(ctx context.Context, att *attempts.Service, svc *payouts.Service) error {
	ps := make([]payouts.Payout, crashBatch)
	errs := make(chan error, crashBatch)
	var wg sync.WaitGroup
	for i := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			ps[i], err = svc.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: merchant, ClientKey: fmt.Sprintf("crash-%d", i),
				Operation: providers.OpPixTransfer, Amount: brl("5.00"), Destination: pixTo("joao@example.com")})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	for _, p := range ps {
		fmt.Printf("payout %s %s\n", p.ID, p.CurrentAttemptID)
	}
	for _, p := range ps {
		go att.Execute(ctx, *p.CurrentAttemptID) //nolint:errcheck // the parent kills us during these calls
	}
	select {}
}

// runChild starts the child and returns the payout id it printed; the child
// is left running (mid-call) or has exited (after-open).
func runChild(t *testing.T, mode, dbURL, simURL string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childModeEnv+"="+mode, childDBEnv+"="+dbURL, childSimEnv+"="+simURL)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(out)
	require.True(t, sc.Scan(), "child printed nothing")
	fields := strings.Fields(sc.Text())
	require.Len(t, fields, 3, sc.Text())
	go func() {
		for sc.Scan() {
		}
	}()
	return cmd, fields[1]
}

func crashEnv(t *testing.T, cfg sim.Config) (*env, string) {
	t.Helper()
	ctx := context.Background()
	url := testdb.NewURL(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	e := &env{t: t, ctx: ctx, pool: pool, clock: sim.NewManualClock(t0)}
	cfg.Clock = e.clock.Now
	e.srv = sim.NewServer(cfg).Start()
	t.Cleanup(e.srv.Close)
	e.prov = e.srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: simReadTimeout}))
	e.att, err = attempts.New(attempts.Config{Pool: pool, Clock: e.clock, Providers: map[string]providers.Provider{e.prov.Name(): e.prov}})
	require.NoError(t, err)
	e.svc, err = payouts.New(payouts.Config{Pool: pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock})
	require.NoError(t, err)
	_, err = merchants.Create(ctx, pool, merchant, "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: merchant, Amount: brl("100.00"), Key: "k", Reason: "r", Actor: "t"})
	require.NoError(t, err)
	t.Cleanup(e.auditClean)
	return e, url
}

// Crash after the opening transaction, before any call: the restarted
// process sends with the SAME key and payload; one operation at the provider.
func TestCrashAfterOpenSendsOnceWithSameKey(t *testing.T) {
	t.Parallel()
	for _, noKeys := range []bool{false, true} {
		t.Run(fmt.Sprintf("noIdempotency=%v", noKeys), func(t *testing.T) {
			t.Parallel()
			e, url := crashEnv(t, sim.Config{NoIdempotency: noKeys})
			cmd, id := runChild(t, "after-open", url, e.srv.URL())
			require.NoError(t, cmd.Wait())
			p := e.get(payouts.Payout{ID: id}).Payout
			av, res := e.balances()
			require.Equal(t, "58.00", av, "the reserve committed with the open")
			require.Equal(t, "42.00", res)
			a := e.execute(p)
			require.Equal(t, attempts.StatusSucceeded, a.Status)
			require.Equal(t, 1, e.opsFor(a))
			require.Equal(t, payouts.StatusSucceeded, e.get(p).Status)
		})
	}
}

// Crash after the request left and the provider recorded it, before the
// result was recorded: the restarted process must NOT send again (not with
// the same key, and never with another); the attempt becomes unknown and is
// resolved by lookup. With a provider that ignores idempotency keys a blind
// re-send would pay twice (R20): the oracle proves it did not happen.
func TestCrashMidCallNeverResends(t *testing.T) {
	t.Parallel()
	for _, noKeys := range []bool{false, true} {
		t.Run(fmt.Sprintf("noIdempotency=%v", noKeys), func(t *testing.T) {
			t.Parallel()
			e, url := crashEnv(t, sim.Config{NoIdempotency: noKeys, HangFor: 30 * time.Second,
				Faults: []sim.FaultRule{{Kind: sim.FaultHangAfter, Times: 1}}})
			cmd, id := runChild(t, "mid-call", url, e.srv.URL())
			require.Eventually(t, func() bool { return len(e.srv.AllOperations()) == 1 }, 20*time.Second, 10*time.Millisecond,
				"the provider recorded the transfer")
			require.NoError(t, cmd.Process.Kill())
			_ = cmd.Wait()

			p := e.get(payouts.Payout{ID: id}).Payout
			a := e.attempt(p)
			require.Equal(t, attempts.StatusPending, a.Status)
			require.True(t, a.CallInFlight(), "phase 2 left durable evidence of the call")

			a = e.execute(p) // the restarted worker picks the job up
			require.Equal(t, attempts.StatusUnknown, a.Status, "a call that may have left is unknown, never re-sent")
			require.Equal(t, 1, a.CallCount)
			av, res := e.balances()
			require.Equal(t, "58.00", av)
			require.Equal(t, "42.00", res, "unknown holds the reserve (R22)")

			r := e.resolveAfter(p, 31*time.Second)
			for i := 0; i < 10 && r.Attempt.Status == attempts.StatusUnknown; i++ {
				r = e.resolveAfter(p, r.RetryIn+time.Second)
			}
			require.Equal(t, attempts.StatusSucceeded, r.Attempt.Status)
			require.Equal(t, 1, e.opsFor(a), "exactly one operation at the provider")
			require.Len(t, e.srv.AllOperations(), 1)
			res2, err := audit.Run(e.ctx, e.pool)
			require.NoError(t, err)
			require.True(t, res2.OK(), res2.Summary())
		})
	}
}

// Crash with a batch in flight: a process opens crashBatch payouts at once
// (group-committed) and sends them all at once (first sends marked in flight
// by one statement), and is killed while every call hangs after the
// provider recorded it. The restarted process finds each call in flight,
// never re-sends (with or without provider idempotency keys, R20), resolves
// each by lookup, and the provider holds exactly one operation per payout.
func TestCrashMidBatchNeverResends(t *testing.T) {
	t.Parallel()
	for _, noKeys := range []bool{false, true} {
		t.Run(fmt.Sprintf("noIdempotency=%v", noKeys), func(t *testing.T) {
			t.Parallel()
			e, url := crashEnv(t, sim.Config{NoIdempotency: noKeys, HangFor: 30 * time.Second,
				Faults: []sim.FaultRule{{Kind: sim.FaultHangAfter}}})
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childModeEnv+"=batch-mid-call", childDBEnv+"="+url, childSimEnv+"="+e.srv.URL())
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			sc := bufio.NewScanner(out)
			var ids []string
			for len(ids) < crashBatch && sc.Scan() {
				fields := strings.Fields(sc.Text())
				require.Len(t, fields, 3, sc.Text())
				ids = append(ids, fields[1])
			}
			require.Len(t, ids, crashBatch, "the child opened every payout")
			require.Eventually(t, func() bool { return len(e.srv.AllOperations()) == crashBatch }, 20*time.Second,
				10*time.Millisecond, "the provider recorded every transfer")
			require.NoError(t, cmd.Process.Kill())
			_ = cmd.Wait()

			var opened int
			require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(DISTINCT xmin::text) FROM payouts`).Scan(&opened))
			require.Less(t, opened, crashBatch, "the payouts were opened in shared transactions")
			av, res := e.balances()
			require.Equal(t, "40.00", av)
			require.Equal(t, "60.00", res, "every reserve committed with its open")

			var wg sync.WaitGroup
			for _, id := range ids {
				p := e.get(payouts.Payout{ID: id}).Payout
				a := e.attempt(p)
				require.Equal(t, attempts.StatusPending, a.Status)
				require.True(t, a.CallInFlight(), "the batched mark left durable evidence of each call")
				wg.Add(1)
				go func() { // the restarted workers, all at once
					defer wg.Done()
					_, err := e.att.Execute(e.ctx, a.ID)
					require.NoError(t, err)
				}()
			}
			wg.Wait()
			_, res = e.balances()
			require.Equal(t, "60.00", res, "unknown holds every reserve (R22)")
			e.clock.Advance(31 * time.Second)
			for _, id := range ids {
				p := e.get(payouts.Payout{ID: id}).Payout
				a := e.attempt(p)
				require.Equal(t, attempts.StatusUnknown, a.Status, "a call that may have left is unknown, never re-sent")
				require.Equal(t, 1, a.CallCount)
				r, err := e.att.Resolve(e.ctx, a.ID)
				require.NoError(t, err)
				for i := 0; i < 10 && r.Attempt.Status == attempts.StatusUnknown; i++ {
					r = e.resolveAfter(p, r.RetryIn+time.Second)
				}
				require.Equal(t, attempts.StatusSucceeded, r.Attempt.Status)
				require.Equal(t, 1, e.opsFor(a), "exactly one operation at the provider")
			}
			require.Len(t, e.srv.AllOperations(), crashBatch)
			av, res = e.balances()
			require.Equal(t, "40.00", av)
			require.Equal(t, "0.00", res)
		})
	}
}
