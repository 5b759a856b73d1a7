package main

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers/pix/pixtest"
	"github.com/saldo/saldo/providers/sim"
)

// serve refuses a --stale-call-after (or $SALDO_STALE_CALL_AFTER) that a
// provider call can outlast, naming both values, before anything runs: the
// sweeper would turn a call still in flight unknown, and the resolver would
// count a lookup's "not found" from call_started_at + stale-call-after, while
// the request may still be on its way, and could fail the attempt and free
// its reserve with its fate unknown (R11, R16, R22).
//
// A sim or Stripe call is one exchange, cut at connect + TLS handshake +
// read (3s + 5s + 30s = 38s by default); stale-call-after must exceed it by
// at least 1s. A Pix call may be four (an OAuth2 token, the request, and
// after a 401 a new token and the request again), bounded only by the
// attempt job's timeout (38s + 30s = 1m8s), which it must then exceed by 1s.
func TestServeRefusesAStaleCallAfterACallCanOutlast(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	srv := sim.NewServer(sim.Config{}).Start()
	defer srv.Close()
	certs, err := pixtest.NewCerts(t.TempDir())
	require.NoError(t, err)

	// A database nobody listens on: a configuration serve accepts gets
	// as far as the database and stops there.
	const deadDB = "postgres://postgres@127.0.0.1:1/saldo?sslmode=disable"
	run := func(env []string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--startup-wait", "0s"}, args...)...)
		cmd.Env = append(os.Environ(), "SALDO_DATABASE_URL="+deadDB, "SALDO_SIM_URL=", "SALDO_ROUTES=",
			"SALDO_STALE_CALL_AFTER=", "SALDO_PROVIDER_CONNECT_TIMEOUT=", "SALDO_PROVIDER_READ_TIMEOUT=",
			"SALDO_PIX_BASE_URL=", "SALDO_PIX_SEND_BASE_URL=", "SALDO_STRIPE_API_KEY=",
			"SALDO_PIX_CLIENT_SECRET=s3cret")
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "serve exits non-zero: %v\n%s", err, out)
		return string(out), ee.ExitCode()
	}
	simArgs := []string{"--sim-url", srv.URL()}
	pixArgs := []string{"--pix-base-url", "https://psp.example/v2", "--pix-send-base-url", "https://psp.example",
		"--pix-token-url", "https://psp.example/oauth/token", "--pix-client-id", "saldo", "--pix-key", "chave@example.com",
		"--pix-cert-file", certs.ClientCertFile, "--pix-key-file", certs.ClientKeyFile, "--pix-ca-file", certs.CAFile}

	for _, c := range []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"sim: no margin over one exchange", nil, append([]string{"--stale-call-after", "38500ms"}, simArgs...),
			[]string{"--stale-call-after / $SALDO_STALE_CALL_AFTER (38.5s)", "38s", "at least 39s"}},
		{"sim: from the environment", []string{"SALDO_STALE_CALL_AFTER=20s", "SALDO_PROVIDER_READ_TIMEOUT=20s"}, simArgs,
			[]string{"$SALDO_STALE_CALL_AFTER", "(20s)", "28s", "at least 29s"}},
		{"pix: a call is bounded by the job timeout only", nil, append([]string{"--stale-call-after", "40s"}, pixArgs...),
			[]string{"--stale-call-after / $SALDO_STALE_CALL_AFTER (40s)", "1m8s", "at least 1m9s", "pix"}},
		{"pix: from the environment", []string{"SALDO_STALE_CALL_AFTER=1m"}, pixArgs,
			[]string{"$SALDO_STALE_CALL_AFTER", "(1m0s)", "1m8s", "at least 1m9s"}},
	} {
		out, code := run(c.env, c.args...)
		require.Equal(t, 1, code, c.name)
		require.Contains(t, out, "refusing to start", c.name)
		for _, w := range c.want {
			require.Contains(t, out, w, "%s:\n%s", c.name, out)
		}
		require.NotContains(t, out, "database unreachable", "%s: refused before anything runs", c.name)
	}

	// Enough: serve goes on, as far as the (absent) database.
	// (The chaos test's processes: connect 1s + TLS 5s + read 2s, 9s.)
	for _, args := range [][]string{append([]string{"--stale-call-after", "39s"}, simArgs...),
		append([]string{"--stale-call-after", "69s"}, pixArgs...),
		append([]string{"--provider-connect-timeout", "1s", "--provider-read-timeout", "2s", "--stale-call-after", "9s"}, simArgs...)} {
		out, code := run(nil, args...)
		require.Equal(t, 1, code)
		require.NotContains(t, out, "--stale-call-after", args)
		require.Contains(t, out, "database unreachable", args)
	}
}
