package pix_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/pix"
	"github.com/saldo/saldo/providers/pix/pixtest"
)

const (
	clientID     = "saldo-client"
	clientSecret = "s3cret"
	receivingKey = "7d9f0335-8dcc-4054-9bf9-0dbd61d36906"
	hookSecret   = "hook-secret-123"
)

// env is a fake PSP with mutual TLS and an adapter configured for it
// through files, as saldo serve configures one.
type env struct {
	t     *testing.T
	certs *pixtest.Certs
	srv   *pixtest.Server
	p     *pix.Provider
}

func newEnv(t *testing.T, opts pixtest.Options, mod ...func(*pix.Config)) *env {
	t.Helper()
	certs, err := pixtest.NewCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	opts.ClientID, opts.ClientSecret, opts.ReceivingKey = clientID, clientSecret, receivingKey
	srv := pixtest.NewServer(certs, opts)
	t.Cleanup(srv.Close)
	e := &env{t: t, certs: certs, srv: srv}
	e.p = e.adapter(mod...)
	return e
}

func (e *env) config(mod ...func(*pix.Config)) pix.Config {
	cfg := pix.Config{BaseURL: e.srv.StandardURL(), SendBaseURL: e.srv.SendURL(), TokenURL: e.srv.TokenURL(),
		ClientID: clientID, ClientSecret: clientSecret, CertFile: e.certs.ClientCertFile, KeyFile: e.certs.ClientKeyFile,
		CAFile: e.certs.CAFile, ReceivingKey: receivingKey, WebhookSecret: hookSecret,
		ConsistencyWindow: 200 * time.Millisecond,
		HTTP:              providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 2 * time.Second}}
	for _, m := range mod {
		m(&cfg)
	}
	return cfg
}

func (e *env) adapter(mod ...func(*pix.Config)) *pix.Provider {
	e.t.Helper()
	p, err := pix.New(e.config(mod...))
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// ref makes a reference as attempts.NewReference does (32 lowercase hex).
func ref(t *testing.T) string {
	t.Helper()
	r := attempts.NewReference()
	if len(r) != 32 {
		t.Fatalf("reference %q", r)
	}
	return r
}

func (e *env) submit(op providers.Operation, in providers.OperationInput, reference string) (providers.SubmitResult, attempts.Outcome) {
	e.t.Helper()
	in.Operation = op
	payload, err := e.p.EncodePayload(in, reference)
	if err != nil {
		e.t.Fatalf("EncodePayload(%s): %v", op, err)
	}
	sr := e.p.Submit(context.Background(), providers.SubmitRequest{Operation: op, IdempotencyKey: "unused-" + reference,
		Reference: reference, Payload: payload})
	return sr, attempts.Classify(sr)
}

func (e *env) lookup(op providers.Operation, reference string) providers.LookupResult {
	e.t.Helper()
	lr, err := e.p.Lookup(context.Background(), op, reference)
	if err != nil {
		e.t.Fatalf("Lookup(%s): %v", op, err)
	}
	return lr
}

// lastRequest is the last API request with this method and path.
func (e *env) lastRequest(method, path string) pixtest.Request {
	e.t.Helper()
	reqs := e.srv.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].Method == method && reqs[i].Path == path {
			return reqs[i]
		}
	}
	e.t.Fatalf("no %s %s among %d requests", method, path, len(reqs))
	return pixtest.Request{}
}

// checkRequest checks method, path, headers and the body field by field
// (the body compared as JSON with want, which lists every field).
func checkRequest(t *testing.T, r pixtest.Request, method, path string, want map[string]any) {
	t.Helper()
	if r.Method != method || r.Path != path {
		t.Errorf("request %s %s, want %s %s", r.Method, r.Path, method, path)
	}
	if a := r.Header.Get("Authorization"); !strings.HasPrefix(a, "Bearer tok-") {
		t.Errorf("Authorization %q, want a bearer token", a)
	}
	for _, h := range []string{"Idempotency-Key", "X-Idempotency-Key"} {
		if v := r.Header.Get(h); v != "" {
			t.Errorf("%s header %q sent: Pix has no idempotency header, the id in the path is the key", h, v)
		}
	}
	if want == nil {
		if len(r.Body) != 0 {
			t.Errorf("body %s, want none", r.Body)
		}
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var got map[string]any
	if err := json.Unmarshal(r.Body, &got); err != nil {
		t.Fatalf("body %s: %v", r.Body, err)
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Errorf("body\n got %s\nwant %s", gb, wb)
	}
}

func keyDest(key string) *providers.Destination {
	return &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: key}}
}

func bankDest() *providers.Destination {
	return &providers.Destination{BankAccount: &providers.BankAccount{ISPB: "60701190", Branch: "0001", Account: "12345-6",
		Type: "checking"}, HolderName: "Maria da Silva", HolderTaxID: "12345678909"}
}

func wantOutcome(t *testing.T, got, want attempts.Outcome, sr providers.SubmitResult) {
	t.Helper()
	if got != want {
		t.Fatalf("outcome %s, want %s (status %d, wrote %v, err %v, state %q, refinement %q, failure %q %q, body %s)",
			got, want, sr.Exchange.StatusCode, sr.Exchange.Wrote, sr.Exchange.Err, sr.State, sr.Refinement,
			sr.FailureCode, sr.FailureReason, sr.Exchange.Body)
	}
}

var _ = http.MethodPut
