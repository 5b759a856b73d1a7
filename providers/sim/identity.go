package sim

import (
	"context"
	"net/url"

	"github.com/saldo/saldo/providers"
)

var _ providers.Identifier = (*Provider)(nil)

// Identity of a sim is its base URL: each sim-provider process keeps its
// own operations, so another URL is another PSP (R16). No network. The
// account (stored, logged, shown in refusals) names the URL without its
// user information: a password in it (a sim behind a proxy with basic
// auth) must never reach the identity tables or a log (found by review);
// the whole URL is in Config, which is only hashed.
func (p *Provider) Identity(context.Context) (providers.Identity, error) {
	shown := p.baseURL
	if u, err := url.Parse(p.baseURL); err == nil && u.User != nil {
		u.User = nil
		shown = u.String()
	}
	return providers.Identity{Account: "sim at " + shown, Config: "sim base_url=" + p.baseURL,
		Secret: providers.Secret(p.secret)}, nil
}
