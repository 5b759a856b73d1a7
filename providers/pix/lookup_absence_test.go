package pix_test

import (
	"net/http"
	"testing"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/pix/pixtest"
)

// TestLookup2xxNot200IsNoProofOfAbsence_R16 shows R16: attempts.classifyLookup
// reads a 2xx without Found as "not found", which after the consistency
// window (5 min by default) fails an unknown send (FailureNotFound,
// transient: the payout retry policy opens a new idEnvio, R6). A GET
// answered 202 or 204 (a gateway, a PSP's "still processing") names
// nothing and proves nothing, so Lookup must carry an Exchange.Err for it.
func TestLookup2xxNot200IsNoProofOfAbsence_R16(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	for _, op := range []providers.Operation{providers.OpPixTransfer, providers.OpPixCharge} {
		for _, status := range []int{http.StatusAccepted, http.StatusNoContent} {
			e.srv.FailNext(status, "")
			lr := e.lookup(op, ref(t))
			code := lr.Exchange.StatusCode
			readAsNotFound := lr.Exchange.Err == nil && !lr.Found && (code == 404 || (code >= 200 && code < 300))
			if code != status {
				t.Fatalf("%s: status %d, want the canned %d", op, code, status)
			}
			if readAsNotFound {
				t.Errorf("%s: HTTP %d to the lookup GET is returned as a clean \"not found\"", op, code)
			}
		}
	}
}
