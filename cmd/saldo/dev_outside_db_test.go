package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
)

// `saldo dev` on an outside database (SALDO_DATABASE_URL) starts again
// after a stop: its embedded sim is another PSP each run (a new port, no
// memory), and dev re-points the name "sim" itself when nothing is open at
// the earlier one (R16). A re-point is recorded like any other.
func TestDevStartsAgainOnItsOutsideDatabase_R16(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	dbURL := testdb.NewURL(t)
	for run := 1; run <= 2; run++ {
		runDevUntilBanner(t, bin, dbURL, run)
	}
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	defer pool.Close()
	var kinds []string
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT array_agg(kind ORDER BY id) FROM provider_identity_events WHERE name = 'sim'`).Scan(&kinds))
	require.Equal(t, []string{"recorded", "repointed"}, kinds)
}

// runDevUntilBanner starts `saldo dev` on dbURL, waits for its banner and
// stops it with SIGTERM.
func runDevUntilBanner(t *testing.T, bin, dbURL string, run int) {
	t.Helper()
	cmd := exec.Command(bin, "dev", "--listen", "127.0.0.1:0", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "SALDO_DATABASE_URL="+dbURL)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
		}
	}()
	banner := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		seen := false
		for sc.Scan() {
			if !seen && strings.Contains(sc.Text(), "/v1/ledger/transactions") {
				seen = true
				banner <- true
			}
		}
		if !seen {
			banner <- false
		}
		_ = cmd.Wait()
		close(done)
	}()
	select {
	case ok := <-banner:
		if !ok {
			<-done
			t.Fatalf("run %d: saldo dev exited before its banner:\n%s", run, stderr.String())
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("run %d: no banner from saldo dev:\n%s", run, stderr.String())
	}
}
