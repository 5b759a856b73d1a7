package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/console"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/pgcluster"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/migrations"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

func init() {
	register(command{
		Name:    "dev",
		Summary: "run everything in one process on a throwaway PostgreSQL with the simulated PSP and a demo merchant",
		Run:     runDev,
	})
}

// devDatabase finds a database for dev mode: SALDO_DATABASE_URL; else a
// throwaway cluster from the local PostgreSQL binaries; else a container.
// It returns the URL of a fresh "saldo" database and a cleanup.
func devDatabase(ctx context.Context, keep bool, log *slog.Logger) (string, func(), error) {
	if u := os.Getenv("SALDO_DATABASE_URL"); u != "" {
		return u, func() {}, nil
	}
	var tried []string
	if c, err := pgcluster.Start(ctx, pgcluster.Options{}); err == nil {
		log.Info("started a throwaway PostgreSQL", "dir", c.Dir, "port", c.Port)
		cleanup := func() {
			if keep {
				fmt.Printf("kept the PostgreSQL data directory %s (stopped; start it with pg_ctl -D %s/data)\n", c.Dir, c.Dir)
				_ = c.Stop()
				return
			}
			if err := c.Remove(); err != nil {
				fmt.Fprintln(os.Stderr, "saldo dev: removing the throwaway PostgreSQL:", err)
			}
		}
		u, err := createDatabase(ctx, c.URL("postgres"), "saldo")
		if err != nil {
			cleanup()
			return "", nil, err
		}
		return u, cleanup, nil
	} else {
		if ctx.Err() != nil {
			// Interrupted (Ctrl-C, SIGTERM) while starting: not a missing
			// PostgreSQL; nothing was left behind (pgcluster.Start).
			return "", nil, fmt.Errorf("interrupted while starting PostgreSQL: %w", ctx.Err())
		}
		tried = append(tried, "local PostgreSQL binaries: "+err.Error())
	}
	if admin, terminate, err := pgcluster.StartContainer(ctx); err == nil {
		cleanup := func() {
			if !keep {
				_ = terminate(context.Background())
			}
		}
		u, err := createDatabase(ctx, admin, "saldo")
		if err != nil {
			cleanup()
			return "", nil, err
		}
		return u, cleanup, nil
	} else {
		tried = append(tried, "testcontainers: "+err.Error())
	}
	return "", nil, errors.New("saldo dev needs PostgreSQL: set SALDO_DATABASE_URL, install the PostgreSQL server " +
		"binaries (apt-get install postgresql), or start Docker. Tried:\n  " + strings.Join(tried, "\n  "))
}

func createDatabase(ctx context.Context, adminURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func runDev(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "API listen address")
	keep := fs.Bool("keep", false, "keep the throwaway database when stopping")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		// Flag parsing stops at the first argument that is not a flag:
		// the flags after it would be ignored without a word.
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	log, err := newLogger("text", *logLevel)
	if err != nil {
		return err
	}
	// The API address is needed before the sim starts (its webhook URL).
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w (pass --listen 127.0.0.1:0 for a free port)", *listen, err)
	}
	addr := ln.Addr().String()
	ln.Close()

	dbURL, cleanup, err := devDatabase(ctx, *keep, log)
	if err != nil {
		return err
	}
	defer cleanup()
	if _, err := migrations.Up(ctx, dbURL, log); err != nil {
		return err
	}

	secret := randomHex(16)
	srv := sim.NewServer(sim.Config{
		WebhookURL: "http://" + addr + "/v1/webhooks/sim", WebhookSecret: secret,
		HangFor: 15 * time.Second, Logger: log.With("component", "sim"),
	}).Start()
	defer srv.Close()
	prov := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 3 * time.Second}))

	// The embedded sim keeps its operations in memory and listens on a new
	// port each run: on an outside database (SALDO_DATABASE_URL) every
	// start is another PSP under the name "sim". dev re-points the name
	// by itself, which the identity check still refuses while an attempt
	// sent to the earlier sim is open (R16): those are a human's to
	// resolve (the review queue) now that the sim that knew them is gone.
	var accept []string
	if os.Getenv("SALDO_DATABASE_URL") != "" {
		accept = []string{prov.Name()}
	}
	return runProcess(ctx, processConfig{
		OwnsDatabase: true, Command: "dev", AcceptProviderIdentity: accept,
		DatabaseURL: dbURL, Listen: addr, RunAPI: true, RunWorkers: true,
		Providers: []providers.Provider{prov}, PayoutProvider: prov.Name(), ChargeProvider: prov.Name(),
		MaxWorkers: 20, Logger: log, ConsoleInsecure: true,
		// As serve's defaults: a payout the sim proves it never did gets
		// its next attempt by itself.
		PayoutRetry: payouts.RetryPolicy{MaxAttempts: 3, Within: 24 * time.Hour, Backoff: 30 * time.Second},
		// Demo pace: unknown attempts are looked up after 5s, then 10s, 30s...
		Attempts: attempts.Config{ResolveSchedule: []time.Duration{5 * time.Second, 10 * time.Second,
			30 * time.Second, time.Minute, 5 * time.Minute}, StaleCallAfter: time.Minute,
			Breaker: attempts.BreakerConfig{Window: time.Minute, MinCalls: 10, FailureRate: 0.5, OpenFor: 30 * time.Second}},
		Ready: func(ctx context.Context, e *engine.Engine, base string) error {
			return seedDemo(ctx, e, base, srv.URL())
		},
	})
}

