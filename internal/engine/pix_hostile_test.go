package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/internal/hostile"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
)

// A Pix webhook with the right token but hostile content at any depth (a
// misbehaving PSP, or a leaked token) answers a 4xx or a 2xx, never a 5xx
// (which the PSP would retry); the transfer it names ends as the PSP's own
// notice says, and the audit finds the books whole. (Another valid status
// is not hostile content: a notice with the right token that says
// NAO_REALIZADO fails the transfer, as R17 says; the token and mutual TLS
// are what keep others from sending one.)
func TestPixHostileWebhooksNeverAnswer5xx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, srv, pool := newPixEngine(t)
	hs := pixAPI(t, e, pool)
	tr, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: money.MustParse("25.00", "BRL"), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}}})
	require.NoError(t, err)
	res, err := e.Attempts.Execute(ctx, *tr.CurrentAttemptID)
	require.NoError(t, err)
	a := res.Attempt
	require.NoError(t, srv.SettleSend(a.Reference, true))
	var base map[string]any
	require.NoError(t, json.Unmarshal([]byte(`{"pix":[{"endToEndId":"`+a.ProviderID+`","valor":"25.00","horario":"`+
		time.Now().UTC().Format(time.RFC3339Nano)+`","status":"REALIZADO","tipo":"SOLICITACAO","chave":"`+pixKey+
		`","gnExtras":{"idEnvio":"`+a.Reference+`"}}]}`), &base))
	values := []any{nil, true, 0, -1, 1e308, "", " ", "NaN", "-25.00", "25.001", "99999999999999999999.99", "ü€😀",
		strings.Repeat("a", 5000), []any{}, map[string]any{}, "a\u0000b", "2026-13-01T00:00:00Z", "0001-01-01T00:00:00Z"}
	var failures []string
	n, refused := 0, 0
	post := func(what string, body []byte) int {
		n++
		r, err := http.Post(hs.URL+"/v1/webhooks/pix?hmac=w3bh00k&ignorar=/pix", "application/json", strings.NewReader(string(body)))
		require.NoError(t, err)
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode >= 500 {
			failures = append(failures, fmt.Sprintf("%.80s: %d %.200s", what, r.StatusCode, b))
		}
		if r.StatusCode >= 400 {
			refused++
		}
		return r.StatusCode
	}
	hostile.Each(base, hostile.LeafPaths(base), values, func(f string, v, body any) {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		post(fmt.Sprintf("%s=%.40v", f, v), b)
	})
	for _, raw := range append([]string{`{"pix":`, `{"pix":null}`, `{"pix":[null]}`}, hostile.Malformed...) {
		post("raw "+raw, []byte(raw))
	}
	require.Empty(t, failures, "%d of %d hostile notices answered a 5xx", len(failures), n)
	require.Positive(t, refused, "some hostile notices are refused")

	// The genuine notice still settles the transfer, and the books balance.
	ok, err := json.Marshal(base)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, post("the notice itself", ok))
	v, err := e.Payouts.Get(ctx, "m1", tr.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.StatusSucceeded, v.Status)
	ar, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, ar.OK(), ar.Summary())
}
