package api_test

// Hostile review (rv-console): regression guards. Every test here PASSED on
// the reviewed code: the suspicions they encode turned out fine.

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers/sim"
)

// Guard: a key revoked after an idempotent POST cannot read its stored
// answer back by replaying the request (authentication runs before the
// replay), and an auditor's POST with an Idempotency-Key is refused before
// any claim is written.
func TestReviewRevokedKeyAndAuditorGetNoIdempotentReplay(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	r := e.post("/v1/merchants/m1/pix-transfers", e.m1, "rv-1", pixBody("1.00"))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	r = e.post("/v1/merchants/m1/pix-transfers", e.auditor, "rv-1", pixBody("1.00"))
	require.Equal(t, http.StatusForbidden, r.Status)
	var claims int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM idempotent_requests r JOIN api_keys k ON k.id = r.key_id
		WHERE k.role = 'auditor'`).Scan(&claims))
	require.Zero(t, claims)

	keys := e.get("/v1/keys?merchant_id=m1", e.admin).json(t)["data"].([]any)
	require.Len(t, keys, 1)
	require.Equal(t, http.StatusOK, e.post("/v1/keys/"+keys[0].(map[string]any)["id"].(string)+"/revoke", e.admin, "", nil).Status)
	r = e.post("/v1/merchants/m1/pix-transfers", e.m1, "rv-1", pixBody("1.00"))
	require.Equal(t, http.StatusUnauthorized, r.Status)
	require.Empty(t, r.Header.Get("Idempotent-Replayed"))
	e.auditClean()
}
