package stripe_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/saldo/saldo/providers"
)

// TestLookupNon200IsNoProofOfAbsence_R16 shows R16: a lookup answer claims
// absence only when it proves it. Every Stripe lookup is a GET of a list
// or search endpoint, which never answers 404 (or 204) for "no such
// object": absence is only ever a readable, complete list without a
// match. attempts.classifyLookup reads a clean 404 or any 2xx without
// Found as "not found", which after the consistency window fails an
// unknown attempt (a payout or transfer that may have gone out) and
// releases its reserve; so Lookup must mark every non-200 (Stripe's own
// 404 "Unrecognized request URL" for a path prefix in BaseURL, an egress
// proxy or Search unavailable for the account; a proxy's 404 or 204)
// inconclusive.
func TestLookupNon200IsNoProofOfAbsence_R16(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		body   string
	}{
		{"stripe 404 unrecognized URL", http.StatusNotFound,
			`{"error":{"type":"invalid_request_error","message":"Unrecognized request URL (GET: /v1/payment_intents/search)."}}`},
		{"proxy 404", http.StatusNotFound, `<html>404 Not Found</html>`},
		{"204", http.StatusNoContent, ``},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(c.status)
				fmt.Fprint(w, c.body)
			}))
			t.Cleanup(srv.Close)
			p := newProvider(t, srv.URL)
			for _, op := range []providers.Operation{providers.OpCardCharge, providers.OpRefund, providers.OpAccountTransfer, providers.OpBankPayout} {
				lr, err := p.Lookup(context.Background(), op, ref())
				if err != nil {
					t.Fatalf("%s: %v", op, err)
				}
				code := lr.Exchange.StatusCode
				// attempts.classifyLookup's rule for lookupNotFound.
				readAsNotFound := lr.Exchange.Err == nil && !lr.Found && (code == 404 || (code >= 200 && code < 300))
				if readAsNotFound {
					t.Errorf("%s: HTTP %d from a list endpoint is returned as a clean \"not found\" (proof of absence after the window)", op, code)
				}
			}
		})
	}
}
