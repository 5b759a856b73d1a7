package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/saldo/saldo/providers"
)

var _ providers.Identifier = (*Provider)(nil)

// ErrIdentityUnknown is returned (wrapped) by Identity when Stripe did not
// say which account the key belongs to.
var ErrIdentityUnknown = errors.New("stripe: account of the API key unknown")

// Identity asks Stripe which account the API key belongs to (GET
// /v1/account, one exchange bounded by ctx; Stripe answers it for every
// key of an account, test or live) and reads the mode from the
// key's prefix: a test key and a live key of one account are two worlds
// whose objects never see each other (R16). The key itself is only in
// Secret, hashed (keyed) into the configuration's fingerprint.
func (p *Provider) Identity(ctx context.Context) (providers.Identity, error) {
	id := providers.Identity{Config: "stripe base_url=" + p.baseURL, Secret: providers.Secret(p.key)}
	ex := p.client.Do(ctx, http.MethodGet, p.baseURL+"/v1/account", p.headers(), nil)
	ex.Err = p.redactErr(ex.Err)
	if ex.Err != nil {
		return id, fmt.Errorf("%w: GET /v1/account: %w", ErrIdentityUnknown, ex.Err)
	}
	switch ex.StatusCode {
	case http.StatusOK:
	case http.StatusForbidden:
		return id, fmt.Errorf("%w: GET /v1/account answered 403: a restricted key needs read access to the account",
			ErrIdentityUnknown)
	default:
		// A 401 (key wrong or revoked), a 5xx: nothing about the account.
		return id, fmt.Errorf("%w: GET /v1/account answered %d", ErrIdentityUnknown, ex.StatusCode)
	}
	var acct struct {
		ID     string `json:"id"`
		Object string `json:"object"`
	}
	if err := json.Unmarshal(ex.Body, &acct); err != nil || acct.Object != "account" || !strings.HasPrefix(acct.ID, "acct_") {
		return id, fmt.Errorf("%w: GET /v1/account answered 200 without an account id", ErrIdentityUnknown)
	}
	// The base URL is not part of it (only of the fingerprint): a proxy in
	// front of Stripe is still the same account.
	id.Account = fmt.Sprintf("stripe account %s (%s mode)", acct.ID, keyMode(p.key))
	return id, nil
}

// keyMode is "live" or "test" from a secret (sk_) or restricted (rk_)
// key's prefix, "unknown" otherwise.
func keyMode(key string) string {
	for _, mode := range []string{"live", "test"} {
		if strings.HasPrefix(key, "sk_"+mode+"_") || strings.HasPrefix(key, "rk_"+mode+"_") {
			return mode
		}
	}
	return "unknown"
}
