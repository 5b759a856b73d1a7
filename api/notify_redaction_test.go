package api_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/providers"
)

// Secrets never reach logs (saldo's rule; docs/pitfalls.md, "An HTTP
// error's text quotes the whole URL"). A failed delivery's transport error
// is net/http's *url.Error, whose text quotes the merchant's whole URL.
// Receivers commonly authenticate by a token in the URL (a query parameter,
// a path segment as Slack's and Discord's webhooks, user:pass@), so the
// delivery error is written with the URL cut to scheme://host: in the WARN
// log, in notification_events.last_error, and in the error returned to River
// (kept in the job's errors, shown at /ops/river).
func TestNotificationFailureKeepsURLSecretsOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	_, err := merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	const secret = "s3cr3t-merchant-token"
	// Nothing listens on port 1: connection refused. (With DenyPrivateNetworks
	// the refusal text carries the URL the same way.)
	for i, url := range []string{
		"http://127.0.0.1:1/hooks/saldo?token=" + secret,
		"http://127.0.0.1:1/hooks/" + secret + "/saldo",
		"http://user:" + secret + "@127.0.0.1:1/hooks",
		"http://127.0.0.1:1/hooks#" + secret,
	} {
		ep, ev := fmt.Sprintf("we_%032d", i+1), fmt.Sprintf("evt_%032d", i+1)
		_, err = pool.Exec(ctx, `INSERT INTO notification_endpoints (id, merchant_id, url, secret, created_at)
			VALUES ($1, 'm1', $2, 'whsec_x', now())`, ep, url)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO notification_events (id, endpoint_id, merchant_id, type, object_id, dedupe_key, payload, created_at)
			VALUES ($1, $2, 'm1', 'payout.succeeded', 'po_1', 'd', '{}', now())`, ev, ep)
		require.NoError(t, err)

		var logs bytes.Buffer
		n, err := api.NewNotifier(api.NotifierConfig{Pool: pool, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
			HTTP: providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: time.Second}})
		require.NoError(t, err)
		derr := n.Deliver(ctx, ev)
		require.Error(t, derr)

		var lastError string
		require.NoError(t, pool.QueryRow(ctx, `SELECT last_error FROM notification_events WHERE id = $1`, ev).Scan(&lastError))
		t.Logf("log: %s", strings.TrimSpace(logs.String()))
		t.Logf("last_error: %s", lastError)
		require.NotContains(t, logs.String(), secret, "the merchant's URL secret reached the log (%s)", url)
		require.NotContains(t, lastError, secret, "the merchant's URL secret was stored in last_error (%s)", url)
		require.NotContains(t, derr.Error(), secret, "the merchant's URL secret was returned to River (%s)", url)
		// What is left still says what failed, and where.
		require.Contains(t, lastError, "http://127.0.0.1:1")
		require.Contains(t, lastError, "connection refused")
	}
}
