package main

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers/pix/pixtest"
)

// serveExitOutput runs the real binary against a database nobody listens
// on: a configuration serve accepts gets as far as the database
// ("database unreachable"); one it refuses stops at "refusing to start".
// Every log line (warnings included) is in the output.
func serveExitOutput(t *testing.T, env []string, args ...string) string {
	t.Helper()
	bin, err := buildSaldo()
	require.NoError(t, err)
	const deadDB = "postgres://postgres@127.0.0.1:1/saldo?sslmode=disable"
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--startup-wait", "0s"}, args...)...)
	cmd.Env = append(os.Environ(), "SALDO_DATABASE_URL="+deadDB, "SALDO_SIM_URL=", "SALDO_ROUTES=",
		"SALDO_STALE_CALL_AFTER=", "SALDO_PROVIDER_CONNECT_TIMEOUT=", "SALDO_PROVIDER_READ_TIMEOUT=",
		"SALDO_PIX_BASE_URL=", "SALDO_PIX_SEND_BASE_URL=", "SALDO_STRIPE_API_KEY=", "SALDO_PROCESSING_REVIEW_AFTER=",
		"SALDO_STRIPE_CONSISTENCY_WINDOW=", "SALDO_PIX_CONSISTENCY_WINDOW=", "SALDO_PIX_CLIENT_SECRET=s3cret")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "serve exits non-zero: %v\n%s", err, out)
	return string(out)
}

// R18: with a Pix PSP configured, serve takes a --processing-review-after
// shorter than the longest cob (1h). It used to refuse one below 23h10m
// (charges.MaxPixExpiry plus the adapter's grace): every unpaid cob then
// reached review, with its alert, while still payable. The Pix adapter now
// states each cob's expiry plus grace (ExpectedBy) and the attempts core
// reviews a processing attempt only once that has passed too (plus
// --processing-expected-margin), whatever --processing-review-after says:
// the refusal protected nothing any more, and kept an operator from
// reviewing stuck payouts sooner.
func TestServeTakesAProcessingReviewShorterThanTheLongestCob_R18(t *testing.T) {
	t.Parallel()
	certs, err := pixtest.NewCerts(t.TempDir())
	require.NoError(t, err)
	out := serveExitOutput(t, nil, "--processing-review-after", "1h", "--stale-call-after", "2m",
		"--pix-base-url", "https://psp.example/v2", "--pix-send-base-url", "https://psp.example",
		"--pix-token-url", "https://psp.example/oauth/token", "--pix-client-id", "saldo", "--pix-key", "chave@example.com",
		"--pix-cert-file", certs.ClientCertFile, "--pix-key-file", certs.ClientKeyFile, "--pix-ca-file", certs.CAFile)
	t.Logf("serve:\n%s", out)
	require.NotContains(t, out, "refusing to start", "a cob's review ages from its own expiry, not from this setting")
	require.Contains(t, out, "database unreachable", "serve got as far as the database")
}

// R18: --processing-expected-margin must be positive; serve refuses 0 and
// names the flag (the attempts core would silently take its default).
func TestServeRefusesANonPositiveProcessingExpectedMargin_R18(t *testing.T) {
	t.Parallel()
	err := runServe(t.Context(), []string{"--database-url=postgres://saldo@127.0.0.1:1/saldo", "--sim-url=",
		"--processing-expected-margin", "0s"})
	require.Error(t, err)
	require.Contains(t, err.Error(), "refusing to start")
	require.Contains(t, err.Error(), "--processing-expected-margin must be positive", "the refusal names the flag:\n%v", err)
}

// --breaker-failure-rate is in (0, 1]: serve refuses NaN (which
// strconv.ParseFloat, the flag and $SALDO_BREAKER_FAILURE_RATE accept) and
// names the flag. Before, NaN passed the range check (NaN <= 0 and NaN > 1
// are both false) and the breakers counted as configured-off, so a provider
// outage was hammered with every due send, without a word (found by review).
func TestServeRefusesABreakerFailureRateOfNaN(t *testing.T) {
	t.Parallel()
	// No provider: serve refuses, listing every problem it found.
	err := runServe(t.Context(), []string{"--database-url=postgres://saldo@127.0.0.1:1/saldo", "--sim-url=",
		"--breaker-failure-rate", "NaN"})
	require.Error(t, err)
	require.Contains(t, err.Error(), "refusing to start")
	require.Contains(t, err.Error(), "--breaker-failure-rate", "the refusal names the flag (NaN is not in (0, 1]):\n%v", err)
}
