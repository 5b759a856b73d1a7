package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// A database that cannot answer the review queue's query is the server's
// trouble (503, retry later), not the client's: the route answered every
// error as 400 "malformed cursor", telling an operator to fix a request
// that had no cursor at all (found by review).
func TestReviewQueueDatabaseErrorIsNotBlamedOnTheCursor(t *testing.T) {
	t.Parallel()
	e, proxy := setupProxiedAPI(t)
	// Once answered: the operator's key is in the auth cache, so the
	// request below reaches the queue's query.
	r := e.get("/v1/review-queue", e.operator)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	proxy.Close()
	r = e.get("/v1/review-queue", e.operator)
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	require.NotContains(t, string(r.Body), "cursor")
	r = e.get("/v1/review-queue?cursor=not-a-cursor", e.operator)
	require.Equal(t, http.StatusBadRequest, r.Status, "a malformed cursor is still the client's: %s", r.Body)
}
