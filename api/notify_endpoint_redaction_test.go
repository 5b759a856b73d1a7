package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers/sim"
)

// A notification URL often carries the receiver's credential in its path
// or query: the merchant's own key lists it whole, auditors and admins see
// scheme://host only (auditors read everything but never a merchant's
// secret). Before, every role read the whole URL (found by review).
func TestEndpointURLsAreWholeOnlyForTheirMerchant(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	const u = "https://hooks.example.com/services/T000/B000/XXXXsecretXXXX?token=abc"
	r := e.post("/v1/merchants/m1/notification-endpoints", e.m1, "", map[string]any{"url": u})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	for _, c := range []struct {
		key, want string
	}{{e.m1, u}, {e.auditor, "https://hooks.example.com"}, {e.admin, "https://hooks.example.com"}} {
		l := e.get("/v1/merchants/m1/notification-endpoints", c.key)
		require.Equal(t, http.StatusOK, l.Status, string(l.Body))
		data := l.json(t)["data"].([]any)
		require.Len(t, data, 1)
		require.Equal(t, c.want, data[0].(map[string]any)["url"])
		if c.key != e.m1 {
			require.NotContains(t, string(l.Body), "secret")
		}
	}
}
