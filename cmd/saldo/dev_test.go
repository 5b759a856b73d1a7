package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/pgcluster"
)

// `saldo dev` is the README's run command: on a machine with the PostgreSQL
// binaries it starts a throwaway cluster, the sim, the API and the workers,
// prints keys and curl commands that work as printed, and Ctrl-C removes
// everything.
func TestDevRunsTheDemoAndCleansUp(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	cmd := exec.Command(bin, "dev", "--listen", "127.0.0.1:0", "--log-level", "info")
	cmd.Env = append(os.Environ(), "SALDO_DATABASE_URL=") // the throwaway path, not an outside database
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	errText := make(chan string, 1)
	go func() { b, _ := io.ReadAll(stderr); errText <- string(b) }()

	// Read the banner up to the last command it prints.
	var banner strings.Builder
	sc := bufio.NewScanner(stdout)
	deadline := time.After(90 * time.Second)
	lines := make(chan string)
	go func() {
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
read:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("saldo dev exited before printing its banner:\n%s\n%s", banner.String(), <-errText)
			}
			banner.WriteString(l + "\n")
			if strings.Contains(l, "/v1/ledger/transactions") {
				break read
			}
		case <-deadline:
			t.Fatalf("no banner from saldo dev:\n%s", banner.String())
		}
	}
	go func() {
		for range lines {
		}
	}()
	out := banner.String()
	base := regexp.MustCompile(`API\s+(http://\S+)`).FindStringSubmatch(out)
	key := regexp.MustCompile(`export MERCHANT_KEY=(\S+)`).FindStringSubmatch(out)
	auditor := regexp.MustCompile(`export AUDITOR_KEY=(\S+)`).FindStringSubmatch(out)
	simURL := regexp.MustCompile(`simulated PSP\s+(http://\S+)`).FindStringSubmatch(out)
	require.NotNil(t, base, out)
	require.NotNil(t, key, out)
	require.NotNil(t, auditor, out)
	require.NotNil(t, simURL, out)

	client := &http.Client{Timeout: 20 * time.Second}
	do := func(method, url, bearer, idem, body string) (int, map[string]any) {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		require.NoError(t, err)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		if idem != "" {
			req.Header.Set("Idempotency-Key", idem)
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	// The printed demo: a transfer, then one whose call hangs past the read
	// timeout after the PSP recorded it.
	transfer := `{"amount":"25.00","currency":"BRL","destination":{"pix_key":{"type":"email","value":"ana@example.com"}}}`
	code, _ := do(http.MethodPost, base[1]+"/v1/merchants/demo/pix-transfers", key[1], "demo-1", transfer)
	require.Equal(t, http.StatusCreated, code)
	resp, err := client.Post(simURL[1]+"/sim/faults", "application/json", strings.NewReader(`{"kind":"hang_after","times":1}`))
	require.NoError(t, err)
	resp.Body.Close()
	hang := `{"amount":"40.00","currency":"BRL","destination":{"pix_key":{"type":"email","value":"joao@example.com"}}}`
	code, _ = do(http.MethodPost, base[1]+"/v1/merchants/demo/pix-transfers", key[1], "demo-2", hang)
	require.Equal(t, http.StatusCreated, code)

	require.Eventually(t, func() bool {
		_, b := do(http.MethodGet, base[1]+"/v1/merchants/demo/balances", key[1], "", "")
		bs, _ := b["balances"].([]any)
		if len(bs) != 1 {
			return false
		}
		m := bs[0].(map[string]any)
		return m["available"] == "9935.00" && m["reserved"] == "0.00"
	}, 60*time.Second, 200*time.Millisecond, "both payouts settle: 10000.00 - 25.00 - 40.00, nothing left reserved")
	code, ledger := do(http.MethodGet, base[1]+"/v1/ledger/transactions", auditor[1], "", "")
	require.Equal(t, http.StatusOK, code)
	require.NotEmpty(t, ledger)

	// Ctrl-C: a clean stop that removes the throwaway cluster.
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		logs := <-errText
		require.NoError(t, err, logs)
		// With local PostgreSQL binaries (this machine), the cluster's
		// directory is gone; with a container instead, the container is.
		dir := regexp.MustCompile(`throwaway PostgreSQL"? dir=(\S+)`).FindStringSubmatch(logs)
		if _, err := pgcluster.FindBinaries(); err != nil {
			return // no local binaries: dev used a container, removed by testcontainers
		}
		require.NotNil(t, dir, logs)
		_, statErr := os.Stat(dir[1])
		require.True(t, os.IsNotExist(statErr), "the data directory %s is removed", dir[1])
	case <-time.After(40 * time.Second):
		t.Fatal("saldo dev did not stop on SIGINT")
	}
}
