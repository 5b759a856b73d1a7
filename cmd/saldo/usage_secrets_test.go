package main

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// captureStderr runs f with os.Stderr redirected and returns what it wrote.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	old := os.Stderr
	os.Stderr = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stderr = old }()
	f()
	os.Stderr = old
	require.NoError(t, w.Close())
	return <-done
}

// Secrets never reach logs: the flag package prints every flag's default
// on -h and on any mistyped flag, so no secret taken from the environment
// (SALDO_PIX_CLIENT_SECRET, SALDO_PIX_WEBHOOK_SECRET, the password in
// SALDO_READ_DATABASE_URL, SALDO_STRIPE_API_KEY) may be a flag's default:
// a mistyped flag in a deployment would print them to the log. They are
// read from the environment after parsing (TestServePixFlags and
// TestServeRefusesBadReadReplicaConfiguration show they still are).
func TestUsageNeverPrintsSecretsFromTheEnvironment(t *testing.T) {
	const (
		clientSecret  = "pix-client-secret-VALUE-1234"
		webhookSecret = "pix-webhook-secret-VALUE-5678"
		dbPassword    = "replica-db-password-VALUE-9012"
		stripeKey     = "sk_live_stripe-VALUE-3456"
	)
	t.Setenv("SALDO_PIX_CLIENT_SECRET", clientSecret)
	t.Setenv("SALDO_PIX_WEBHOOK_SECRET", webhookSecret)
	t.Setenv("SALDO_READ_DATABASE_URL", "postgres://saldo_read:"+dbPassword+"@replica.internal:5432/saldo")
	t.Setenv("SALDO_STRIPE_API_KEY", stripeKey)

	for _, c := range []struct {
		cmd  string
		args []string
	}{{"serve", []string{"--lisen", ":8080"}}, {"serve", []string{"-h"}}, {"reconcile", []string{"--provder", "pix"}}} {
		args := append([]string{c.cmd}, c.args...)
		var err error
		out := captureStderr(t, func() {
			if c.cmd == "serve" {
				err = runServe(context.Background(), c.args)
			} else {
				err = runReconcile(context.Background(), c.args, io.Discard, false)
			}
		})
		require.Error(t, err, "%v", args)
		// Sanity: usage was printed.
		require.True(t, strings.Contains(out, "-pix-client-secret"), "no usage printed for %v:\n%s", args, out)
		var leaked []string
		for _, x := range []struct{ name, secret string }{{"Pix client secret", clientSecret},
			{"Pix webhook secret", webhookSecret}, {"replica database password", dbPassword}, {"Stripe API key", stripeKey}} {
			if strings.Contains(out, x.secret) {
				leaked = append(leaked, x.name)
			}
		}
		assert.Empty(t, leaked, "saldo %v printed these secrets from the environment to stderr", args)
	}
}
