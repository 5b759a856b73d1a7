package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/saldo/saldo/providers/sim"
)

func init() {
	register(command{
		Name:    "sim-provider",
		Summary: "run the simulated PSP (providers/sim) over HTTP, with faults, for tests and demos",
		Run:     runSimProvider,
	})
}

// balanceFlags collects repeated --balance CUR=AMOUNT flags.
type balanceFlags map[string]string

func (b balanceFlags) String() string {
	parts := make([]string, 0, len(b))
	for c, v := range b {
		parts = append(parts, c+"="+v)
	}
	return strings.Join(parts, ",")
}

func (b balanceFlags) Set(s string) error {
	c, v, ok := strings.Cut(s, "=")
	if !ok || c == "" || v == "" {
		return fmt.Errorf("want CUR=AMOUNT, got %q", s)
	}
	b[strings.ToUpper(c)] = v
	return nil
}

func runSimProvider(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sim-provider", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8089", "address to listen on")
	seed := fs.Int64("seed", 1, "seed for ids, random faults and webhook duplication/reordering")
	faults := fs.String("faults", "", "fault script (JSON: an array of rules or {\"rules\": [...]})")
	random := fs.String("random-faults", "", "random fault rates, e.g. error_after=0.02,reset_before=0.01")
	webhookURL := fs.String("webhook-url", "", "URL that receives signed webhooks (empty: no webhooks)")
	webhookSecret := fs.String("webhook-secret", "", "webhook signing secret (default $SALDO_SIM_WEBHOOK_SECRET)")
	webhookDup := fs.Float64("webhook-duplicates", 0, "probability (0..1) that a webhook is delivered twice")
	webhookReorder := fs.Float64("webhook-reorder", 0, "probability (0..1) that a webhook is held behind the next one")
	webhookDelay := fs.Duration("webhook-delay", 0, "delay before every webhook delivery")
	keyLifetime := fs.Duration("key-lifetime", sim.DefaultKeyLifetime, "how long idempotency keys are remembered")
	lookupLag := fs.Duration("lookup-lag", 0, "how long a new operation stays invisible to lookups by reference")
	window := fs.Duration("consistency-window", 0, "consistency window to advertise (default lookup-lag + 1s)")
	settle := fs.Duration("settle-after", 0, "keep transfers and payouts processing this long before they succeed")
	noIdem := fs.Bool("no-idempotency", false, "ignore Idempotency-Key: every send creates a new operation")
	balances := balanceFlags{}
	fs.Var(balances, "balance", "platform balance CUR=AMOUNT (repeatable; default 1000000000.00 in every currency)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	cfg := sim.Config{
		Seed: *seed, Logger: logger, KeyLifetime: *keyLifetime, NoIdempotency: *noIdem,
		LookupLag: *lookupLag, ConsistencyWindow: *window, SettleAfter: *settle,
		WebhookURL: *webhookURL, WebhookSecret: *webhookSecret, WebhookDuplicateRate: *webhookDup,
		WebhookReorderRate: *webhookReorder, WebhookDelay: *webhookDelay,
	}
	if cfg.WebhookSecret == "" {
		cfg.WebhookSecret = os.Getenv("SALDO_SIM_WEBHOOK_SECRET")
	}
	if cfg.WebhookURL != "" && cfg.WebhookSecret == "" {
		return errors.New("--webhook-url needs --webhook-secret (or $SALDO_SIM_WEBHOOK_SECRET)")
	}
	for name, r := range map[string]float64{"--webhook-duplicates": *webhookDup, "--webhook-reorder": *webhookReorder} {
		if r < 0 || r > 1 {
			return fmt.Errorf("%s must be between 0 and 1", name)
		}
	}
	if len(balances) > 0 {
		cfg.Balances = balances
		if err := sim.ValidateBalances(balances); err != nil {
			return err
		}
	}
	if *faults != "" {
		rules, err := sim.LoadFaults(*faults)
		if err != nil {
			return err
		}
		cfg.Faults = rules
	}
	prof, err := sim.ParseFaultProfile(*random)
	if err != nil {
		return err
	}
	cfg.Random = prof

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := sim.NewServer(cfg)
	httpSrv := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	caps := srv.Capabilities()
	logger.Info("sim-provider listening", "url", "http://"+ln.Addr().String(), "seed", *seed,
		"idempotency_keys", caps.IdempotencyKeys, "key_lifetime", caps.KeyLifetime, "lookup_lag", *lookupLag,
		"consistency_window", caps.ConsistencyWindow, "webhooks", caps.Webhooks, "fault_rules", len(cfg.Faults))
	fmt.Printf("sim-provider listening on http://%s\n", ln.Addr())

	errc := make(chan error, 1)
	go func() { errc <- httpSrv.Serve(ln) }()
	select {
	case err := <-errc:
		srv.Close()
		return err
	case <-ctx.Done():
	}
	srv.Close() // ends hanging and slow requests first
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := httpSrv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	logger.Info("sim-provider stopped")
	return nil
}
