package api

import (
	"net/http"
)

// RequireRoles guards an operator tool mounted next to the API (the River
// UI at /ops/river): the caller authenticates with an API key of one of the
// roles, as a bearer token or, for browsers, as the password of HTTP Basic
// auth (any user name). 401 asks the browser for credentials; 403 for a key
// of another role.
func (s *Server) RequireRoles(h http.Handler, roles ...Role) http.Handler {
	guarded := s.authenticate(s.allow(roles...)(h))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, secret, ok := r.BasicAuth(); ok {
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+secret)
		} else if r.Header.Get("Authorization") == "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="saldo operators"`)
		}
		guarded.ServeHTTP(w, r)
	})
}
