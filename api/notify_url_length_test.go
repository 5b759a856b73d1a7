package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers/sim"
)

// A notification URL is stored as url.URL.String(), which percent-encodes
// spaces and non-ASCII characters ("é" becomes "%C3%A9"): its 2000
// characters are counted on that text, so a URL that grows past them is a
// 400 naming url. Before, only the input's bytes were counted and the
// table's CHECK refused the INSERT: a 500 for the client's own input (found
// by review).
func TestNotificationURLLengthCountsTheStoredText(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	for i, u := range []string{
		"https://example.com/" + strings.Repeat("é", 990),  // 2000 bytes, 1010 characters; stored 5960
		"https://example.com/" + strings.Repeat(" ", 1000), // 1020 bytes; stored 3020
	} {
		r := e.post("/v1/merchants/m1/notification-endpoints", e.m1, "", map[string]any{"url": u})
		require.Equal(t, http.StatusBadRequest, r.Status, "url #%d (%d bytes): %s", i, len(u), r.Body)
		require.Equal(t, "url", r.json(t)["field"])
	}
}
