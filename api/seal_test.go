package api_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/providers/sim"
)

// R22, R23: an auditor takes the ledger's seal over the API (JSON lines,
// every account's chain head) and it checks clean against the ledger it
// came from (ledger's seal tests show what it catches); a merchant's key
// and an operator's may not take it.
func TestAuditorTakesTheLedgersSealOverTheAPI_R22_R23(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	r := e.get("/v1/ledger/seal", e.auditor)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, "application/x-ndjson", r.Header.Get("Content-Type"))
	require.Contains(t, string(r.Body), `"format":"saldo-ledger-seal/1"`)
	require.Contains(t, string(r.Body), "merchant/m1/available/BRL")

	sum, rep, err := ledger.VerifySeal(e.ctx, e.pool, bytes.NewReader(r.Body))
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Violations)
	require.Positive(t, sum.Accounts)

	for _, key := range []string{e.m1, e.operator} {
		require.Equal(t, http.StatusForbidden, e.get("/v1/ledger/seal", key).Status)
	}
}
