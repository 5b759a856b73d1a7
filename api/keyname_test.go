package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/internal/testdb"
)

// A key's name is limited in characters, not bytes, and must be valid
// UTF-8 without NUL (refused before the INSERT, which would fail in
// PostgreSQL).
func TestCreateKeyNameLimitsInCharacters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	k, _, err := api.CreateKey(ctx, pool, api.RoleAdmin, "", strings.Repeat("ã", 200), time.Now())
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("ã", 200), k.Name)
	for name, bad := range map[string]string{
		"201 chars": strings.Repeat("ã", 201), "invalid utf-8": "ops \xff", "NUL": "ops\x00",
	} {
		_, _, err := api.CreateKey(ctx, pool, api.RoleAdmin, "", bad, time.Now())
		require.ErrorIs(t, err, api.ErrInvalidKey, name)
	}
}
