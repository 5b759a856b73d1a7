package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

const webhookSecret = "whsec_sim_test"

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// exercised records the documented operations the tests called (METHOD
// /path/{template}); TestMain checks that every one was.
var exercised sync.Map

var (
	docOnce   sync.Once
	docRouter routers.Router
	docErr    error
)

// openAPIRouter loads docs/openapi.yaml (the file the API embeds), checks it
// is a valid OpenAPI 3 document, and builds a router over its operations.
func openAPIRouter(t *testing.T) routers.Router {
	t.Helper()
	docOnce.Do(func() {
		loader := openapi3.NewLoader()
		var doc *openapi3.T
		doc, docErr = loader.LoadFromFile("../docs/openapi.yaml")
		if docErr != nil {
			return
		}
		if docErr = doc.Validate(context.Background()); docErr != nil {
			return
		}
		docRouter, docErr = legacy.NewRouter(doc)
		// The ledger's seal is JSON lines: checked as the text it is
		// (its lines are checked by ledger.VerifySeal in its test).
		openapi3filter.RegisterBodyDecoder("application/x-ndjson", openapi3filter.PlainBodyDecoder)
	})
	require.NoError(t, docErr)
	return docRouter
}

// env is one test's world: its own database, a simulated PSP over real
// HTTP, attempts, payouts with the notifier hook, the API on a real port, and
// a key for every role.
type env struct {
	t       *testing.T
	ctx     context.Context
	pool    *pgxpool.Pool
	clock   *sim.ManualClock
	srv     *sim.Server
	prov    *sim.Provider
	att     *attempts.Service
	pay     *payouts.Service
	charges *charges.Service
	notif   *api.Notifier
	api     *api.Server
	http    *httptest.Server
	router  routers.Router

	logs                             *syncBuffer // the API's log output
	admin, auditor, operator, m1, m2 string      // key secrets
	operatorID                       string
	// expected are the audit findings (area/check) a test made on purpose
	// and asserted itself; auditClean lets only those through.
	expected map[string]bool
}

func brl(s string) money.Amount { return money.MustParse(s, "BRL") }

func setup(t *testing.T, cfg sim.Config, tune ...func(*attempts.Config)) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, ctx: ctx, pool: testdb.New(t), clock: sim.NewManualClock(time.Now().UTC()), router: openAPIRouter(t)}
	// The API's listener comes first so the sim can send webhooks to it
	// (cfg.WebhookURL == "api").
	var handler http.Handler
	e.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	t.Cleanup(e.http.Close)
	cfg.Clock = e.clock.Now
	cfg.WebhookSecret = webhookSecret
	if cfg.WebhookURL == "api" {
		cfg.WebhookURL = e.http.URL + "/v1/webhooks/sim"
	}
	e.srv = sim.NewServer(cfg).Start()
	t.Cleanup(e.srv.Close)
	e.prov = e.srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 500 * time.Millisecond}))
	var err error
	acfg := attempts.Config{Pool: e.pool, Clock: e.clock, Providers: map[string]providers.Provider{"sim": e.prov}}
	for _, f := range tune {
		f(&acfg)
	}
	e.att, err = attempts.New(acfg)
	require.NoError(t, err)
	e.notif, err = api.NewNotifier(api.NotifierConfig{Pool: e.pool, Clock: e.clock,
		HTTP: providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 2 * time.Second}, RetryBase: 50 * time.Millisecond})
	require.NoError(t, err)
	e.charges, err = charges.New(charges.Config{Pool: e.pool, Attempts: e.att, Provider: "sim", Clock: e.clock})
	require.NoError(t, err)
	e.pay, err = payouts.New(payouts.Config{Pool: e.pool, Attempts: e.att, Provider: "sim", Clock: e.clock,
		Charges: e.charges, OnFinal: e.notif.PayoutFinal, OnDiverged: e.notif.PayoutDiverged})
	require.NoError(t, err)
	for _, m := range []string{"m1", "m2"} {
		_, err = merchants.Create(ctx, e.pool, m, "Loja "+m)
		require.NoError(t, err)
	}
	_, err = merchants.Fund(ctx, e.pool, merchants.Funding{MerchantID: "m1", Amount: brl("1000.00"), Key: "initial", Reason: "test", Actor: "test"})
	require.NoError(t, err)

	key := func(role api.Role, merchant string) (string, string) {
		k, secret, err := api.CreateKey(ctx, e.pool, role, merchant, string(role), e.clock.Now())
		require.NoError(t, err)
		return k.ID, secret
	}
	_, e.admin = key(api.RoleAdmin, "")
	_, e.auditor = key(api.RoleAuditor, "")
	e.operatorID, e.operator = key(api.RoleOperator, "")
	_, e.m1 = key(api.RoleMerchant, "m1")
	_, e.m2 = key(api.RoleMerchant, "m2")

	e.logs = &syncBuffer{}
	e.api, err = api.New(api.Config{Pool: e.pool, Payouts: e.pay, Attempts: e.att, Charges: e.charges,
		Logger:    slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Providers: map[string]providers.Provider{"sim": e.prov}, Clock: e.clock,
		// The tests' notification receivers listen on loopback.
		AllowPrivateNotificationURLs: true})
	require.NoError(t, err)
	handler = e.api
	t.Cleanup(e.auditClean)
	return e
}

