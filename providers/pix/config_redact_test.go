package pix_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/saldo/saldo/providers/pix"
)

// The Pix adapter's secrets (the OAuth2 client secret, the webhook secret)
// never show when its Config is printed, logged or marshalled, as Stripe's
// do not: an operator who logs the configuration at start, or a panic that
// prints it, leaks nothing. The tokens the adapter fetches are never in
// Config (tokenCache), and the client key is read from a file (KeyFile, a
// path, not a secret).
func TestConfigNeverShowsItsSecrets(t *testing.T) {
	const clientSecret, hookSecret = "cl1ent-s3cret-canary", "w3bhook-s3cret-canary"
	cfg := pix.Config{Name: "pix", BaseURL: "https://psp.example/v2", TokenURL: "https://psp.example/oauth/token",
		ClientID: "saldo", ClientSecret: clientSecret, ReceivingKey: "chave@example.com", WebhookSecret: hookSecret,
		KeyFile: "/etc/saldo/pix.key"}

	var outs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		outs = append(outs, fmt.Sprintf(verb, cfg), fmt.Sprintf(verb, &cfg))
	}
	for _, newHandler := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		var b bytes.Buffer
		log := slog.New(newHandler(&b))
		log.Info("pix configured", "config", cfg, "config_ptr", &cfg, "client_secret", cfg.ClientSecret,
			"webhook_secret", cfg.WebhookSecret)
		outs = append(outs, b.String())
	}
	j, err := json.Marshal(cfg)
	if err != nil {
		t.Errorf("the configuration marshals to JSON: %v", err)
	}
	outs = append(outs, string(j))

	for _, out := range outs {
		for _, secret := range []string{clientSecret, hookSecret} {
			if strings.Contains(out, secret) {
				t.Errorf("a secret shows: %s", out)
			}
		}
	}
	// What is not secret still shows, so a logged configuration is of use.
	if !strings.Contains(string(j), "psp.example") || !strings.Contains(outs[1], "saldo") {
		t.Errorf("the configuration's other fields are missing: %s / %s", j, outs[1])
	}
	if !strings.Contains(string(j), "[redacted]") {
		t.Errorf("a set secret shows as [redacted]: %s", j)
	}
}
