package attempts

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestVerifyFindsViolations: history that breaks R9 is reported.
func TestVerifyFindsViolations(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	a := h.open(newSubject())
	_, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	h.requireNoViolations()

	// Someone appends a transition out of a final status (events are
	// append-only, so the forgery stays visible).
	_, err = h.pool.Exec(h.ctx, `INSERT INTO attempt_events (attempt_id, at, type, actor, from_status, to_status, reason)
		VALUES ($1, $2, 'transition', 'operator', 'succeeded', 'failed', 'forged')`, a.ID, time.Now())
	require.NoError(t, err)
	vs, err := Verify(h.ctx, h.pool)
	require.NoError(t, err)
	codes := map[string]bool{}
	for _, v := range vs {
		codes[v.Code] = true
		require.Equal(t, a.ID.String(), v.AttemptID)
		require.NotEmpty(t, v.String())
	}
	require.Equal(t, map[string]bool{"final_changed": true, "broken_history": true, "status_mismatch": true}, codes)

	// Two open attempts for a subject need the index gone: the database
	// itself refuses them.
	b := h.open(newSubject())
	_, err = h.pool.Exec(h.ctx, `INSERT INTO attempts (id, kind, subject_id, provider, operation, idempotency_key,
		reference, payload, payload_sha256, created_at, updated_at)
		SELECT gen_random_uuid(), kind, subject_id, provider, operation, 'k-' || gen_random_uuid(),
		replace(gen_random_uuid()::text, '-', ''), payload, payload_sha256, now(), now() FROM attempts WHERE id = $1`, b.ID)
	require.ErrorContains(t, err, "attempts_one_open_per_subject")
}
