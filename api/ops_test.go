package api_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/providers/sim"
)

// RequireRoles guards operator tools (the River UI): bearer or HTTP Basic
// password with a key of the roles; 401 asks a browser for credentials.
func TestRequireRoles(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	tool := httptest.NewServer(e.api.RequireRoles(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("river ui"))
	}), api.RoleOperator, api.RoleAdmin))
	t.Cleanup(tool.Close)
	call := func(set func(*http.Request)) *http.Response {
		r, err := http.NewRequest(http.MethodGet, tool.URL+"/ops/river", nil)
		require.NoError(t, err)
		set(r)
		res, err := http.DefaultClient.Do(r)
		require.NoError(t, err)
		res.Body.Close()
		return res
	}
	res := call(func(*http.Request) {})
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	require.Contains(t, res.Header.Values("WWW-Authenticate"), `Basic realm="saldo operators"`)
	require.Equal(t, http.StatusOK, call(func(r *http.Request) { r.SetBasicAuth("anyone", e.operator) }).StatusCode)
	require.Equal(t, http.StatusOK, call(func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+e.admin) }).StatusCode)
	require.Equal(t, http.StatusForbidden, call(func(r *http.Request) { r.SetBasicAuth("", e.m1) }).StatusCode)
	require.Equal(t, http.StatusUnauthorized, call(func(r *http.Request) { r.SetBasicAuth("", "sk_wrong") }).StatusCode)
}
