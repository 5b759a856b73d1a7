package keyset_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/keyset"
)

func TestRoundTripAndGarbage(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 12, 0, 0, 123456789, time.FixedZone("BRT", -3*3600))
	gotT, gotID, err := keyset.Decode(keyset.Encode(at, "po_1"))
	require.NoError(t, err)
	require.True(t, at.Equal(gotT))
	require.Equal(t, "po_1", gotID)
	for _, bad := range []string{"zz", "6869", hexOf(`["not a time","x"]`)} {
		_, _, err := keyset.Decode(bad)
		require.ErrorIs(t, err, keyset.ErrMalformed, bad)
	}
}

// "Every 5xx a client can trigger is a defect": a cursor whose id has a
// NUL (an escape PostgreSQL refuses in a text parameter, 22021) or whose
// bytes are not UTF-8 is refused here, as malformed.
func TestDecodeRefusesIDPostgreSQLRefuses(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{hexOf(`["2026-12-02T10:00:00Z","dv_\u0000x"]`), hexOf("[\"2026-12-02T10:00:00Z\",\"dv_\xff\"]"),
		hexOf("[\"2026-12-02T10:00:00Z\",\"dv_\x00\"]")} {
		_, _, err := keyset.Decode(bad)
		require.ErrorIs(t, err, keyset.ErrMalformed, bad)
	}
	_, id, err := keyset.Decode(hexOf(`["2026-12-02T10:00:00Z","dv_\u00e9"]`))
	require.NoError(t, err)
	require.Equal(t, "dv_é", id)
}

func hexOf(s string) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(s))
	for i := range len(s) {
		out = append(out, digits[s[i]>>4], digits[s[i]&15])
	}
	return string(out)
}

func TestLimitAndTrim(t *testing.T) {
	t.Parallel()
	require.Equal(t, 100, keyset.Limit(0, 100))
	require.Equal(t, 100, keyset.Limit(500, 100))
	require.Equal(t, 7, keyset.Limit(7, 100))
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	key := func(s string) (time.Time, string) { return at, s }
	page, next := keyset.Trim([]string{"a", "b"}, 2, key)
	require.Equal(t, []string{"a", "b"}, page)
	require.Empty(t, next)
	page, next = keyset.Trim([]string{"a", "b", "c"}, 2, key)
	require.Equal(t, []string{"a", "b"}, page)
	_, id, err := keyset.Decode(next)
	require.NoError(t, err)
	require.Equal(t, "b", id)
}
