package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/pgcluster"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// devLeftovers lists the saldo-pg-* directories under tmp and, for each,
// whether a postmaster still runs from it; it stops such a postmaster and
// removes the directory (the test started them, through saldo dev).
func devLeftovers(t *testing.T, tmp string) []string {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(tmp, "saldo-pg-*"))
	var left []string
	for _, d := range dirs {
		what := d
		if b, err := os.ReadFile(filepath.Join(d, "data", "postmaster.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0]); err == nil && syscall.Kill(pid, 0) == nil {
				what += " (postmaster " + strconv.Itoa(pid) + " still running)"
				_ = syscall.Kill(pid, syscall.SIGQUIT) // immediate shutdown of the cluster saldo dev left
				for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}
		left = append(left, what)
		_ = os.RemoveAll(d)
	}
	return left
}

// `saldo dev` stopped by SIGTERM (Ctrl-C, a supervisor, a closed terminal)
// while it is still bringing up its throwaway PostgreSQL leaves nothing
// behind, as the README promises: pgcluster.Start removes the directory it
// made (and stops a postmaster pg_ctl already launched) when it fails, and
// dev says it was interrupted rather than that PostgreSQL is missing.
func TestDevSIGTERMDuringStartupLeavesNothingBehind(t *testing.T) {
	// No test may skip: CI installs the server binaries (.ci/run). Without
	// them `saldo dev` would use a container and this test would show
	// nothing, so it fails and says what is missing.
	if _, err := pgcluster.FindBinaries(); err != nil {
		t.Fatalf("this test needs the local PostgreSQL server binaries (.ci/run installs them: apt-get install postgresql): %v", err)
	}
	bin, err := buildSaldo()
	require.NoError(t, err)
	for _, c := range []struct {
		name    string
		trigger string // a path under the cluster dir whose appearance triggers the signal
	}{
		{"during initdb", ""},
		{"during pg_ctl start", "postgres.log"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tmp, err := os.MkdirTemp("", "saldo-cli-dev-")
			require.NoError(t, err)
			require.NoError(t, os.Chmod(tmp, 0o755)) // the postgres user reaches the cluster dir through it
			t.Cleanup(func() { devLeftovers(t, tmp); _ = os.RemoveAll(tmp) })

			cmd := exec.Command(bin, "dev", "--listen", "127.0.0.1:0", "--log-level", "info")
			cmd.Env = append(os.Environ(), "SALDO_DATABASE_URL=", "TMPDIR="+tmp)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			require.NoError(t, cmd.Start())
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()

			deadline := time.Now().Add(60 * time.Second)
			for {
				dirs, _ := filepath.Glob(filepath.Join(tmp, "saldo-pg-*"))
				if len(dirs) > 0 {
					if c.trigger == "" {
						time.Sleep(150 * time.Millisecond) // initdb is running
						break
					}
					if _, err := os.Stat(filepath.Join(dirs[0], c.trigger)); err == nil {
						// at once: pg_ctl has opened its log and is forking
						// the postmaster, which has not yet written its pid
						break
					}
				}
				if time.Now().After(deadline) {
					_ = cmd.Process.Kill()
					t.Fatalf("saldo dev made no cluster directory:\n%s", out.String())
				}
				time.Sleep(5 * time.Millisecond)
			}
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			select {
			case <-done:
			case <-time.After(90 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("saldo dev did not stop on SIGTERM:\n%s", out.String())
			}
			left := devLeftovers(t, tmp)
			require.Empty(t, left, "saldo dev stopped by SIGTERM %s left its throwaway cluster behind; output:\n%s", c.name, out.String())
		})
	}
}

