package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/providers/sim"
)

// Revoking a revoked key changes nothing and answers the key as it is
// (docs/openapi.yaml): also when the key is revoked by someone else (an
// admin's other request, saldo keys revoke) between the route's read of
// the key and its UPDATE. The route answered 404 not_found for a key that
// exists and is revoked: RevokeKey's "0 rows" (already revoked) became
// errNotFound, and an admin told "no such key" cannot tell that the key is
// in fact revoked.
func TestReviewInputRevokeRacingAnotherRevocationAnswersTheKey(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	k, _, err := api.CreateKey(e.ctx, e.pool, api.RoleAuditor, "", "books", e.clock.Now())
	require.NoError(t, err)

	// The other revocation holds the key's row: the route waits for it
	// (at its locking read since the revocation runs in the route's own
	// transaction; at its UPDATE before).
	other, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer other.Rollback(e.ctx) //nolint:errcheck
	_, err = other.Exec(e.ctx, `UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL`, k.ID, e.clock.Now())
	require.NoError(t, err)

	done := make(chan resp, 1)
	go func() {
		r, err := e.exchange(req{method: http.MethodPost, path: "/v1/keys/" + k.ID + "/revoke", key: e.admin})
		if err != nil {
			r = resp{Status: -1, Body: []byte(err.Error())}
		}
		done <- r
	}()
	require.Eventually(t, func() bool {
		var n int
		_ = e.pool.QueryRow(e.ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE '%api_keys%' AND pid <> pg_backend_pid()`).Scan(&n)
		return n == 1
	}, 30*time.Second, 5*time.Millisecond, "the route waits for the other revocation")
	require.NoError(t, other.Commit(e.ctx))

	r := <-done
	require.Equal(t, http.StatusOK, r.Status, "a revoked key is answered as it is: %s", r.Body)
	require.Equal(t, k.ID, r.json(t)["id"])
	require.NotEmpty(t, r.json(t)["revoked_at"])
}
