package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/stripe"
)

// stripeFlags are saldo serve's Stripe settings (--stripe-*,
// $SALDO_STRIPE_*; see docs/providers/stripe.md). Stripe is configured
// when an API key is given.
type stripeFlags struct {
	apiKey, webhookSecret, baseURL *string
	consistencyWindow              *time.Duration
}

func registerStripeFlags(fs *flag.FlagSet, env *envDefaults) *stripeFlags {
	return &stripeFlags{
		// The key's default comes from the environment and is never
		// printed by -h (flag prints defaults): the usage says where it
		// comes from, not what it is.
		apiKey: fs.String("stripe-api-key", "", "Stripe secret or restricted API key; prefer $SALDO_STRIPE_API_KEY (flags show in ps)"),
		webhookSecret: fs.String("stripe-webhook-secret", "",
			"signing secret (whsec_...) of the Stripe endpoint POSTing to /v1/webhooks/stripe; prefer $SALDO_STRIPE_WEBHOOK_SECRET"),
		baseURL: fs.String("stripe-base-url", envOr("SALDO_STRIPE_BASE_URL", stripe.DefaultBaseURL),
			"base URL of Stripe's API (stripe-mock or a fake in tests) ($SALDO_STRIPE_BASE_URL)"),
		consistencyWindow: fs.Duration("stripe-consistency-window", env.duration("SALDO_STRIPE_CONSISTENCY_WINDOW", stripe.DefaultConsistencyWindow),
			"how long a new Stripe operation may stay invisible to a lookup (Search lags up to an hour, R16) ($SALDO_STRIPE_CONSISTENCY_WINDOW)"),
	}
}

// secrets fills the secrets the flags left empty from the environment.
func (f *stripeFlags) secrets() {
	if *f.apiKey == "" {
		*f.apiKey = os.Getenv("SALDO_STRIPE_API_KEY")
	}
	if *f.webhookSecret == "" {
		*f.webhookSecret = os.Getenv("SALDO_STRIPE_WEBHOOK_SECRET")
	}
}

func (f *stripeFlags) enabled() bool { f.secrets(); return *f.apiKey != "" }

// problems lists what is wrong, checked with the other flags.
func (f *stripeFlags) problems() []string {
	var out []string
	if *f.consistencyWindow <= 0 {
		out = append(out, "--stripe-consistency-window must be positive")
	}
	if _, err := stripe.New(stripe.Config{APIKey: providers.Secret(*f.apiKey), BaseURL: *f.baseURL}); err != nil {
		out = append(out, "--stripe-base-url / --stripe-api-key: "+err.Error())
	}
	return out
}

// build makes the adapter.
func (f *stripeFlags) build(settings providers.HTTPSettings, log *slog.Logger) (*stripe.Provider, error) {
	p, err := stripe.New(stripe.Config{APIKey: providers.Secret(*f.apiKey), WebhookSecret: providers.Secret(*f.webhookSecret),
		BaseURL: *f.baseURL, HTTP: settings, ConsistencyWindow: *f.consistencyWindow, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("provider %s: %w", stripe.Name, err)
	}
	if *f.webhookSecret == "" {
		log.Warn("SALDO_STRIPE_WEBHOOK_SECRET is empty: every Stripe webhook will be refused (401); attempts still resolve by lookup",
			"provider", stripe.Name)
	}
	return p, nil
}
