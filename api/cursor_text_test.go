package api_test

import (
	"encoding/hex"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers/sim"
)

// "Every 5xx a client can trigger is a defect; bad input gets a clear 4xx
// naming the field": a well-formed keyset cursor (hex of a JSON pair, as
// keyset.Encode makes) whose id carries a NUL reached PostgreSQL as a text
// parameter, which refused it (22021): a 500 on the reconciliation, payout
// and charge listings. keyset.Decode refuses it: 400 on cursor.
func TestCursorWithNULIs400(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	var failures []string
	for _, raw := range []string{`["2026-12-02T10:00:00Z","dv_\u0000x"]`, "[\"2026-12-02T10:00:00Z\",\"dv_\xff\"]"} {
		cur := hex.EncodeToString([]byte(raw))
		for _, c := range []struct{ path, key string }{
			{"/v1/reconcile/divergences", e.operator},
			{"/v1/reconcile/runs", e.operator},
			{"/v1/merchants/m1/payouts", e.m1},
			{"/v1/merchants/m1/charges", e.m1},
		} {
			r, _ := e.exchange(req{method: http.MethodGet, path: c.path + "?cursor=" + url.QueryEscape(cur), key: c.key})
			if r.Status != http.StatusBadRequest || r.field(t) != "cursor" {
				failures = append(failures, c.path+": "+string(r.Body))
			}
		}
	}
	require.Empty(t, failures, "listings that did not answer 400 on cursor to a cursor whose id has a NUL or invalid UTF-8")
}