// seedDemo creates the demo merchant with funds and one key per role, and
// prints what a newcomer needs.
func seedDemo(ctx context.Context, e *engine.Engine, base, simURL string) error {
	if _, err := merchants.Create(ctx, e.Pool, "demo", "Demo Store"); err != nil && !errors.Is(err, merchants.ErrExists) {
		return err
	}
	if _, err := merchants.Fund(ctx, e.Pool, merchants.Funding{MerchantID: "demo", Amount: money.MustParse("10000.00", "BRL"),
		Key: "dev-seed", Reason: "saldo dev demo funding", Actor: "saldo dev"}); err != nil {
		return err
	}
	keys := map[api.Role]string{}
	var operatorKeyID string
	for _, role := range []api.Role{api.RoleMerchant, api.RoleAdmin, api.RoleAuditor, api.RoleOperator} {
		m := ""
		if role == api.RoleMerchant {
			m = "demo"
		}
		k, secret, err := api.CreateKey(ctx, e.Pool, role, m, "saldo dev "+string(role), time.Now())
		if err != nil {
			return err
		}
		keys[role] = secret
		if role == api.RoleOperator {
			operatorKeyID = k.ID
		}
	}
	// A one-time login link into the console for the demo operator.
	link, err := console.CreateLoginLink(ctx, e.Pool, operatorKeyID, 24*time.Hour, time.Now())
	if err != nil {
		return err
	}
	fmt.Printf(`
saldo dev is running. Everything is throwaway: Ctrl-C stops it and removes the database.

  API            %[1]s            (OpenAPI: %[1]s/openapi.yaml)
  simulated PSP  %[2]s
  metrics        %[1]s/metrics   (an operator, auditor or admin key: curl -H "Authorization: Bearer $OPERATOR_KEY")
  River UI       %[1]s/ops/river   (user: anything, password: the operator key)
  console        %[1]s/console/   (sign in with any key below)
                 %[1]s/console/login/link?t=%[7]s   (one-time login link for the demo operator)

Demo merchant "demo" has 10000.00 BRL. Keys (shown once):
  export MERCHANT_KEY=%[3]s
  export ADMIN_KEY=%[4]s
  export AUDITOR_KEY=%[5]s
  export OPERATOR_KEY=%[6]s

A Pix transfer (succeeds in a moment):
  curl -s -X POST %[1]s/v1/merchants/demo/pix-transfers -H "Authorization: Bearer $MERCHANT_KEY" \
    -H "Idempotency-Key: demo-1" -H "Content-Type: application/json" \
    -d '{"amount":"25.00","currency":"BRL","destination":{"pix_key":{"type":"email","value":"ana@example.com"}}}'

A payout whose provider call times out (3 s) after the PSP recorded it: it is "processing"
(attempt unknown) and its reserve holds; the PSP's webhook or the resolver's lookup by reference
settles it a moment later. It is never re-sent:
  curl -s -X POST %[2]s/sim/faults -d '{"kind":"hang_after","times":1}'
  curl -s -X POST %[1]s/v1/merchants/demo/pix-transfers -H "Authorization: Bearer $MERCHANT_KEY" \
    -H "Idempotency-Key: demo-2" -H "Content-Type: application/json" \
    -d '{"amount":"40.00","currency":"BRL","destination":{"pix_key":{"type":"email","value":"joao@example.com"}}}'
  curl -s %[1]s/v1/merchants/demo/payouts -H "Authorization: Bearer $MERCHANT_KEY"

The balance (available and reserved):
  curl -s %[1]s/v1/merchants/demo/balances -H "Authorization: Bearer $MERCHANT_KEY"

The ledger entries, as an auditor:
  curl -s %[1]s/v1/ledger/transactions -H "Authorization: Bearer $AUDITOR_KEY"

`, base, simURL, keys[api.RoleMerchant], keys[api.RoleAdmin], keys[api.RoleAuditor], keys[api.RoleOperator], link)
	return nil
}
