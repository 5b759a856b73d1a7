package sim_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// R16: the sim adapter's lookup claims absence only from a readable 200
// with nothing in it. Anything else in front of the sim (a proxy's 404, a
// 204, a 503) sets Exchange.Err, so the resolver reads it inconclusive
// and never fails an attempt that may have paid on such an answer.
func TestLookupNon200IsNoProofOfAbsence(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
	}{
		{http.StatusNotFound, `<html>404 Not Found</html>`},
		{http.StatusNotFound, `{"error":"not found"}`},
		{http.StatusNoContent, ``},
		{http.StatusAccepted, `{"data":[]}`},
		{http.StatusServiceUnavailable, `{}`},
	} {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(c.status)
				fmt.Fprint(w, c.body)
			}))
			t.Cleanup(srv.Close)
			lr, err := sim.NewProvider(srv.URL).Lookup(context.Background(), providers.OpPixTransfer, "0123456789abcdef0123456789abcdef")
			if err != nil {
				t.Fatal(err)
			}
			if lr.Found || lr.Exchange.Err == nil {
				t.Fatalf("HTTP %d: Found %v, Err %v; want an inconclusive lookup (Err set)", c.status, lr.Found, lr.Exchange.Err)
			}
		})
	}
	// A 200 with an empty list is the sim's "nothing visible": no error.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"data":[]}`)
	}))
	t.Cleanup(srv.Close)
	lr, err := sim.NewProvider(srv.URL).Lookup(context.Background(), providers.OpPixTransfer, "0123456789abcdef0123456789abcdef")
	if err != nil || lr.Found || lr.Exchange.Err != nil || lr.Exchange.StatusCode != http.StatusOK {
		t.Fatalf("empty 200: %+v, %v", lr, err)
	}
}
