package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
)

// R22, R23: `saldo audit seal --out FILE` writes the ledger's chain heads
// whole or not at all and never over an existing file (an auditor's seal
// is evidence); `saldo audit verify --seal FILE` adds a "seal" line: OK on
// an untouched ledger, FAILED (exit 1) once history before the seal
// changed, and exit 2 ("could not run") for a file that is not a whole,
// unedited seal or does not exist.
func TestAuditSealThroughTheBinary_R22_R23(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	ctx := context.Background()
	dbURL := testdb.NewURL(t)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("100.00", "BRL"),
		Key: "k", Reason: "test", Actor: "test"})
	require.NoError(t, err)

	dir := t.TempDir()
	sealPath := filepath.Join(dir, "seal.jsonl")
	seal := exec.Command(bin, "audit", "seal", "--out", sealPath)
	seal.Env = append(os.Environ(), "SALDO_DATABASE_URL="+dbURL)
	out, err := seal.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Regexp(t, `saldo audit seal: \d+ accounts, taken at .*, digest [0-9a-f]{64}`, string(out))
	written, err := os.ReadFile(sealPath)
	require.NoError(t, err)
	require.Contains(t, string(written), "merchant/m1/available/BRL")

	again := exec.Command(bin, "audit", "seal", "--out", sealPath)
	again.Env = seal.Env
	out, err = again.CombinedOutput()
	require.Error(t, err, "%s", out)
	require.Contains(t, string(out), "never overwritten")
	after, err := os.ReadFile(sealPath)
	require.NoError(t, err)
	require.Equal(t, written, after)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no partial file is left beside the seal")

	res, code := runAuditVerify(t, bin, dbURL, "--seal", sealPath)
	require.Equal(t, 0, code, res)
	require.Regexp(t, `seal +OK +\d+ accounts sealed at`, res)

	damaged := filepath.Join(dir, "damaged.jsonl")
	require.NoError(t, os.WriteFile(damaged, []byte(strings.Replace(string(written), `"balance":"100"`, `"balance":"900"`, 1)), 0o600))
	res, code = runAuditVerify(t, bin, dbURL, "--seal", damaged)
	require.Equal(t, 2, code, res)
	require.Contains(t, res, "not a usable seal")
	res, code = runAuditVerify(t, bin, dbURL, "--seal", filepath.Join(dir, "missing.jsonl"))
	require.Equal(t, 2, code, res)

	admin, err := pgx.Connect(ctx, testdb.AdminURL(t, pool))
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `SET session_replication_role = replica`)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `UPDATE ledger_postings SET hash = sha256(hash)
		WHERE account_id = (SELECT id FROM ledger_accounts WHERE code = 'merchant/m1/available/BRL') AND seq = 1`)
	require.NoError(t, err)
	res, code = runAuditVerify(t, bin, dbURL, "--seal", sealPath)
	require.Equal(t, 1, code, res)
	require.Regexp(t, `seal +FAILED`, res)
	require.Contains(t, res, "seal_mismatch [merchant/m1/available/BRL seq 1]")
}
