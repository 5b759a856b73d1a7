package sim

import (
	"context"

	"github.com/saldo/saldo/providers"
)

var _ providers.Identifier = (*Provider)(nil)

// Identity of a sim is its base URL: each sim-provider process keeps its
// own operations, so another URL is another PSP (R16). No network.
func (p *Provider) Identity(context.Context) (providers.Identity, error) {
	return providers.Identity{Account: "sim at " + p.baseURL, Config: "sim base_url=" + p.baseURL,
		Secret: providers.Secret(p.secret)}, nil
}
