package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// R16, secrets: a sim behind a proxy that asks for basic auth is configured
// with the credentials in its URL (--sim-url http://user:password@host, as
// Go's HTTP client sends them). The identity check stores the account text
// in provider_identities.account and provider_identity_events (readable
// by the read-only role, kept forever, append-only) and logs it: the Pix
// adapter strips userinfo from its hosts for this reason, and now the sim
// adapter does too. Before, the password landed in the table, the events
// and the log (found by review).
func TestSimURLPasswordNeverReachesTheIdentityTablesOrLog_R16(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	srv := startSim(t)
	u, err := url.Parse(srv.URL())
	require.NoError(t, err)
	u.User = url.UserPassword("ops", "s3cr3t-proxy-password")
	prov := sim.NewProvider(u.String())

	var logs bytes.Buffer
	require.NoError(t, checkProviderIdentities(ctx, identityCheck{Pool: pool, Providers: []providers.Provider{prov},
		Wait: time.Second, Actor: "test", Log: slog.New(slog.NewTextHandler(&logs, nil))}))

	var stored string
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT row_to_json(i)::text FROM provider_identities i)
		|| (SELECT json_agg(e)::text FROM provider_identity_events e)`).Scan(&stored))
	require.NotContains(t, stored, "s3cr3t-proxy-password", "the sim URL's password is stored in the identity tables")
	require.NotContains(t, logs.String(), "s3cr3t-proxy-password", "the sim URL's password is logged")
}
