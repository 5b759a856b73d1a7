package api

import (
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// errCrossSiteWrite (403 forbidden, a code the OpenAPI document lists): a
// state-changing request authenticated by HTTP Basic credentials that does
// not prove it comes from the tool's own pages.
var errCrossSiteWrite = &apiError{status: http.StatusForbidden, code: "forbidden", title: "Forbidden",
	detail: "a request that changes state with HTTP Basic credentials must come from this origin's own pages " +
		"(Sec-Fetch-Site same-origin, Origin naming this host) or, from a non-browser client, be sent as application/json; " +
		"or authenticate with Authorization: Bearer. Nothing was done"}

// RequireRoles guards an operator tool mounted next to the API (the River
// UI at /ops/river): the caller authenticates with an API key of one of the
// roles, as a bearer token or, for browsers, as the password of HTTP Basic
// auth (any user name). 401 asks the browser for credentials; 403 for a key
// of another role.
//
// A browser re-sends cached Basic credentials by itself, cross-site form
// posts included, and the River UI changes state on POST/PUT/PATCH/DELETE
// whatever the body's Content-Type. So a Basic-authenticated request with an
// unsafe method must come from the same origin (basicWriteAllowed), or it is
// 403 and never reaches the tool. Bearer requests are not concerned: no
// browser adds that header by itself.
func (s *Server) RequireRoles(h http.Handler, roles ...Role) http.Handler {
	guarded := s.authenticate(s.allow(roles...)(h))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, secret, ok := r.BasicAuth(); ok {
			if !basicWriteAllowed(r) {
				s.log.WarnContext(r.Context(), "api: cross-site write with Basic credentials refused", "method", r.Method,
					"path", r.URL.Path, "origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
				s.problem(w, r, errCrossSiteWrite)
				return
			}
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+secret)
		} else if r.Header.Get("Authorization") == "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="saldo operators"`)
		}
		guarded.ServeHTTP(w, r)
	})
}

// basicWriteAllowed says whether a request carrying HTTP Basic credentials
// may reach the tool. Safe methods (GET, HEAD, OPTIONS) may. Any other must
// be same-origin:
//   - Sec-Fetch-Site, when present (every current browser sends it; a page
//     cannot set it), must be "same-origin";
//   - Origin, when present, must name the request's host ("null", sent by
//     sandboxed frames and some redirects, is refused);
//   - with neither (not a browser, or a browser too old to send them), the
//     body must be declared application/json: a cross-site form cannot send
//     that Content-Type, and a cross-site fetch that does needs a CORS
//     preflight, which the tool never grants.
//
// application/json is not required of requests that prove same-origin with
// the headers above: the River UI's own pages post their JSON with fetch and
// no Content-Type (text/plain;charset=UTF-8) and pause or resume a queue with
// a PUT that has no body.
func basicWriteAllowed(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	site := r.Header.Get("Sec-Fetch-Site")
	if site != "" && site != "same-origin" {
		return false
	}
	origins, hasOrigin := r.Header["Origin"]
	if hasOrigin {
		if len(origins) != 1 {
			return false
		}
		u, err := url.Parse(origins[0])
		if err != nil || origins[0] == "null" || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return false
		}
	}
	if site == "" && !hasOrigin {
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		return err == nil && mt == "application/json"
	}
	return true
}
