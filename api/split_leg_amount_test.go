package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers/sim"
)

// A split leg's amount is refused naming the leg ("legs[1].amount") when it
// is not a decimal, too precise, zero, or left empty: the problem's field
// names the request field at fault (docs/openapi.yaml), never "amount", a
// field a split request does not have.
func TestSplitLegEmptyAmountNamesTheLeg(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	dest := pixBody("1")["destination"]
	for i, amount := range []string{"abc", "1.001", "0", ""} {
		body := map[string]any{"currency": "BRL", "legs": []any{
			map[string]any{"operation": "pix_transfer", "amount": "1.00", "destination": dest},
			map[string]any{"operation": "pix_transfer", "amount": amount, "destination": dest}}}
		r := e.post("/v1/merchants/m1/splits", e.m1, "leg-amount-"+string(rune('a'+i)), body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%q: %s", amount, r.Body)
		require.Equal(t, "legs[1].amount", r.field(t), "leg amount %q: %s", amount, r.Body)
	}
	require.Zero(t, e.countRows("payouts"), "nothing was written")
}