// auditClean runs every invariant (ledger, attempts, payouts) after the test
// and the sim oracle (nobody paid twice).
func (e *env) auditClean() {
	res, err := audit.Run(context.Background(), e.pool)
	require.NoError(e.t, err)
	for _, v := range res.Violations {
		require.True(e.t, e.expected[v.Area+"/"+v.Check], res.Summary())
	}
	require.Empty(e.t, e.srv.Duplicates(), "the sim oracle saw a reference paid twice")
}

// resp is an HTTP answer, read whole.
type resp struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &m), string(r.Body))
	return m
}

// code is the problem code of an error answer.
func (r resp) code(t *testing.T) string {
	t.Helper()
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"), string(r.Body))
	m := r.json(t)
	require.Equal(t, "https://saldo.dev/problems/"+strings.ReplaceAll(m["code"].(string), "_", "-"), m["type"])
	return m["code"].(string)
}

type req struct {
	method, path, key string
	body              any // []byte / string sent raw; anything else as JSON
	header            map[string]string
}

// do sends the request to the real server and validates the exchange
// against docs/openapi.yaml (see exchange); any failure fails the test.
func (e *env) do(r req) resp {
	e.t.Helper()
	out, err := e.exchange(r)
	require.NoError(e.t, err)
	return out
}

func (e *env) get(path, key string) resp {
	return e.do(req{method: http.MethodGet, path: path, key: key})
}

func (e *env) post(path, key, idem string, body any) resp {
	h := map[string]string{}
	if idem != "" {
		h["Idempotency-Key"] = idem
	}
	return e.do(req{method: http.MethodPost, path: path, key: key, body: body, header: h})
}

