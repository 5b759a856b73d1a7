package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers/sim"
)

// buildSaldo compiles this command once per test binary.
var buildSaldo = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "saldo-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "saldo")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v: %s", err, out)
	}
	return bin, nil
})

// serveProc is one `saldo serve` child process.
type serveProc struct {
	cmd     *exec.Cmd
	base    string
	metrics string // the --metrics-listen base URL, when given
	done    chan error
	logs    *bytes.Buffer
	mu      *sync.Mutex

	addr, metricsAddr chan string // from the log, until waitListening
}

// logText is the process's log so far.
func (p *serveProc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

func startServe(t *testing.T, bin, dbURL, simURL, secret, roles string, extra ...string) *serveProc {
	t.Helper()
	p := launchServe(t, bin, dbURL, simURL, secret, roles, extra...)
	p.waitListening(t)
	return p
}

// launchServe starts `saldo serve` as startServe does, without waiting for
// its API: its log can be watched meanwhile (logText); waitListening waits.
func launchServe(t *testing.T, bin, dbURL, simURL, secret, roles string, extra ...string) *serveProc {
	t.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--sim-url", simURL, "--roles", roles,
		"--provider-read-timeout", "2s", "--stale-call-after", "30s", "--max-workers", "10", "--log-level", "info"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "SALDO_DATABASE_URL="+dbURL, "SALDO_SIM_WEBHOOK_SECRET="+secret)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	addr := make(chan string, 1)
	metricsAddr := make(chan string, 1)
	p := &serveProc{cmd: cmd, done: make(chan error, 1), logs: &bytes.Buffer{}, mu: &sync.Mutex{}, addr: addr,
		metricsAddr: metricsAddr}
	// Wait closes the pipe once the process exits, so it is called only
	// after every line has been read (os/exec): else the last lines (a
	// shutdown's "stopped") may be lost to a test that reads the logs on
	// exit.
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "api listening" {
				addr <- rec.Addr
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "metrics listening" {
				metricsAddr <- rec.Addr
			}
		}
	}()
	go func() {
		<-scanned
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	return p
}

// waitListening waits until the process's API listens (p.base) and takes
// its metrics address if it has logged one.
func (p *serveProc) waitListening(t *testing.T) {
	t.Helper()
	select {
	case a := <-p.addr:
		p.base = "http://" + a
	case err := <-p.done:
		t.Fatalf("saldo serve exited early: %v\n%s", err, p.logText())
	case <-time.After(60 * time.Second):
		t.Fatalf("saldo serve did not start:\n%s", p.logText())
	}
	select {
	case a := <-p.metricsAddr:
		p.metrics = "http://" + a
	default:
	}
}

// Three `saldo serve` processes on one database share the work through
// River, and each stops gracefully on SIGTERM. Every payout reaches a final
// status, nobody is paid twice, and the audit is clean.
func TestThreeServeProcessesShareTheWork(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	ctx := context.Background()
	dbURL := testdb.NewURL(t)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()

	secret := "whsec_test"
	srv := sim.NewServer(sim.Config{Seed: 3, WebhookSecret: secret, HangFor: 5 * time.Second,
		Faults: []sim.FaultRule{{Kind: sim.FaultHangAfter, Nth: 3}, {Kind: sim.FaultErrorAfter, Nth: 7}}}).Start()
	defer srv.Close()

	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("1000.00", "BRL"),
		Key: "seed", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	_, key, err := api.CreateKey(ctx, pool, api.RoleMerchant, "m1", "test", time.Now())
	require.NoError(t, err)

	// Two processes run the API and the workers; the third runs workers
	// only (and still serves /metrics).
	procs := []*serveProc{
		startServe(t, bin, dbURL, srv.URL(), secret, "api,workers"),
		startServe(t, bin, dbURL, srv.URL(), secret, "api,workers"),
		startServe(t, bin, dbURL, srv.URL(), secret, "workers"),
	}
	client := &http.Client{Timeout: 30 * time.Second}
	// /metrics on --listen asks for an operations key.
	status, _ := scrapeAs(t, procs[2].base+"/metrics", metricsKey(t, dbURL))
	require.Equal(t, http.StatusOK, status)
	resp, err := client.Get(procs[2].base + "/v1/merchants/m1/payouts")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "a workers-only process serves no API")
	for i := range 30 {
		p := procs[i%2]
		body := `{"amount":"10.00","currency":"BRL","destination":{"pix_key":{"type":"email","value":"ana@example.com"}}}`
		req, err := http.NewRequest(http.MethodPost, p.base+"/v1/merchants/m1/pix-transfers", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Idempotency-Key", fmt.Sprintf("three-%d", i))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)
	}
	require.Eventually(t, func() bool {
		var open int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM payouts WHERE status = 'processing'`).Scan(&open))
		return open == 0
	}, 90*time.Second, 100*time.Millisecond, "every payout reaches a final status")

	var workers int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(DISTINCT w) FROM river_job, unnest(attempted_by) w
		WHERE kind = 'attempts.submit'`).Scan(&workers))
	require.GreaterOrEqual(t, workers, 2, "submit jobs were worked by more than one process")

	for _, p := range procs {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	}
	for _, p := range procs {
		select {
		case err := <-p.done:
			p.mu.Lock()
			logs := p.logs.String()
			p.mu.Unlock()
			require.NoError(t, err, "graceful stop exits 0:\n%s", logs)
			require.Contains(t, logs, `"msg":"stopped"`)
		case <-time.After(40 * time.Second):
			t.Fatal("saldo serve did not stop on SIGTERM")
		}
	}
	require.Empty(t, srv.Duplicates())
	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

// serve refuses to start, with a message naming each problem, on bad or
// missing configuration.
func TestServeRefusesBadConfiguration(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	cmd := exec.Command(bin, "serve", "--roles", "api,cron", "--provider-read-timeout", "1s", "--stale-call-after", "1s",
		"--route", "card_charge=sim,refund=sim", "--payout-max-attempts", "0", "--resolve-schedule", "30s,soon",
		"--unanswered-review-after", "0s", "--completed-jobs-kept", "0s")
	cmd.Env = append(os.Environ(), "SALDO_DATABASE_URL=", "SALDO_SIM_URL=", "SALDO_MAX_WORKERS=many")
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	for _, want := range []string{"refusing to start", "no database", `unknown role "cron"`, "no provider configured",
		"--stale-call-after", `SALDO_MAX_WORKERS="many" is not a whole number`,
		"--route: providers: refunds are not routed", "--payout-max-attempts must be at least 1",
		`--resolve-schedule: "soon" is not a positive duration`,
		"--max-lookups must be at least 1, --unanswered-review-after and --processing-review-after positive",
		"--completed-jobs-kept must be positive"} {
		require.Contains(t, string(out), want)
	}
}
