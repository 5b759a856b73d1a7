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

// R22, R23 (migration 00108, the ledger's chain v2). Two open payouts of the
// same merchant and amount each hold a reserve. Someone who can bypass the
// ledger's append-only triggers swaps the reserves' causes and keys: each
// payout now seems reserved by the other's transaction. Every amount,
// balance and count is as before, so no payout, attempt or balance check
// can tell; the hash chain of the reserve's accounts covers the cause and
// the key, and `saldo audit verify` (audit.Run, ledger.Verify) reports it.
// Swapping two merchants' accounts' codes is reported too (their genesis).
func TestRunReportsReattributedReserveAndSwappedAccounts_R22_R23(t *testing.T) {
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
	for _, m := range []string{"m1", "m2"} {
		_, err = merchants.Create(ctx, pool, m, "Loja "+m)
		require.NoError(t, err)
		_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: m, Amount: money.MustParse("100.00", "BRL"),
			Key: "k-" + m, Reason: "test", Actor: "test"})
		require.NoError(t, err)
	}
	for _, dest := range []string{"a@example.com", "b@example.com"} {
		_, err := po.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
			Amount:      money.MustParse("10.00", "BRL"),
			Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: dest}}})
		require.NoError(t, err)
	}
	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())

	admin, err := pgx.Connect(ctx, testdb.AdminURL(t, pool))
	require.NoError(t, err)
	defer admin.Close(ctx)
	exec := func(q string, args ...any) {
		t.Helper()
		tag, err := admin.Exec(ctx, q, args...)
		require.NoError(t, err, q)
		require.Positive(t, tag.RowsAffected(), q)
	}
	_, err = admin.Exec(ctx, `SET session_replication_role = replica`)
	require.NoError(t, err)
	var ids []int64
	var keys, causes []string
	rows, err := admin.Query(ctx, `SELECT id, idempotency_key, cause_id FROM ledger_transactions
		WHERE cause_kind = $1 ORDER BY id`, payouts.CauseReserve)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		var key, cause string
		require.NoError(t, rows.Scan(&id, &key, &cause))
		ids, keys, causes = append(ids, id), append(keys, key), append(causes, cause)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, 2)
	exec(`UPDATE ledger_transactions SET idempotency_key = 'swap', cause_id = 'swap' WHERE id = $1`, ids[0])
	exec(`UPDATE ledger_transactions SET idempotency_key = $1, cause_id = $2 WHERE id = $3`, keys[0], causes[0], ids[1])
	exec(`UPDATE ledger_transactions SET idempotency_key = $1, cause_id = $2 WHERE id = $3`, keys[1], causes[1], ids[0])

	res, err = audit.Run(ctx, pool)
	require.NoError(t, err)
	for _, v := range res.Violations {
		require.Equal(t, "ledger/hash_chain_broken", v.Area+"/"+v.Check, "only the chain can tell: %s", res.Summary())
	}
	require.Len(t, res.Violations, 4, res.Summary()) // two legs of each reserve

	exec(`UPDATE ledger_accounts SET code = 'tmp' WHERE code = 'merchant/m1/available/BRL'`)
	exec(`UPDATE ledger_accounts SET code = 'merchant/m1/available/BRL', owner_id = 'm1' WHERE code = 'merchant/m2/available/BRL'`)
	exec(`UPDATE ledger_accounts SET code = 'merchant/m2/available/BRL', owner_id = 'm2' WHERE code = 'tmp'`)
	res, err = audit.Run(ctx, pool)
	require.NoError(t, err)
	found := map[string]int{}
	for _, v := range res.Violations {
		found[v.Area+"/"+v.Check]++
	}
	require.Equal(t, 2, found["ledger/chain_genesis_mismatch"], res.Summary())
}
