package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers/pix/pixtest"
)

// saldo serve's Pix flags (issue 15): a Pix PSP missing its credentials,
// certificate or key is refused at start, naming each flag; a certificate
// that cannot be read is refused before anything runs; a complete
// configuration builds the adapter from the files, and routes are checked
// against its capabilities.
func TestServePixFlags(t *testing.T) {
	for _, v := range []string{"SALDO_SIM_URL", "SALDO_ROUTES", "SALDO_PIX_BASE_URL", "SALDO_PIX_SEND_BASE_URL",
		"SALDO_PIX_TOKEN_URL", "SALDO_PIX_CLIENT_ID", "SALDO_PIX_CLIENT_SECRET", "SALDO_PIX_CERT_FILE", "SALDO_PIX_KEY_FILE",
		"SALDO_PIX_CA_FILE", "SALDO_PIX_KEY", "SALDO_PIX_WEBHOOK_SECRET", "SALDO_PIX_NAME", "SALDO_PIX_CONSISTENCY_WINDOW"} {
		t.Setenv(v, "")
	}
	ctx := context.Background()
	db := "--database-url=postgres://saldo@127.0.0.1:1/saldo"

	err := runServe(ctx, []string{db, "--pix-base-url", "https://psp.example/v2"})
	require.Error(t, err)
	for _, want := range []string{"refusing to start", "--pix-token-url is required", "--pix-client-id is required",
		"--pix-client-secret is required", "--pix-cert-file is required", "--pix-key-file is required", "--pix-key is required"} {
		require.Contains(t, err.Error(), want)
	}
	require.NotContains(t, err.Error(), "no provider configured")

	certs, err := pixtest.NewCerts(t.TempDir())
	require.NoError(t, err)
	t.Setenv("SALDO_PIX_CLIENT_SECRET", "s3cret") // secrets through the environment
	args := []string{db, "--pix-base-url", "https://psp.example/v2", "--pix-send-base-url", "https://psp.example",
		"--pix-token-url", "https://psp.example/oauth/token", "--pix-client-id", "saldo", "--pix-key", "chave@example.com",
		"--pix-cert-file", certs.ClientCertFile, "--pix-ca-file", certs.CAFile}
	err = runServe(ctx, append(args, "--pix-key-file", certs.ClientKeyFile+".missing"))
	require.ErrorContains(t, err, "refusing to start: provider pix: pix: invalid configuration: client certificate")

	// Built from the files; the route is refused by the adapter's
	// capabilities (no card charges), so nothing starts.
	err = runServe(ctx, append(args, "--pix-key-file", certs.ClientKeyFile, "--route", "pix_transfer=pix,card_charge=pix"))
	require.ErrorContains(t, err, `card_charge is routed to "pix", which does not support it`)
}
