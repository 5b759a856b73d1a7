package api_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/providers/sim"
)

// A successful key lookup is reused for Config.AuthCacheTTL (issue 19: no
// database round trip per request): a key revoked behind the server's back
// (another process: saldo keys revoke, another API process) still works
// until then and not after; one revoked through RevokeKey in this process
// stops at once; an unknown key is never cached. Not parallel: any
// RevokeKey in the process empties every cache, and other tests revoke keys.
func TestAuthCacheBoundsRevocationElsewhere(t *testing.T) {
	e := setup(t, sim.Config{})
	srv, err := api.New(api.Config{Pool: e.pool, Payouts: e.pay, Attempts: e.att, Logger: slog.New(slog.DiscardHandler),
		AuthCacheTTL: 5 * time.Second}) // the second request below must come within it: 2 s was tight on a loaded machine
	require.NoError(t, err)
	h := httptest.NewServer(srv)
	defer h.Close()
	get := func(secret string) int {
		req, err := http.NewRequest(http.MethodGet, h.URL+"/v1/merchants/m1/balances", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	k, secret, err := api.CreateKey(e.ctx, e.pool, api.RoleMerchant, "m1", "cached", time.Now())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, get(secret))
	// Revoked by another process: this one learns it within the TTL.
	_, err = e.pool.Exec(e.ctx, `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, k.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, get(secret), "served from the cache")
	require.Eventually(t, func() bool { return get(secret) == http.StatusUnauthorized }, 15*time.Second, 20*time.Millisecond,
		"the revocation was not seen within three times the TTL")
	start := time.Now()
	require.Equal(t, http.StatusUnauthorized, get(secret))
	require.Less(t, time.Since(start), time.Second)

	// Revoked through RevokeKey in this process: at once.
	k2, secret2, err := api.CreateKey(e.ctx, e.pool, api.RoleMerchant, "m1", "cached 2", time.Now())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, get(secret2))
	require.NoError(t, api.RevokeKey(e.ctx, e.pool, k2.ID, time.Now()))
	require.Equal(t, http.StatusUnauthorized, get(secret2))

	// An unknown key is looked up every time: created afterwards, it works.
	require.Equal(t, http.StatusUnauthorized, get("sk_notyet"))
	// A negative TTL turns the cache off: a revocation elsewhere is seen at once.
	off, err := api.New(api.Config{Pool: e.pool, Payouts: e.pay, Attempts: e.att, AuthCacheTTL: -1})
	require.NoError(t, err)
	h2 := httptest.NewServer(off)
	defer h2.Close()
	k3, secret3, err := api.CreateKey(e.ctx, e.pool, api.RoleMerchant, "m1", "uncached", time.Now())
	require.NoError(t, err)
	do := func() int {
		req, err := http.NewRequest(http.MethodGet, h2.URL+"/v1/merchants/m1/balances", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret3)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	require.Equal(t, http.StatusOK, do())
	_, err = e.pool.Exec(e.ctx, `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, k3.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, do())
}
