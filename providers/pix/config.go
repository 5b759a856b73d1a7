package pix

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/saldo/saldo/providers"
)

// Defaults of Config.
const (
	DefaultName              = "pix"
	DefaultConsistencyWindow = 5 * time.Minute
	DefaultExpiryGrace       = 10 * time.Minute
	DefaultTokenRefresh      = time.Minute
	DefaultRefundScan        = 90 * 24 * time.Hour
	DefaultPageSize          = 1000
)

// Config configures one Pix PSP.
type Config struct {
	// Name stored on attempts (default "pix").
	Name string
	// BaseURL of the standard API Pix, with its path prefix
	// ("https://pix.api.efipay.com.br/v2"): cob and devolucao paths are
	// appended to it. Empty: no charges and no refunds.
	BaseURL string
	// SendBaseURL of the PSP's send API ("https://pix.api.efipay.com.br"):
	// the SendAPI's paths (/v2/gn/pix/...) are appended to it. Empty: no
	// sends.
	SendBaseURL string
	// TokenURL of the OAuth2 token endpoint (client credentials).
	TokenURL string
	// ClientID and ClientSecret of the OAuth2 client. The secret is a
	// providers.Secret: it never shows when Config is printed, logged or
	// marshalled.
	ClientID     string
	ClientSecret providers.Secret
	// Scopes asked for, if the PSP wants them.
	Scopes []string
	// CertFile and KeyFile: the client certificate and key (PEM) the PSP
	// issued for mutual TLS. CAFile: the PSP's CA (PEM), optional (the
	// system roots otherwise).
	CertFile string
	KeyFile  string
	CAFile   string
	// TLS, when set, is used as is instead of the files (tests). Never
	// marshalled: it holds the client certificate's private key.
	TLS *tls.Config `json:"-"`
	// ReceivingKey is saldo's Pix key (DICT) that cobs are created on, and
	// the payer key (pagador.chave) of sends unless PayerKey is set.
	ReceivingKey string
	PayerKey     string
	// WebhookSecret is the secret the registered webhook URL carries
	// (?hmac=...). Empty: every webhook is refused. A providers.Secret,
	// like ClientSecret.
	WebhookSecret providers.Secret
	// ConsistencyWindow: how long a fresh operation may stay invisible to
	// a lookup (R16). After it, a written request that a lookup does not
	// find fails, and a failed send may be retried with a new id: too short
	// a window against a lagging PSP pays twice. Default 5 minutes.
	ConsistencyWindow time.Duration
	// ExpiryGrace: how long after a cob's expiry an ATIVA cob is still
	// taken as possibly being paid. Default 10 minutes.
	ExpiryGrace time.Duration
	// TokenRefreshBefore: a cached token is renewed this long before it
	// expires. Default 1 minute.
	TokenRefreshBefore time.Duration
	// RefundScan bounds how far back a refund lookup searches received
	// Pix when it does not know the Pix's endToEndId (see Lookup). Default
	// 90 days (the window the BCB allows for a devolucao).
	RefundScan time.Duration
	// PageSize of list requests (paginacao.itensPorPagina, 1-1000).
	PageSize int
	// HTTP settings (timeouts, R3). TLS is filled from the files.
	HTTP providers.HTTPSettings
	// Send is the PSP's send API. Default Efi{}.
	Send SendAPI `json:"-"`
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time `json:"-"`
	// Logger receives the adapter's alerts (requests refused with 401 or
	// 403). Default slog.Default.
	Logger *slog.Logger `json:"-"`
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.ConsistencyWindow <= 0 {
		c.ConsistencyWindow = DefaultConsistencyWindow
	}
	if c.ExpiryGrace <= 0 {
		c.ExpiryGrace = DefaultExpiryGrace
	}
	if c.TokenRefreshBefore <= 0 {
		c.TokenRefreshBefore = DefaultTokenRefresh
	}
	if c.RefundScan <= 0 {
		c.RefundScan = DefaultRefundScan
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.PageSize <= 0 || c.PageSize > 1000 {
		c.PageSize = DefaultPageSize
	}
	if c.Send == nil {
		c.Send = Efi{}
	}
	if c.PayerKey == "" {
		c.PayerKey = c.ReceivingKey
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	c.SendBaseURL = strings.TrimRight(c.SendBaseURL, "/")
	return c
}

// ErrConfig is returned (wrapped) by New for a configuration it refuses.
var ErrConfig = errors.New("pix: invalid configuration")

// LoadTLS builds the mutual TLS configuration from the certificate, key and
// optional CA files.
func LoadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("%w: the client certificate and key files are required (mutual TLS)", ErrConfig)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: client certificate: %w", ErrConfig, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("%w: CA file: %w", ErrConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrConfig, caFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// New builds the adapter. It reads the certificate files now, so a bad
// configuration is refused at start, not at the first payment.
func New(cfg Config) (*Provider, error) {
	cfg = cfg.withDefaults()
	if cfg.BaseURL == "" && cfg.SendBaseURL == "" {
		return nil, fmt.Errorf("%w: neither the API Pix base URL nor the send base URL is set", ErrConfig)
	}
	if cfg.TokenURL == "" || cfg.ClientID == "" || cfg.ClientSecret == "" {
		return nil, fmt.Errorf("%w: the token URL, client id and client secret are required", ErrConfig)
	}
	if cfg.BaseURL != "" && cfg.ReceivingKey == "" {
		return nil, fmt.Errorf("%w: the receiving Pix key is required for charges", ErrConfig)
	}
	if cfg.SendBaseURL != "" && cfg.PayerKey == "" {
		return nil, fmt.Errorf("%w: the payer Pix key is required for sends", ErrConfig)
	}
	for _, u := range []struct{ name, url string }{{"base URL", cfg.BaseURL}, {"send base URL", cfg.SendBaseURL},
		{"token URL", cfg.TokenURL}} {
		if err := checkURL(u.name, u.url); err != nil {
			return nil, err
		}
	}
	tlsCfg := cfg.TLS
	if tlsCfg == nil {
		var err error
		if tlsCfg, err = LoadTLS(cfg.CertFile, cfg.KeyFile, cfg.CAFile); err != nil {
			return nil, err
		}
	}
	settings := cfg.HTTP
	settings.TLS = tlsCfg
	client := providers.NewClient(settings)
	settings = client.Settings()
	p := &Provider{cfg: cfg, client: client, refunds: map[string]string{}}
	p.tokens = &tokenCache{
		cc: clientcredentials.Config{ClientID: cfg.ClientID, ClientSecret: string(cfg.ClientSecret), TokenURL: cfg.TokenURL,
			Scopes: cfg.Scopes, AuthStyle: oauth2.AuthStyleInHeader},
		http:     tokenHTTPClient(settings),
		early:    cfg.TokenRefreshBefore,
		budget:   settings.ConnectTimeout + settings.TLSHandshakeTimeout + settings.ReadTimeout,
		now:      cfg.Now,
		fetching: make(chan struct{}, 1),
	}
	return p, nil
}

// checkURL refuses a configured URL that would send the token, the client
// secret or a payment without TLS (and so without the mutual TLS the API
// Pix requires), carry credentials of its own, or break the paths appended
// to it (a query or fragment). "" is left to the callers' own checks.
func checkURL(name, raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("%w: the %s is not a URL", ErrConfig, name)
	case u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("%w: the %s must be an https:// URL (the API Pix runs over mutual TLS)", ErrConfig, name)
	case u.User != nil:
		return fmt.Errorf("%w: the %s must not carry credentials (use the client id and secret)", ErrConfig, name)
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%w: the %s must not have a query or fragment", ErrConfig, name)
	}
	return nil
}

// tokenHTTPClient is the client of the token endpoint: its own transport
// (same mutual TLS and timeouts), never the attempts' client, so a token
// request never shows in an attempt's exchange.
func tokenHTTPClient(s providers.HTTPSettings) *http.Client {
	dialer := &net.Dialer{Timeout: s.ConnectTimeout, KeepAlive: 30 * time.Second}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           dialer.DialContext,
			TLSClientConfig:       s.TLS,
			TLSHandshakeTimeout:   s.TLSHandshakeTimeout,
			ResponseHeaderTimeout: s.ReadTimeout,
			ForceAttemptHTTP2:     true,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       60 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// tokenCache keeps one access token and renews it TokenRefreshBefore its
// expiry, or when a 401 shows the PSP no longer takes it.
type tokenCache struct {
	cc     clientcredentials.Config
	http   *http.Client
	early  time.Duration
	budget time.Duration
	now    func() time.Time

	// fetching is held by the one caller fetching a token; the others
	// wait for it or for their context, whichever ends first. A mutex held
	// across the fetch made every call wait, past its own deadline, behind
	// a token endpoint that hangs (each fetch up to connect + TLS + read):
	// during its outage, every River worker calling this PSP.
	fetching chan struct{}
	mu       sync.Mutex // tok and fetches
	tok      *oauth2.Token
	fetches  int
}

// cached returns the cached access token if it is still good for the
// refresh margin.
func (c *tokenCache) cached() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tok != nil && c.tok.AccessToken != "" && (c.tok.Expiry.IsZero() || c.now().Add(c.early).Before(c.tok.Expiry)) {
		return c.tok.AccessToken, true
	}
	return "", false
}

// token returns a valid access token, fetching one when none is cached or
// the cached one expires within the refresh margin. One caller fetches at
// a time; a caller whose context ends while it waits returns its error
// (nothing was sent: the classifier reads it as not sent, R2).
func (c *tokenCache) token(ctx context.Context) (string, error) {
	if tok, ok := c.cached(); ok {
		return tok, nil
	}
	select {
	case c.fetching <- struct{}{}:
	case <-ctx.Done():
		return "", fmt.Errorf("pix: OAuth2 token: waiting for another caller's fetch: %w", ctx.Err())
	}
	defer func() { <-c.fetching }()
	if tok, ok := c.cached(); ok { // fetched while this one waited
		return tok, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.budget)
	defer cancel()
	ctx = context.WithValue(ctx, oauth2.HTTPClient, c.http)
	c.mu.Lock()
	c.fetches++
	c.mu.Unlock()
	tok, err := c.cc.Token(ctx)
	if err != nil {
		return "", fmt.Errorf("pix: OAuth2 token: %w", err)
	}
	if tok.AccessToken == "" {
		return "", errors.New("pix: OAuth2 token: empty access token")
	}
	c.mu.Lock()
	c.tok = tok
	c.mu.Unlock()
	return tok.AccessToken, nil
}

// invalidate drops the cached token if it is still access (a 401 named it).
func (c *tokenCache) invalidate(access string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tok != nil && c.tok.AccessToken == access {
		c.tok = nil
	}
}

// Fetches reports how many tokens were requested (tests, metrics).
func (p *Provider) TokenFetches() int {
	p.tokens.mu.Lock()
	defer p.tokens.mu.Unlock()
	return p.tokens.fetches
}
