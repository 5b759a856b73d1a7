package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/pix"
)

// pixFlags are saldo serve's Pix PSP settings (--pix-*, $SALDO_PIX_*; see
// docs/providers/pix.md). The PSP is configured when either base URL is.
type pixFlags struct {
	name, baseURL, sendBaseURL, tokenURL  *string
	clientID, clientSecret                *string
	certFile, keyFile, caFile             *string
	receivingKey, payerKey, webhookSecret *string
	consistencyWindow                     *time.Duration
}

func registerPixFlags(fs *flag.FlagSet, env *envDefaults) *pixFlags {
	s := func(name, envName, def, usage string) *string {
		return fs.String(name, envOr(envName, def), usage+" ($"+envName+")")
	}
	// A secret's default is never the environment's value: flag prints
	// defaults on -h and on any mistyped flag. It is read from the
	// environment after parsing (secrets), and the usage says where from.
	secret := func(name, envName, usage string) *string {
		return fs.String(name, "", usage+"; prefer $"+envName+" (flags show in ps)")
	}
	return &pixFlags{
		name:         s("pix-name", "SALDO_PIX_NAME", pix.DefaultName, "provider name of the Pix PSP"),
		baseURL:      s("pix-base-url", "SALDO_PIX_BASE_URL", "", "base URL of the PSP's API Pix with its prefix, for cobs and refunds, e.g. https://pix.api.efipay.com.br/v2"),
		sendBaseURL:  s("pix-send-base-url", "SALDO_PIX_SEND_BASE_URL", "", "base URL of the PSP's send API, for pix_transfer and bank_payout, e.g. https://pix.api.efipay.com.br"),
		tokenURL:     s("pix-token-url", "SALDO_PIX_TOKEN_URL", "", "OAuth2 token endpoint of the Pix PSP (client credentials)"),
		clientID:     s("pix-client-id", "SALDO_PIX_CLIENT_ID", "", "OAuth2 client id"),
		clientSecret: secret("pix-client-secret", "SALDO_PIX_CLIENT_SECRET", "OAuth2 client secret"),
		certFile:     s("pix-cert-file", "SALDO_PIX_CERT_FILE", "", "client certificate (PEM) the PSP issued, for mutual TLS"),
		keyFile:      s("pix-key-file", "SALDO_PIX_KEY_FILE", "", "private key (PEM) of the client certificate"),
		caFile:       s("pix-ca-file", "SALDO_PIX_CA_FILE", "", "the PSP's CA (PEM), optional: the system roots otherwise"),
		receivingKey: s("pix-key", "SALDO_PIX_KEY", "", "saldo's Pix key (DICT) cobs are created on and sends are paid from"),
		payerKey:     s("pix-payer-key", "SALDO_PIX_PAYER_KEY", "", "the Pix key sends are paid from, when not --pix-key"),
		webhookSecret: secret("pix-webhook-secret", "SALDO_PIX_WEBHOOK_SECRET",
			"secret the registered webhook URL carries as ?hmac= (POST /v1/webhooks/<pix-name>)"),
		consistencyWindow: fs.Duration("pix-consistency-window", env.duration("SALDO_PIX_CONSISTENCY_WINDOW", pix.DefaultConsistencyWindow),
			"how long a new Pix operation may stay invisible to a lookup (R16) ($SALDO_PIX_CONSISTENCY_WINDOW)"),
	}
}

// secrets fills the secrets the flags left empty from the environment.
func (f *pixFlags) secrets() {
	if *f.clientSecret == "" {
		*f.clientSecret = os.Getenv("SALDO_PIX_CLIENT_SECRET")
	}
	if *f.webhookSecret == "" {
		*f.webhookSecret = os.Getenv("SALDO_PIX_WEBHOOK_SECRET")
	}
}

func (f *pixFlags) enabled() bool { return *f.baseURL != "" || *f.sendBaseURL != "" }

// problems lists what is missing, checked with the other flags.
func (f *pixFlags) problems() []string {
	f.secrets()
	var out []string
	need := func(v *string, flagName string) {
		if *v == "" {
			out = append(out, "--"+flagName+" is required with --pix-base-url or --pix-send-base-url")
		}
	}
	need(f.tokenURL, "pix-token-url")
	need(f.clientID, "pix-client-id")
	need(f.clientSecret, "pix-client-secret")
	need(f.certFile, "pix-cert-file")
	need(f.keyFile, "pix-key-file")
	need(f.receivingKey, "pix-key")
	if *f.consistencyWindow <= 0 {
		out = append(out, "--pix-consistency-window must be positive")
	}
	return out
}

// build makes the adapter; it reads the certificate files, so a bad one
// refuses the start.
func (f *pixFlags) build(settings providers.HTTPSettings, log *slog.Logger) (*pix.Provider, error) {
	f.secrets()
	p, err := pix.New(pix.Config{Name: *f.name, BaseURL: *f.baseURL, SendBaseURL: *f.sendBaseURL, TokenURL: *f.tokenURL,
		ClientID: *f.clientID, ClientSecret: providers.Secret(*f.clientSecret), CertFile: *f.certFile, KeyFile: *f.keyFile, CAFile: *f.caFile,
		ReceivingKey: *f.receivingKey, PayerKey: *f.payerKey, WebhookSecret: providers.Secret(*f.webhookSecret),
		ConsistencyWindow: *f.consistencyWindow, HTTP: settings})
	if err != nil {
		return nil, fmt.Errorf("provider %s: %w", *f.name, err)
	}
	if *f.webhookSecret == "" {
		log.Warn("SALDO_PIX_WEBHOOK_SECRET is empty: every Pix webhook will be refused (401); attempts still resolve by lookup",
			"provider", *f.name)
	}
	return p, nil
}
