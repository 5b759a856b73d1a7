package api_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers/sim"
)

// A time parameter (?at, ?from, ?to) whose offset puts the instant outside
// years 0001-9999 in UTC ("0000-01-01T00:00:00+23:59" is year -1) is a 400
// naming it: before, GET /v1/ledger/balance answered 200 echoing
// "-0001-12-31T00:01:00Z", not the RFC 3339 date-time docs/openapi.yaml
// promises (env.exchange validates every answer against it; found by
// review).
func TestTimeParameterOutsideRFC3339YearsIsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	for _, at := range []string{"0000-01-01T00:00:00+23:59", "9999-12-31T23:59:59.999999999-23:59"} {
		path := "/v1/ledger/balance?" + url.Values{"account": {"merchant/m1/available/BRL"}, "at": {at}}.Encode()
		r, err := e.exchange(req{method: http.MethodGet, path: path, key: e.auditor})
		require.NoError(t, err, "at=%s", at)
		require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
		require.Equal(t, "at", r.json(t)["field"])
	}
}
