package stripe_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers"
)

// Stripe's documented status codes include 424 "External Dependency
// Failed: the request couldn't be completed due to a failure in a
// dependency external to Stripe", and its error type api_error is "any
// other type of problem (e.g., a temporary problem with Stripe's
// servers)". Neither is a validation error or a decline: what happened to
// the money is not known, so neither is failed, whatever the status (R1,
// R2). A failed payout would release its reserve (R22) and could be
// retried under a new key: a second payout if the first went out.
func TestAPIErrorOrDependencyFailureIsNeverFailed_R1_R2(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		body   string
	}{
		{"424 external dependency failed (api_error)", http.StatusFailedDependency,
			`{"error":{"type":"api_error","message":"The request could not be completed due to a failure in an external dependency."}}`},
		{"424 external dependency failed (no error body)", http.StatusFailedDependency, `{}`},
		{"400 api_error", http.StatusBadRequest,
			`{"error":{"type":"api_error","message":"An unknown error occurred"}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Request-Id", "req_review")
				w.WriteHeader(c.status)
				fmt.Fprint(w, c.body)
			}))
			t.Cleanup(srv.Close)
			p := newProvider(t, srv.URL)
			for _, in := range []providers.OperationInput{payout("250.00", "USD"), transfer("acct_1ABC", "99.00", "USD"),
				charge("10.00", "USD", "pm_card_visa")} {
				res := submit(t, p, in, ref(), key())
				if got := attempts.Classify(res); got == attempts.OutcomeFailed {
					t.Errorf("%s: HTTP %d %s is classified %s (reserve released, retry under a new key allowed); want unknown",
						in.Operation, c.status, c.body, got)
				}
			}
		})
	}
}

// Only a readable, complete 200 list without a match proves absence (R16).
// A 200 that says it is a list but carries no data array (absent or null),
// or no has_more, or is a search result where a list was asked for (or the
// reverse), lists nothing: the lookup is inconclusive, never a clean "not
// found" that would fail an unknown payout once its window has passed.
func TestListWithoutDataIsNoProofOfAbsence_R16(t *testing.T) {
	for _, body := range []string{
		`{"object":"list","url":"/v1/payouts","has_more":false}`,
		`{"object":"list","data":null,"has_more":false}`,
		`{"object":"search_result","url":"/v1/payment_intents/search","has_more":false}`,
		`{"object":"list","data":[]}`,
	} {
		t.Run(body, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, body)
			}))
			t.Cleanup(srv.Close)
			p := newProvider(t, srv.URL)
			for _, op := range []providers.Operation{providers.OpCardCharge, providers.OpRefund, providers.OpAccountTransfer, providers.OpBankPayout} {
				lr, err := p.Lookup(context.Background(), op, ref())
				if err != nil {
					t.Fatalf("%s: %v", op, err)
				}
				if lr.Exchange.Err == nil && !lr.Found && lr.Exchange.StatusCode == http.StatusOK {
					t.Errorf("%s: a list without data is returned as a clean \"not found\"", op)
				}
			}
		})
	}
}

// Each lookup endpoint answers one kind: the Search API a search_result,
// the list endpoints a list. The right kind, complete and without a match,
// is a clean "not found"; the other kind is inconclusive (R16).
func TestListOfTheOtherKindIsNoProofOfAbsence_R16(t *testing.T) {
	for _, kind := range []string{"list", "search_result"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"object":%q,"data":[],"has_more":false}`, kind)
		}))
		t.Cleanup(srv.Close)
		p := newProvider(t, srv.URL)
		for _, op := range []providers.Operation{providers.OpCardCharge, providers.OpRefund, providers.OpAccountTransfer, providers.OpBankPayout} {
			lr, err := p.Lookup(context.Background(), op, ref())
			if err != nil {
				t.Fatalf("%s: %v", op, err)
			}
			right := (op == providers.OpCardCharge) == (kind == "search_result")
			if clean := lr.Exchange.Err == nil && !lr.Found; clean != right {
				t.Errorf("%s answered a %s: clean not found %v, want %v (err %v)", op, kind, clean, right, lr.Exchange.Err)
			}
		}
	}
}
