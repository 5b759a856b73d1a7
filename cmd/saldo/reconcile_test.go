package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/providers/stripe/stripefake"
)

// Issue 16 (R19): saldo reconcile runs one provider's day, draws a progress
// bar when asked (or on a terminal), prints a summary, and exits 3 when it
// saw a critical divergence; a re-run finds nothing new.
func TestReconcileCommand_R19(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := testdb.NewURL(t)
	day := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	clock := sim.NewManualClock(day.Add(10 * time.Hour))
	srv := sim.NewServer(sim.Config{Clock: clock.Now}).Start()
	t.Cleanup(srv.Close)
	prov := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: 5 * time.Second}))
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	att, err := attempts.New(attempts.Config{Pool: pool, Clock: clock, Providers: map[string]providers.Provider{"sim": prov}})
	require.NoError(t, err)
	po, err := payouts.New(payouts.Config{Pool: pool, Attempts: att, Provider: "sim", Clock: clock})
	require.NoError(t, err)
	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("100.00", "BRL"),
		Key: "k", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	var refs []string
	for range 3 {
		p, err := po.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
			Amount:      money.MustParse("10.00", "BRL"),
			Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "a@example.com"}}})
		require.NoError(t, err)
		r, err := att.Execute(ctx, *p.CurrentAttemptID)
		require.NoError(t, err)
		require.Equal(t, attempts.StatusSucceeded, r.Attempt.Status)
		refs = append(refs, r.Attempt.Reference)
	}
	args := []string{"--database-url", dbURL, "--sim-url", srv.URL(), "--provider", "sim", "--date", "2026-11-20"}

	var out bytes.Buffer
	require.NoError(t, runReconcile(ctx, append(args, "--progress", "always"), &out, false))
	require.Contains(t, out.String(), "[##############################] 3/3 statement lines")
	require.Contains(t, out.String(), "reconcile sim 2026-11-20: succeeded")
	require.Contains(t, out.String(), "statement lines 3, matched 3, resolved by this run 0, deferred 0")
	require.Contains(t, out.String(), "divergences seen 0, new 0")
	require.Regexp(t, `BRL +out +30 +30 +ok`, out.String())

	require.NoError(t, srv.AddStatementLie(sim.StatementLie{Kind: sim.LieDuplicate, Reference: refs[1]}))
	out.Reset()
	err = runReconcile(ctx, args, &out, false)
	require.Equal(t, exitError{Code: 3}, err)
	require.NotContains(t, out.String(), "statement lines\r", "no bar off a terminal")
	require.NotContains(t, out.String(), "[#")
	require.Contains(t, out.String(), "divergences seen 2, new 2")
	require.Regexp(t, `double_payment +critical +1`, out.String())
	require.Regexp(t, `ledger_totals +high +1`, out.String())
	require.Regexp(t, `BRL +out +40 +30 +DIFFERS`, out.String())
	require.Contains(t, out.String(), "CRITICAL")

	out.Reset()
	require.Equal(t, exitError{Code: 3}, runReconcile(ctx, args, &out, false))
	require.Contains(t, out.String(), "divergences seen 2, new 0")

	out.Reset()
	err = runReconcile(ctx, []string{"--database-url", dbURL, "--provider", "stripe", "--date", "nope"}, &out, false)
	require.ErrorContains(t, err, `--date "nope" is not YYYY-MM-DD`)
	require.ErrorContains(t, err, `provider "stripe" is not configured`)
	err = runReconcile(ctx, []string{"--database-url", dbURL, "--sim-url", srv.URL(), "--provider", "sim",
		"--date", time.Now().UTC().Format(time.DateOnly)}, &out, false)
	require.ErrorContains(t, err, "has not closed")
}

// The command takes the Stripe adapter as saldo serve does (--stripe-*):
// a PaymentIntent saldo never made is a critical divergence (exit 3).
func TestReconcileCommandStripe_R19(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := testdb.NewURL(t)
	fake := stripefake.New("sk_test_cli")
	t.Cleanup(fake.Close)
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -2)
	pi := fake.Seed("payment_intent", 990, "brl", "", day.Add(12*time.Hour))
	var out bytes.Buffer
	err := runReconcile(ctx, []string{"--database-url", dbURL, "--provider", "stripe", "--stripe-api-key", "sk_test_cli",
		"--stripe-base-url", fake.URL(), "--date", day.Format(time.DateOnly)}, &out, false)
	require.Equal(t, exitError{Code: 3}, err, out.String())
	require.Contains(t, out.String(), "reconcile stripe "+day.Format(time.DateOnly)+": succeeded")
	require.Regexp(t, `unknown_to_us +critical +1`, out.String())
	require.Regexp(t, `BRL +in +9.9 +0 +DIFFERS`, out.String())
	require.NotEmpty(t, pi["id"])
}