// exchange sends one request and validates it against the OpenAPI document:
// the response (status, content type, body schema) always; the request too,
// and a request the document forbids must not have been accepted (2xx).
// Safe for concurrent use (returns errors instead of failing).
func (e *env) exchange(r req) (resp, error) {
	var body []byte
	switch b := r.body.(type) {
	case nil:
	case []byte:
		body = b
	case string:
		body = []byte(b)
	default:
		var err error
		if body, err = json.Marshal(b); err != nil {
			return resp{}, err
		}
	}
	build := func(base string) (*http.Request, error) {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		hr, err := http.NewRequestWithContext(e.ctx, r.method, base+r.path, rd)
		if err != nil {
			return nil, err
		}
		if body != nil {
			hr.Header.Set("Content-Type", "application/json")
		}
		if r.key != "" {
			hr.Header.Set("Authorization", "Bearer "+r.key)
		}
		for k, v := range r.header {
			hr.Header.Set(k, v)
		}
		return hr, nil
	}
	hr, err := build(e.http.URL)
	if err != nil {
		return resp{}, err
	}
	hres, err := http.DefaultClient.Do(hr)
	if err != nil {
		return resp{}, err
	}
	defer hres.Body.Close()
	rb, err := io.ReadAll(hres.Body)
	if err != nil {
		return resp{}, err
	}
	out := resp{Status: hres.StatusCode, Header: hres.Header, Body: rb}

	vr, err := build("")
	if err != nil {
		return out, err
	}
	route, params, err := e.router.FindRoute(vr)
	if err != nil {
		return out, fmt.Errorf("%s %s is not in docs/openapi.yaml: %w", r.method, r.path, err)
	}
	exercised.Store(route.Method+" "+route.Path, true)
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}
	in := &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route, Options: opts}
	if reqErr := openapi3filter.ValidateRequest(e.ctx, in); reqErr != nil && out.Status < 300 {
		return out, fmt.Errorf("%s %s: the server accepted (%d) a request docs/openapi.yaml forbids: %w", r.method, r.path, out.Status, reqErr)
	}
	rin := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: out.Status, Header: out.Header, Options: opts}
	rin.SetBodyBytes(out.Body)
	if err := openapi3filter.ValidateResponse(e.ctx, rin); err != nil {
		return out, fmt.Errorf("%s %s -> %d %.300s: response does not match docs/openapi.yaml: %w", r.method, r.path, out.Status, out.Body, err)
	}
	return out, nil
}

func pixBody(amount string) map[string]any {
	return map[string]any{"amount": amount, "currency": "BRL",
		"destination": map[string]any{"pix_key": map[string]any{"type": "email", "value": "joao@example.com"}}}
}

// balances returns m1's (available, reserved) in BRL through the API.
func (e *env) balances(merchant, key string) (string, string) {
	e.t.Helper()
	r := e.get("/v1/merchants/"+merchant+"/balances", key)
	require.Equal(e.t, http.StatusOK, r.Status, string(r.Body))
	var b struct {
		Balances []struct{ Currency, Available, Reserved string }
	}
	require.NoError(e.t, json.Unmarshal(r.Body, &b))
	for _, x := range b.Balances {
		if x.Currency == "BRL" {
			return x.Available, x.Reserved
		}
	}
	return "0.00", "0.00"
}

// createPix creates a Pix transfer for m1 through the API.
func (e *env) createPix(amount, idem string) map[string]any {
	e.t.Helper()
	r := e.post("/v1/merchants/m1/pix-transfers", e.m1, idem, pixBody(amount))
	require.Equal(e.t, http.StatusCreated, r.Status, string(r.Body))
	return r.json(e.t)
}

// failThenReportPaid makes the Pix transfer's attempt a unknown (a 503),
// fails it by "not found" past the window (the reserve is released), then
// has the provider report it paid (a webhook's word): a divergence.
func (e *env) failThenReportPaid(t *testing.T, a attempts.Attempt, amount, providerID string) {
	t.Helper()
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: a.Reference}))
	r, err := e.att.Execute(e.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, r.Attempt.Status)
	e.clock.Advance(time.Hour)
	rr, err := e.att.Resolve(e.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusFailed, rr.Attempt.Status)
	_, err = e.att.ResolveByReference(e.ctx, attempts.ResolveInput{Reference: a.Reference, Provider: a.Provider,
		Operation: providers.OpPixTransfer, Amount: amount, Currency: "BRL", State: providers.StateSucceeded,
		ProviderID: providerID, Source: attempts.SourceWebhook, Actor: "evt_" + providerID})
	require.NoError(t, err)
}

func (e *env) attemptOf(payout map[string]any) attempts.Attempt {
	e.t.Helper()
	v, err := e.pay.Get(e.ctx, payout["merchant_id"].(string), payout["id"].(string))
	require.NoError(e.t, err)
	require.NotNil(e.t, v.CurrentAttemptID)
	a, err := e.att.Get(e.ctx, e.pool, *v.CurrentAttemptID)
	require.NoError(e.t, err)
	return a
}
