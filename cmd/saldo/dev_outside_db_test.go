package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
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
		d, ok := startDevOn(t, bin, dbURL)
		if !ok {
			<-d.done
			t.Fatalf("run %d: saldo dev exited before its banner:\n%s", run, d.stderr.String())
		}
		d.stop(t)
	}
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	defer pool.Close()
	var kinds []string
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT array_agg(kind ORDER BY id) FROM provider_identity_events WHERE name = 'sim'`).Scan(&kinds))
	require.Equal(t, []string{"recorded", "repointed"}, kinds)
}

// devProc is a running `saldo dev`.
type devProc struct {
	cmd    *exec.Cmd
	done   chan struct{}
	stderr *lockedBuffer
}

// lockedBuffer is a strings.Builder the process's output copier writes
// while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startDevOn starts `saldo dev` on dbURL and waits for its banner; ok
// is false when it exited first (refused to start).
func startDevOn(t *testing.T, bin, dbURL string) (*devProc, bool) {
	t.Helper()
	cmd := exec.Command(bin, "dev", "--listen", "127.0.0.1:0", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "SALDO_DATABASE_URL="+dbURL)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	d := &devProc{cmd: cmd, done: make(chan struct{}), stderr: &lockedBuffer{}}
	cmd.Stderr = d.stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
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
		close(d.done)
	}()
	select {
	case ok := <-banner:
		return d, ok
	case <-time.After(90 * time.Second):
		t.Fatalf("no banner from saldo dev:\n%s", d.stderr.String())
		return d, false
	}
}

// stop ends the dev with SIGTERM and waits for it.
func (d *devProc) stop(t *testing.T) {
	t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(60 * time.Second):
		_ = d.cmd.Process.Kill()
		t.Fatalf("saldo dev did not stop within 60s:\n%s", d.stderr.String())
	}
}
