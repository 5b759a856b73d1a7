package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/providers"
)

// R4, R8, R16: migration 00105 lands on a database whose attempts were sent
// before any identity was recorded. The first start after the upgrade must
// not record whatever account it is configured for while the name has open
// attempts it cannot know were sent there (the mixed fleet the check exists
// for): it would look them up at its own account, read "not found", fail
// them and pay again. Refused until the operator confirms the account with
// --accept-provider-identity. Before, the first recording was silent
// (found by review).
func TestFirstRecordOfANameWithOpenAttemptsNeedsConfirmation_R16(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	other := startSim(t)
	insertAttempt(t, pool, "sim") // sent before 00105, to whichever sim the sender was configured for

	err := checkAs(t, pool, time.Second, []providers.Provider{other.NewProvider()})
	require.Error(t, err, "the first start recorded an account for \"sim\" while an attempt under that name is open")
	require.Contains(t, err.Error(), "--accept-provider-identity sim")
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM provider_identities`).Scan(&n))
	require.Zero(t, n, "nothing recorded by a refused start")

	// Confirmed by the operator: recorded.
	require.NoError(t, checkAs(t, pool, time.Second, []providers.Provider{other.NewProvider()}, "sim"))
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM provider_identities`).Scan(&n))
	require.Equal(t, 1, n)
}