// `saldo migrate` is "idempotent, safe to run concurrently": several
// instances of a deployment each run it at start, with SALDO_APP_ROLE and
// SALDO_READ_ONLY_ROLE set as the runbook says. The grants take the
// migrations' advisory lock (concurrent GRANTs on the same catalog rows
// fail with "tuple concurrently updated").
func TestMigrateWithRolesConcurrently(t *testing.T) {
	bin, err := buildSaldo()
	require.NoError(t, err)
	d := newTestDeployment(t, "cli_migrate", "app", "reader")
	app, reader := d.roles["app"], d.roles["reader"]
	ownerURL := d.url(t, "owner")
	migrate := func() (string, error) {
		cmd := exec.Command(bin, "migrate")
		cmd.Env = append(os.Environ(), "SALDO_DATABASE_URL="+ownerURL, "SALDO_APP_ROLE="+app, "SALDO_READ_ONLY_ROLE="+reader)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := migrate()
	require.NoError(t, err, out)

	const n = 6
	var failures []string
	for round := 0; round < 5 && len(failures) == 0; round++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := migrate()
				if err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("round %d: %v: %s", round, err, out))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	require.Empty(t, failures, "concurrent `saldo migrate` with SALDO_APP_ROLE/SALDO_READ_ONLY_ROLE set failed")
}

// runAuditVerify runs `saldo audit verify` against dbURL and returns its
// combined output and exit code.
func runAuditVerify(t *testing.T, bin, dbURL string, extra ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"audit", "verify"}, extra...)...)
	cmd.Env = append(os.Environ(), "SALDO_DATABASE_URL="+dbURL)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return string(out), code
}

// `saldo audit verify` through the binary exits 0 on a clean database with
// an open payout, and 1 with a report naming the area and kind once a
// payout's status lies about its attempt (an area added by audit_areas.go)
// and once a ledger balance is tampered with.
func TestAuditVerifyExitCodes(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	ctx := context.Background()
	dbURL := testdb.NewURL(t)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	srv := sim.NewServer(sim.Config{}).Start()
	t.Cleanup(srv.Close)
	prov := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: 5 * time.Second}))
	att, err := attempts.New(attempts.Config{Pool: pool, Providers: map[string]providers.Provider{prov.Name(): prov}})
	require.NoError(t, err)
	po, err := payouts.New(payouts.Config{Pool: pool, Attempts: att, Provider: prov.Name()})
	require.NoError(t, err)
	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("100.00", "BRL"),
		Key: "k", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	p, err := po.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount:      money.MustParse("10.00", "BRL"),
		Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "a@example.com"}}})
	require.NoError(t, err)

	out, code := runAuditVerify(t, bin, dbURL)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "audit verify: all invariants hold")

	admin, err := pgx.Connect(ctx, testdb.AdminURL(t, pool))
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `SET session_replication_role = replica`)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `UPDATE payouts SET status = 'succeeded' WHERE id = $1`, p.ID)
	require.NoError(t, err)
	out, code = runAuditVerify(t, bin, dbURL)
	require.Equal(t, 1, code, out)
	require.Regexp(t, `payouts +FAILED`, out)
	require.Contains(t, out, "VIOLATIONS FOUND")
	require.NotContains(t, out, "all invariants hold")

	_, err = admin.Exec(ctx, `UPDATE payouts SET status = 'processing' WHERE id = $1`, p.ID)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `UPDATE ledger_accounts SET balance = balance + 1 WHERE code = 'merchant/m1/available/BRL'`)
	require.NoError(t, err)
	out, code = runAuditVerify(t, bin, dbURL)
	require.Equal(t, 1, code, out)
	require.Regexp(t, `ledger +FAILED`, out)
	require.Contains(t, out, "balance_mismatch")
}

