package api_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/providers/sim"
)

// A merchant has at most api.MaxNotificationEndpoints active endpoints
// (409 too_many_endpoints past it), also when registrations race: the count
// and the insert run under the merchant's row lock. Before, concurrent
// registrations all read the same count and 13-16 endpoints ended active,
// each getting every event (found by review).
func TestConcurrentRegistrationsKeepTheEndpointLimit(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	for i := 0; i < api.MaxNotificationEndpoints-1; i++ {
		r := e.post("/v1/merchants/m1/notification-endpoints", e.m1, "", map[string]any{"url": fmt.Sprintf("https://example.com/%d", i)})
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	}
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = e.exchange(req{method: http.MethodPost, path: "/v1/merchants/m1/notification-endpoints", key: e.m1,
				body: map[string]any{"url": fmt.Sprintf("https://example.com/c%d", i)}})
		}()
	}
	wg.Wait()
	var active int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM notification_endpoints
		WHERE merchant_id = 'm1' AND disabled_at IS NULL`).Scan(&active))
	require.LessOrEqual(t, active, api.MaxNotificationEndpoints, "active notification endpoints past the limit")
}
