package pix

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/saldo/saldo/providers"
)

var _ providers.Identifier = (*Provider)(nil)

// Identity of a Pix PSP, from the configuration alone (no network): the
// hosts of its APIs, the OAuth2 client id (one per account at the PSP) and
// the Pix keys cobs are created on and sends paid from (R16). Two Pix PSPs,
// or two accounts at one, differ in one of these. The client secret is
// only ever hashed (keyed) into the configuration's fingerprint.
func (p *Provider) Identity(context.Context) (providers.Identity, error) {
	c := p.cfg
	account := fmt.Sprintf("Pix PSP at %s, client id %q, receiving key %q, payer key %q",
		strings.Join(hosts(c.BaseURL, c.SendBaseURL, c.TokenURL), " "), c.ClientID, c.ReceivingKey, c.PayerKey)
	config := fmt.Sprintf("pix base_url=%s send_base_url=%s token_url=%s client_id=%s receiving_key=%s payer_key=%s cert_file=%s",
		c.BaseURL, c.SendBaseURL, c.TokenURL, c.ClientID, c.ReceivingKey, c.PayerKey, c.CertFile)
	return providers.Identity{Account: account, Config: config, Secret: c.ClientSecret}, nil
}

// hosts are the distinct scheme://host of the URLs set, in order.
func hosts(urls ...string) []string {
	var out []string
	seen := map[string]bool{}
	for _, raw := range urls {
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil {
			continue // New refused it already
		}
		h := u.Scheme + "://" + u.Host
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	return out
}
