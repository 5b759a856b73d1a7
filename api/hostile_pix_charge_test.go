package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/hostile"
	"github.com/saldo/saldo/providers/sim"
)

// Hostile values in every field of a Pix charge body (expiry, payer name
// and tax id included; TestHostileBodiesNeverAnswer5xx sweeps a card
// charge) are refused with a 4xx or taken: never a 5xx.
func TestHostilePixChargeBodiesNeverAnswer5xx(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	base := map[string]any{"kind": "pix", "amount": "10.00", "currency": "BRL", "pix_expires_in_seconds": 3600,
		"payer_name": "João", "payer_tax_id": "12345678909", "description": "d", "metadata": map[string]any{"k": "v"}}
	r := e.post("/v1/merchants/m1/charges", e.m1, "pc-base", base)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	values := []any{nil, true, 0, -1, 59, 60, 86400, 86401, 1e18, 9.3e18, 1.5, "60", "", " ", "ü€😀", strings.Repeat("é", 200),
		strings.Repeat("é", 201), strings.Repeat("a", 5000), "12345678909", "00000000000", "11111111111111", "1e3", "0x10", "١٢٣",
		"12.345", "NaN", []any{}, map[string]any{}, "\u202e\u200b", "a\u2028b", "<script>", "tok_visa"}
	fields := append([]string{"card_token", "splits", "payer_name", "payer_tax_id", "pix_expires_in_seconds"}, hostile.LeafPaths(base)...)
	var failures []string
	n := 0
	hostile.Each(base, fields, values, func(f string, v, body any) {
		n++
		got, err := e.exchange(req{method: http.MethodPost, path: "/v1/merchants/m1/charges", key: e.m1, body: body,
			header: map[string]string{"Idempotency-Key": fmt.Sprintf("pc-%d", n)}})
		failures = noteFailure(failures, fmt.Sprintf("%s=%.60v", f, v), got, err)
	})
	require.Empty(t, failures, strings.Join(failures, "\n"))
}