// `saldo keys create` refuses a merchant that does not exist, a merchant
// key without a merchant, another role with one and an unknown role,
// creating nothing; a key it creates is printed once and only its sha256 is
// stored.
func TestKeysCreateRefusesAndStoresOnlyTheHash(t *testing.T) {
	ctx := context.Background()
	dbURL := testdb.NewURL(t)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	for _, args := range [][]string{
		{"--role", "merchant", "--merchant", "nope"},
		{"--role", "merchant"},
		{"--role", "auditor", "--merchant", "m1"},
		{"--role", "root"},
		{"--role", "admin", "extra"},
	} {
		err := runKeys(ctx, append([]string{"create", "--database-url", dbURL}, args...))
		require.Error(t, err, "%v", args)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM api_keys`).Scan(&n))
	require.Zero(t, n)

	var runErr error
	out := captureStdout(t, func() {
		runErr = runKeys(ctx, []string{"create", "--database-url", dbURL, "--role", "merchant", "--merchant", "m1"})
	})
	require.NoError(t, runErr)
	m := regexp.MustCompile(`secret: (\S+)`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	var row string
	require.NoError(t, pool.QueryRow(ctx, `SELECT row_to_json(k)::text FROM api_keys k`).Scan(&row))
	require.NotContains(t, row, m[1])
	require.NotContains(t, row, strings.TrimPrefix(m[1], api.SecretPrefix))
	sum := sha256.Sum256([]byte(m[1]))
	var stored []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT secret_sha256 FROM api_keys`).Scan(&stored))
	require.Equal(t, sum[:], stored)
}

// A word after `audit verify` (an area name, say: `saldo audit verify
// ledger --database-url $PROD`) stops Go's flag parsing: the flags after it
// would be dropped and the audit run against SALDO_DATABASE_URL instead.
// It is refused, as keys, reconcile, serve, sim-provider and bench refuse
// unexpected arguments.
func TestAuditVerifyRefusesAStrayArgument(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	ctx := context.Background()
	clean := testdb.NewURL(t)
	brokenPool := testdb.New(t)
	broken := brokenPool.Config().ConnString()
	_, err = merchants.Create(ctx, brokenPool, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, brokenPool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("100.00", "BRL"),
		Key: "k", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	admin, err := pgx.Connect(ctx, testdb.AdminURL(t, brokenPool))
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `UPDATE ledger_accounts SET balance = balance + 1 WHERE code = 'merchant/m1/available/BRL'`)
	require.NoError(t, err)

	out, code := runAuditVerify(t, bin, clean, "--database-url", broken)
	require.Equal(t, 1, code, "sanity: the broken database fails its audit: %s", out)

	out, code = runAuditVerify(t, bin, clean, "ledger", "--database-url", broken)
	require.NotEqual(t, 0, code, "saldo audit verify ledger --database-url BROKEN exited 0 (it audited $SALDO_DATABASE_URL):\n%s", out)
	require.NotContains(t, out, "all invariants hold")
}

// The same for `saldo migrate`: `saldo migrate up --app-role ROLE` (goose's
// and most tools' verb) is refused before anything is applied, never a
// migration that silently grants ROLE nothing.
func TestMigrateRefusesAStrayArgument(t *testing.T) {
	bin, err := buildSaldo()
	require.NoError(t, err)
	ctx := context.Background()
	d := newTestDeployment(t, "cli_stray", "app")
	app := d.roles["app"]
	cmd := exec.Command(bin, "migrate", "up", "--app-role", app)
	cmd.Env = append(os.Environ(), "SALDO_DATABASE_URL="+d.url(t, "owner"), "SALDO_APP_ROLE=", "SALDO_READ_ONLY_ROLE=")
	outb, err := cmd.CombinedOutput()
	out := string(outb)
	if err == nil {
		conn, cerr := pgx.Connect(ctx, d.url(t, "app"))
		require.NoError(t, cerr)
		defer conn.Close(ctx)
		var n int
		qerr := conn.QueryRow(ctx, `SELECT count(*) FROM payouts`).Scan(&n)
		t.Fatalf("saldo migrate up --app-role %s exited 0 (output %q); the role may read payouts: %v (error %v)",
			app, out, qerr == nil, qerr)
	}
	require.Contains(t, out, "unexpected")
}

// Exit 1 means violations were found and nothing else: an audit that could
// not run (here: no database at all) exits 2, so a monitor that pages on 1
// can tell an outage of the audit from a broken invariant.
func TestAuditVerifyCouldNotRunExits2(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	out, code := runAuditVerify(t, bin, "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	require.NotEqual(t, 0, code, out)
	require.NotContains(t, out, "VIOLATIONS FOUND")
	require.Equal(t, 2, code, "an audit that could not run:\n%s", out)
}
