// Package stripe is saldo's Stripe adapter (issue 14): card charges as
// confirmed PaymentIntents, refunds of a PaymentIntent, Connect transfers to
// connected accounts and Payouts from the Stripe balance, behind the
// providers.Provider contract (docs/rules.md R1-R25).
//
// stripe-go (github.com/stripe/stripe-go/v85) provides the types, the form
// encoding (package form) and the webhook signature check (package
// webhook). The HTTP exchange itself is saldo's providers.Client, never
// stripe-go's backend: that backend retries twice by default (409, 5xx and
// any network error, stripe.go shouldRetry), invents an Idempotency-Key when
// none is given and logs request failures itself. saldo owns repetition
// (R12), so each Submit and each Lookup is exactly one exchange, reported
// as a providers.Exchange (request written or not, R2) for
// attempts.Classify.
//
// What Stripe lets saldo resolve by itself, and what falls to review and
// reconciliation (R25), is in docs/providers/stripe.md.
package stripe

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v85"

	"github.com/saldo/saldo/providers"
)

// Name is the provider name stored on attempts.
const Name = "stripe"

// DefaultBaseURL is Stripe's API.
const DefaultBaseURL = "https://api.stripe.com"

// KeyLifetime is how long Stripe keeps an idempotency key: "keys are
// eligible to be removed from the system automatically after they're at
// least 24 hours old". saldo never re-sends past it (R14).
const KeyLifetime = 24 * time.Hour

// DefaultConsistencyWindow is how long a fresh operation may stay invisible
// to a lookup before "not found" counts (R16). Stripe's Search API is
// eventually consistent: usually under a minute, up to an hour during
// incidents.
const DefaultConsistencyWindow = time.Hour

// MetadataReference is the metadata key that carries the attempt's
// reference on every object saldo creates (R13).
const MetadataReference = "saldo_reference"

// Config configures the adapter.
type Config struct {
	// APIKey is the secret key (sk_live_..., sk_test_... or a restricted
	// rk_ key). Required. Sent only in the Authorization header.
	APIKey providers.Secret
	// WebhookSecret is the endpoint's signing secret (whsec_...). Without
	// it every webhook is refused.
	WebhookSecret providers.Secret
	// BaseURL of the API (default DefaultBaseURL); tests and staging point
	// it at stripe-mock or a fake.
	BaseURL string
	// HTTP are the client settings (R3).
	HTTP providers.HTTPSettings
	// ConsistencyWindow overrides DefaultConsistencyWindow.
	ConsistencyWindow time.Duration
	// Logger receives the adapter's alerts (401/403). Default slog.Default.
	Logger *slog.Logger
}

// Provider is the Stripe adapter: a providers.Provider.
type Provider struct {
	key       string
	secret    string
	baseURL   string
	client    *providers.Client
	caps      providers.Capabilities
	log       *slog.Logger
	tolerance time.Duration
}

var _ providers.Provider = (*Provider)(nil)

// ErrConfig: the configuration is unusable.
var ErrConfig = errors.New("stripe: invalid configuration")

// New builds the adapter.
func New(cfg Config) (*Provider, error) {
	if strings.TrimSpace(string(cfg.APIKey)) == "" {
		return nil, fmt.Errorf("%w: an API key is required", ErrConfig)
	}
	base := strings.TrimRight(cfg.BaseURL, "/")
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		// Never echo the URL's parse error: it could hold credentials.
		return nil, fmt.Errorf("%w: base URL must be http(s)://host[:port] without credentials", ErrConfig)
	}
	window := cfg.ConsistencyWindow
	if window <= 0 {
		window = DefaultConsistencyWindow
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Provider{
		key:     string(cfg.APIKey),
		secret:  string(cfg.WebhookSecret),
		baseURL: base,
		client:  providers.NewClient(cfg.HTTP),
		caps: providers.Capabilities{
			IdempotencyKeys:   true,
			KeyLifetime:       KeyLifetime,
			LookupByReference: true,
			ConsistencyWindow: window,
			Webhooks:          true,
			Statements:        true,
			Operations: []providers.Operation{providers.OpCardCharge, providers.OpRefund,
				providers.OpAccountTransfer, providers.OpBankPayout},
			// A transfer pays a connected account; a payout, a bank
			// account attached to the platform's Stripe account.
			Destinations: map[providers.Operation][]providers.DestinationKind{
				providers.OpAccountTransfer: {providers.DestStripeAccount},
				providers.OpBankPayout:      {providers.DestStripeBankAccount},
			},
		},
		log:       log,
		tolerance: WebhookTolerance,
	}, nil
}

// Name is "stripe".
func (p *Provider) Name() string { return Name }

// Capabilities: keys for 24 h, lookup by reference (Search for
// PaymentIntents, lists for the rest) with a long consistency window,
// webhooks and statements.
func (p *Provider) Capabilities() providers.Capabilities { return p.caps }

// Client is the adapter's HTTP client (tests use CloseIdle).
func (p *Provider) Client() *providers.Client { return p.client }

// headers are sent on every request. The key goes in Authorization only,
// never in a URL, so an Exchange (URL, errors) never carries it.
func (p *Provider) headers() http.Header {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+p.key)
	h.Set("Stripe-Version", stripego.APIVersion)
	h.Set("User-Agent", "saldo")
	return h
}

// redact removes the key from s, in case a server echoed it.
func (p *Provider) redact(s string) string {
	if p.key == "" {
		return s
	}
	return strings.ReplaceAll(s, p.key, "[redacted]")
}

// redactErr keeps err unless its text carries the key.
func (p *Provider) redactErr(err error) error {
	if err == nil || p.key == "" || !strings.Contains(err.Error(), p.key) {
		return err
	}
	return errors.New(p.redact(err.Error()))
}

// redactBody removes the key from an answer that echoes it (stripe-mock's
// 401 quotes the Authorization header verbatim; Stripe masks it).
func (p *Provider) redactBody(b []byte) []byte {
	if p.key == "" || !bytes.Contains(b, []byte(p.key)) {
		return b
	}
	return bytes.ReplaceAll(b, []byte(p.key), []byte("[redacted]"))
}
