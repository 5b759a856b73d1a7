package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Registration (saldo serve's strict mode) refuses internal targets written
// in forms the existing tests do not try: a percent-encoded host, a
// trailing dot, zone ids, IPv4-mapped and SIIT forms, the unspecified IPv6
// address, unique-local IPv6, userinfo tricks.
func TestRegistrationRefusesInternalTargetsInOtherForms(t *testing.T) {
	t.Parallel()
	x := newBareAPI(t, false)
	for _, u := range []string{"http://[::]/", "http://[fd00::1]/", "http://[::ffff:a9fe:a9fe]/", "http://169.254.169.254./",
		"http://LOCALHOST/", "http://localhost.:80/", "http://0/", "http://127.1/", "http://[fe80::1%25eth0]/",
		"http://%31%32%37.0.0.1/", "http://127.0.0.1%2e/", "http://0.0.0.0:5432/", "http://[0:0:0:0:0:ffff:7f00:1]/",
		"http://[::ffff:0:7f00:1]/", "http://127.0.0.1:80@example.com/", "http://[::1]:5432/", "http://0177.0.0.1/", "http://10.0.0.1./", "http://[64:ff9b::7f00:1]/"} {
		status, body, err := x.register(u)
		if assert.NoError(t, err) {
			assert.Equal(t, http.StatusBadRequest, status, "%s: %s", u, body)
		}
	}
}
