package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// saldo serve's Stripe flags (issue 14): Stripe is configured by its API
// key (from the environment), a bad base URL is refused at start, and
// routes are checked against the adapter's capabilities. The key never
// shows in the refusal.
func TestServeStripeFlags(t *testing.T) {
	for _, v := range []string{"SALDO_SIM_URL", "SALDO_ROUTES", "SALDO_PIX_BASE_URL", "SALDO_PIX_SEND_BASE_URL",
		"SALDO_STRIPE_API_KEY", "SALDO_STRIPE_WEBHOOK_SECRET", "SALDO_STRIPE_BASE_URL", "SALDO_STRIPE_CONSISTENCY_WINDOW"} {
		t.Setenv(v, "")
	}
	ctx := context.Background()
	db := "--database-url=postgres://saldo@127.0.0.1:1/saldo"
	const key = "sk_test_ServeFlagCanary123"

	t.Setenv("SALDO_STRIPE_API_KEY", key)
	err := runServe(ctx, []string{db, "--stripe-base-url", "ftp://stripe.example", "--stripe-consistency-window", "0s"})
	require.Error(t, err)
	for _, want := range []string{"refusing to start", "--stripe-consistency-window must be positive", "base URL must be http(s)"} {
		require.Contains(t, err.Error(), want)
	}
	require.NotContains(t, err.Error(), "no provider configured")
	require.NotContains(t, err.Error(), key)

	// Built; the route is refused by the adapter's capabilities (no Pix),
	// so nothing starts.
	err = runServe(ctx, []string{db, "--stripe-base-url", "http://127.0.0.1:1", "--route", "card_charge=stripe,pix_charge=stripe"})
	require.ErrorContains(t, err, `pix_charge is routed to "stripe", which does not support it`)
	require.NotContains(t, err.Error(), key)

	// Stripe pays a bank_payout (to a stripe_bank_account) and an
	// account_transfer: the routes pass the check, and serve goes on to
	// the (unreachable) database.
	err = runServe(ctx, []string{db, "--startup-wait", "1ms", "--stripe-base-url", "http://127.0.0.1:1", "--route",
		"bank_payout=stripe,account_transfer=stripe"})
	require.ErrorContains(t, err, "database unreachable")
	require.NotContains(t, err.Error(), "routed to")
	require.NotContains(t, err.Error(), key)
}
