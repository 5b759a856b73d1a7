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

// The audit sees damage across areas: a payout whose status lies about its
// attempt, and a reserve that no longer matches the open attempts (R22),
// are both reported, next to the ledger's own balance check.
func TestRunCatchesCrossAreaDamage(t *testing.T) {
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

	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())

	admin, err := pgx.Connect(ctx, testdb.AdminURL(t, pool))
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `SET session_replication_role = replica`)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `UPDATE payouts SET status = 'succeeded' WHERE id = $1`, p.ID)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `UPDATE ledger_accounts SET balance = balance - 10 WHERE code = 'merchant/m1/reserved/BRL'`)
	require.NoError(t, err)

	res, err = audit.Run(ctx, pool)
	require.NoError(t, err)
	require.False(t, res.OK())
	found := map[string]bool{}
	for _, v := range res.Violations {
		found[v.Area+"/"+v.Check] = true
	}
	require.True(t, found["payouts/status"], res.Summary())
	require.True(t, found["payouts/reserved"], res.Summary())
	require.True(t, found["ledger/balance_mismatch"], res.Summary())
}
