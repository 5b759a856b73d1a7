package audit_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/internal/testdb"
)

// The audit reports an intent with two successful provider operations
// (attempts two_succeeded). The database refuses that state
// (attempts_one_succeeded_per_subject), so a superuser drops the index
// first, as damage outside saldo would.
func TestRunReportsTwoSucceededAttempts_R19(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, att, p := openPayout(t)
	r, err := att.Execute(ctx, *p.CurrentAttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, r.Attempt.Status)
	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())

	admin, err := pgx.Connect(ctx, testdb.AdminURL(t, pool))
	require.NoError(t, err)
	defer admin.Close(ctx)
	for _, q := range []string{
		`DROP INDEX attempts_one_succeeded_per_subject`,
		`SET session_replication_role = replica`,
		`INSERT INTO attempts (id, kind, subject_id, provider, operation, idempotency_key, reference, payload,
			payload_sha256, status, resolved_at, created_at, updated_at)
		 SELECT gen_random_uuid(), kind, subject_id, provider, operation, 'k-' || gen_random_uuid(),
			replace(gen_random_uuid()::text, '-', ''), payload, payload_sha256, 'succeeded', now(), now(), now()
		 FROM attempts WHERE id = '` + p.CurrentAttemptID.String() + `'`,
	} {
		_, err := admin.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	res, err = audit.Run(ctx, pool)
	require.NoError(t, err)
	found := map[string]bool{}
	for _, v := range res.Violations {
		found[v.Area+"/"+v.Check] = true
	}
	require.True(t, found["attempts/two_succeeded"], res.Summary())
}
