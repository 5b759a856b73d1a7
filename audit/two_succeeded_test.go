package audit_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// The audit reports an intent with two successful provider operations
// (attempts two_succeeded). The database refuses that state
// (attempts_one_succeeded_per_subject), so a superuser drops the index
// first, as damage outside saldo would.
func TestRunReportsTwoSucceededAttempts_R19(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	srv := sim.NewServer(sim.Config{}).Start()
	t.Cleanup(srv.Close)
	prov := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: 5 * time.Second}))
	att, err := attempts.New(attempts.Config{Pool: pool, Providers: map[string]providers.Provider{prov.Name(): prov}})
	require.NoError(t, err)
	po, err := payouts.New(payouts.Config{Pool: pool, Attempts: att, Provider: prov.Name()})
	require.NoError(t, err)
	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("100.00", "BRL"),
		Key: "k", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	p, err := po.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount:      money.MustParse("10.00", "BRL"),
		Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "a@example.com"}}})
	require.NoError(t, err)
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
