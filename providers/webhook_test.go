package providers_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// TestWebhookEventStorable: a verified event whose text or data PostgreSQL
// would refuse (NUL, invalid UTF-8, the JSON escape \u0000 that jsonb
// refuses) is ErrMalformedWebhook; an escaped backslash followed by
// "u0000" is ordinary text and is stored.
func TestWebhookEventStorable(t *testing.T) {
	t.Parallel()
	ok := providers.WebhookEvent{ID: "evt_1", Type: "payout.paid", Reference: "ref", Data: []byte(`{"a": "b"}`)}
	require.NoError(t, ok.Storable())
	for name, data := range map[string]string{
		"escaped backslash then u0000": `{"a": "C:\\u0000"}`,
		"two escaped backslashes":      `{"a": "\\\\u0000"}`,
		"a quote escape":               `{"a": "\"u0000"}`,
	} {
		ev := ok
		ev.Data = []byte(data)
		require.NoError(t, ev.Storable(), name)
	}
	for name, data := range map[string]string{
		"NUL escape":                   `{"a": "x\u0000y"}`,
		"NUL escape after a backslash": `{"a": "\\\u0000"}`,
		"NUL escape in a key":          `{"\u0000": 1}`,
		"raw NUL":                      "{\"a\": \"\x00\"}",
		"invalid UTF-8":                "{\"a\": \"\xff\"}",
	} {
		ev := ok
		ev.Data = []byte(data)
		require.ErrorIs(t, ev.Storable(), providers.ErrMalformedWebhook, name)
	}
	bad := ok
	bad.Reference = "ref\x00"
	require.ErrorIs(t, bad.Storable(), providers.ErrMalformedWebhook)
	bad = ok
	bad.FailureReason = "\xfe"
	require.ErrorIs(t, bad.Storable(), providers.ErrMalformedWebhook)
}
