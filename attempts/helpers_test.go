package attempts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/providers"
)

// fakeClock is moved by tests; nothing sleeps to move time.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// behaviour is how the fake PSP answers one submit.
type behaviour int

const (
	behaveOK             behaviour = iota // 201 succeeded (replays for a known key)
	behaveProcessing                      // 202 processing
	behave500AfterRecord                  // records the operation as succeeded, answers 500
	behave429                             // 429 Retry-After: 7, records nothing
	behave409                             // records the operation as succeeded, answers 409 in flight
	behaveDecline                         // records a failed operation, answers 402 declined
	behaveHang                            // records the operation as succeeded, then hangs past the read timeout
	behaveKeyMisuse                       // 400 idempotency_error
	behave500NoRecord                     // answers 500, records nothing
)

type fakeOp struct {
	ID        string `json:"id"`
	Reference string `json:"reference"`
	State     string `json:"state"`
	Code      string `json:"code,omitempty"`
	Amount    string `json:"amount"`
	// ExpectedBy: when the provider says a processing operation ends.
	ExpectedBy time.Time `json:"expected_by,omitzero"`
}

// fakePSP is a small provider over real HTTP (httptest) that records every
// submit by idempotency key and every operation by reference.
type fakePSP struct {
	t   testing.TB
	srv *httptest.Server

	mu        sync.Mutex
	plan      []behaviour // behaviour of the nth submit; the last repeats
	submits   int
	keySeen   map[string]int
	bodies    map[string][][]byte
	ops       map[string]*fakeOp // by reference
	byKey     map[string]*fakeOp
	lookups   int
	hideUntil int // lookups answer 404 until this many lookups were made (eventual consistency)
	// lookupFails are the answers of the next lookups, one each, before
	// any other: an HTTP status, with its Retry-After when set.
	lookupFails []lookupFail
	// expectedBy is the ExpectedBy of the operations submits record.
	expectedBy time.Time
	release    chan struct{}
}

func newFakePSP(t testing.TB, plan ...behaviour) *fakePSP {
	if len(plan) == 0 {
		plan = []behaviour{behaveOK}
	}
	p := &fakePSP{t: t, plan: plan, keySeen: map[string]int{}, bodies: map[string][][]byte{},
		ops: map[string]*fakeOp{}, byKey: map[string]*fakeOp{}, release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /ops", p.submit)
	mux.HandleFunc("GET /ops/{ref}", p.lookup)
	p.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		close(p.release)
		p.srv.CloseClientConnections()
		p.srv.Close()
	})
	return p
}

func (p *fakePSP) setPlan(plan ...behaviour) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.plan, p.submits = plan, 0
}

func (p *fakePSP) seen(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.keySeen[key]
}

func (p *fakePSP) totalSubmits() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, v := range p.keySeen {
		n += v
	}
	return n
}

// lookupFail is a lookup the provider does not answer: status (429, 5xx)
// and its Retry-After header ("" for none).
type lookupFail struct {
	status     int
	retryAfter string
}

func (p *fakePSP) failLookups(fs ...lookupFail) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lookupFails = append(p.lookupFails, fs...)
}

func (p *fakePSP) lookupCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lookups
}

func (p *fakePSP) opCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ops)
}

func (p *fakePSP) setOp(ref, state string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if op, ok := p.ops[ref]; ok {
		op.State = state
		return
	}
	p.ops[ref] = &fakeOp{ID: "op_" + ref[:12], Reference: ref, State: state}
}

// setExpectedBy sets when the provider says the operation with reference
// ref ends ("" for ref: every operation submits record from now on).
func (p *fakePSP) setExpectedBy(ref string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ref == "" {
		p.expectedBy = at
		return
	}
	p.ops[ref].ExpectedBy = at
}

// dropOp forgets the operation with reference ref: lookups answer 404.
func (p *fakePSP) dropOp(ref string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.ops, ref)
}

func (p *fakePSP) submit(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Header.Get("Idempotency-Key")
	var in struct {
		Reference string `json:"reference"`
		Amount    string `json:"amount"`
	}
	_ = json.Unmarshal(body, &in)
	p.mu.Lock()
	b := p.plan[min(p.submits, len(p.plan)-1)]
	p.submits++
	p.keySeen[key]++
	p.bodies[key] = append(p.bodies[key], body)
	record := func(state, code string) *fakeOp {
		if op, ok := p.byKey[key]; ok && key != "" {
			return op
		}
		op := &fakeOp{ID: "op_" + in.Reference[:12], Reference: in.Reference, State: state, Code: code, Amount: in.Amount,
			ExpectedBy: p.expectedBy}
		if key == "" { // no idempotency keys: every send is a new operation
			op.ID = fmt.Sprintf("op_%s_%d", in.Reference[:12], p.submits)
		}
		p.ops[in.Reference] = op
		if key != "" {
			p.byKey[key] = op
		}
		return op
	}
	release := p.release
	p.mu.Unlock()

	w.Header().Set("Request-Id", fmt.Sprintf("req_%d", time.Now().UnixNano()))
	switch b {
	case behaveOK:
		p.mu.Lock()
		op := record("succeeded", "")
		p.mu.Unlock()
		writeJSON(w, 201, op)
	case behaveProcessing:
		p.mu.Lock()
		op := record("processing", "")
		p.mu.Unlock()
		writeJSON(w, 202, op)
	case behave500AfterRecord:
		p.mu.Lock()
		record("succeeded", "")
		p.mu.Unlock()
		writeJSON(w, 500, map[string]string{"code": "internal_error"})
	case behave429:
		w.Header().Set("Retry-After", "7")
		writeJSON(w, 429, map[string]string{"code": "rate_limited"})
	case behave409:
		p.mu.Lock()
		record("succeeded", "")
		p.mu.Unlock()
		writeJSON(w, 409, map[string]string{"code": "idempotency_in_flight"})
	case behaveDecline:
		p.mu.Lock()
		record("failed", "insufficient_funds")
		p.mu.Unlock()
		writeJSON(w, 402, map[string]string{"code": "insufficient_funds", "refinement": "declined"})
	case behaveHang:
		p.mu.Lock()
		record("succeeded", "")
		p.mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	case behaveKeyMisuse:
		writeJSON(w, 400, map[string]string{"code": "idempotency_error", "refinement": "key_misuse"})
	case behave500NoRecord:
		writeJSON(w, 500, map[string]string{"code": "internal_error"})
	}
}

func (p *fakePSP) lookup(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.lookups++
	if len(p.lookupFails) > 0 {
		f := p.lookupFails[0]
		p.lookupFails = p.lookupFails[1:]
		p.mu.Unlock()
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		writeJSON(w, f.status, map[string]string{"code": "unavailable"})
		return
	}
	op, ok := p.ops[r.PathValue("ref")]
	hidden := p.lookups <= p.hideUntil
	var cp fakeOp
	if ok {
		cp = *op
	}
	p.mu.Unlock()
	if !ok || hidden {
		writeJSON(w, 404, map[string]string{"code": "not_found"})
		return
	}
	writeJSON(w, 200, cp)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// testProvider is a test-only adapter for fakePSP, over real HTTP through
// providers.Client (httptrace tells "never written" from "lost").
type testProvider struct {
	name   string
	caps   providers.Capabilities
	client *providers.Client
	base   atomic.Pointer[string]
}

// simReadTimeout is the read timeout of the tests that run against
// providers/sim, assert successes and need the sim's hang faults read as
// timeouts (R3). It must be long enough that a loaded machine's slow answer
// is not read as unknown (300 ms was not: TestRecordBatchMatchesOneAtATime
// failed so), and it bounds how long each hang fault takes. The sim's
// HangFor must stay well above it, or a hang ends as a reset, not a timeout.
const simReadTimeout = time.Second

func newTestProvider(name string, base string, caps providers.Capabilities, readTimeout time.Duration) *testProvider {
	p := &testProvider{name: name, caps: caps, client: providers.NewClient(providers.HTTPSettings{
		ConnectTimeout: time.Second, ReadTimeout: readTimeout})}
	p.base.Store(&base)
	return p
}

func (p *testProvider) setBase(u string) { p.base.Store(&u) }

func (p *testProvider) Name() string                         { return p.name }
func (p *testProvider) Capabilities() providers.Capabilities { return p.caps }

func (p *testProvider) EncodePayload(in providers.OperationInput, reference string) ([]byte, error) {
	if in.Amount == "" || in.Amount[0] == '-' {
		return nil, fmt.Errorf("%w: amount %q", providers.ErrInvalidInput, in.Amount)
	}
	return json.Marshal(map[string]string{"operation": string(in.Operation), "amount": in.Amount,
		"currency": in.Currency, "reference": reference})
}

func (p *testProvider) Submit(ctx context.Context, req providers.SubmitRequest) providers.SubmitResult {
	h := http.Header{}
	if p.caps.IdempotencyKeys {
		h.Set("Idempotency-Key", req.IdempotencyKey)
	}
	ex := p.client.Do(ctx, http.MethodPost, *p.base.Load()+"/ops", h, req.Payload)
	r := providers.SubmitResult{Exchange: ex}
	if ex.Err == nil && len(ex.Body) > 0 {
		var body struct {
			ID         string    `json:"id"`
			State      string    `json:"state"`
			Code       string    `json:"code"`
			Refinement string    `json:"refinement"`
			ExpectedBy time.Time `json:"expected_by"`
		}
		if json.Unmarshal(ex.Body, &body) == nil {
			r.ProviderID, r.State, r.FailureCode = body.ID, providers.State(body.State), body.Code
			r.ExpectedBy = body.ExpectedBy
			r.Refinement = providers.Refinement(body.Refinement)
			if ex.StatusCode == 409 {
				r.Refinement = providers.RefineInFlight
			}
		}
	}
	return r
}

func (p *testProvider) Lookup(ctx context.Context, op providers.Operation, reference string) (providers.LookupResult, error) {
	if !p.caps.LookupByReference {
		return providers.LookupResult{}, providers.ErrUnsupported
	}
	ex := p.client.Do(ctx, http.MethodGet, *p.base.Load()+"/ops/"+reference, nil, nil)
	lr := providers.LookupResult{Exchange: ex}
	if ex.Err == nil && ex.StatusCode == 200 {
		var o fakeOp
		if err := json.Unmarshal(ex.Body, &o); err == nil {
			lr.Found, lr.ProviderID, lr.State, lr.FailureCode, lr.Amount = true, o.ID, providers.State(o.State), o.Code, o.Amount
			lr.ExpectedBy = o.ExpectedBy
		}
	}
	return lr, nil
}

func (p *testProvider) ParseWebhook(http.Header, []byte, time.Time) (providers.WebhookEvent, error) {
	return providers.WebhookEvent{}, providers.ErrUnsupported
}

func (p *testProvider) Statement(context.Context, time.Time) ([]providers.StatementEntry, error) {
	return nil, providers.ErrUnsupported
}

func stdCaps() providers.Capabilities {
	return providers.Capabilities{IdempotencyKeys: true, KeyLifetime: 24 * time.Hour, LookupByReference: true,
		ConsistencyWindow: 2 * time.Minute, Operations: []providers.Operation{providers.OpPixTransfer,
			providers.OpBankPayout, providers.OpRefund, providers.OpCardCharge, providers.OpPixCharge}}
}

// ownerRecorder counts AttemptFinal calls per attempt and writes a row in
// the same transaction, so a rolled-back transition leaves no trace.
type ownerRecorder struct {
	mu    sync.Mutex
	calls map[uuid.UUID][]Status
	fail  atomic.Bool
}

func (o *ownerRecorder) AttemptFinal(ctx context.Context, tx pgx.Tx, a Attempt) error {
	if o.fail.Load() {
		return fmt.Errorf("owner refuses")
	}
	if _, err := tx.Exec(ctx, `INSERT INTO test_owner_effects (attempt_id, status) VALUES ($1, $2)`, a.ID, a.Status); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls[a.ID] = append(o.calls[a.ID], a.Status)
	return nil
}

func (o *ownerRecorder) count(id uuid.UUID) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.calls[id])
}

type harness struct {
	t       *testing.T
	ctx     context.Context
	pool    *pgxpool.Pool
	clock   *fakeClock
	psp     *fakePSP
	prov    *testProvider
	svc     *Service
	owner   *ownerRecorder
	metrics *Metrics
	reviews atomic.Int32
}

type harnessOpts struct {
	caps        *providers.Capabilities
	readTimeout time.Duration
	plan        []behaviour
	tune        func(*Config)
}

// createOwnerEffects makes the table the test owners record their
// effects in.
func createOwnerEffects(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	testdb.CreateTables(t, pool, `CREATE TABLE test_owner_effects (attempt_id uuid NOT NULL, status text NOT NULL,
		UNIQUE (attempt_id))`, "test_owner_effects")
}

func setup(t *testing.T, o harnessOpts) *harness {
	t.Helper()
	ctx := context.Background()
	pool := testdb.New(t)
	createOwnerEffects(t, pool)
	h := &harness{t: t, ctx: ctx, pool: pool, clock: newFakeClock(), owner: &ownerRecorder{calls: map[uuid.UUID][]Status{}},
		metrics: NewMetrics()}
	h.psp = newFakePSP(t, o.plan...)
	caps := stdCaps()
	if o.caps != nil {
		caps = *o.caps
	}
	rt := o.readTimeout
	if rt == 0 {
		rt = 10 * time.Second
	}
	h.prov = newTestProvider("fake", h.psp.srv.URL, caps, rt)
	cfg := Config{Pool: pool, Providers: map[string]providers.Provider{"fake": h.prov}, Clock: h.clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: h.metrics,
		OnReview: func(Attempt, string) { h.reviews.Add(1) }}
	if o.tune != nil {
		o.tune(&cfg)
	}
	var err error
	h.svc, err = New(cfg)
	require.NoError(t, err)
	for _, k := range Kinds {
		h.svc.RegisterOwner(k, h.owner)
	}
	return h
}

var subjectSeq atomic.Int64

func newSubject() string { return fmt.Sprintf("po_%d_%d", time.Now().UnixNano(), subjectSeq.Add(1)) }

func (h *harness) open(subject string) Attempt {
	h.t.Helper()
	a, err := h.openErr(subject)
	require.NoError(h.t, err)
	return a
}

func (h *harness) openErr(subject string) (Attempt, error) {
	return h.openKind(KindPixTransfer, subject, "10.50")
}

// openKind opens in its own transaction. After ErrAttemptOpen or
// ErrSubjectSucceeded the transaction is still used and committed: Open must
// not poison the caller's transaction (R8).
func (h *harness) openKind(kind Kind, subject, amount string) (Attempt, error) {
	var a Attempt
	var openErr error
	op := providers.OpPixTransfer
	switch kind {
	case KindRefund:
		op = providers.OpRefund
	case KindCardCharge:
		op = providers.OpCardCharge
	}
	err := pgx.BeginFunc(h.ctx, h.pool, func(tx pgx.Tx) error {
		a, openErr = h.svc.Open(h.ctx, tx, OpenParams{Kind: kind, SubjectID: subject, Provider: "fake",
			Input: providers.OperationInput{Operation: op, Amount: amount, Currency: "BRL"}})
		if openErr != nil && !errors.Is(openErr, ErrAttemptOpen) && !errors.Is(openErr, ErrSubjectSucceeded) {
			return openErr
		}
		_, err := tx.Exec(h.ctx, `SELECT 1`)
		return err
	})
	if err != nil {
		return a, err
	}
	return a, openErr
}

func (h *harness) get(id uuid.UUID) Attempt {
	h.t.Helper()
	a, err := h.svc.Get(h.ctx, h.pool, id)
	require.NoError(h.t, err)
	return a
}

func (h *harness) events(id uuid.UUID) []Event {
	h.t.Helper()
	ev, err := h.svc.Events(h.ctx, h.pool, id)
	require.NoError(h.t, err)
	return ev
}

func eventTypes(ev []Event) []string {
	var out []string
	for _, e := range ev {
		s := string(e.Type)
		switch e.Type {
		case EventCall, EventLookup:
			s += ":" + e.Outcome
		case EventTransition:
			s += ":" + string(e.FromStatus) + "->" + string(e.ToStatus)
		}
		out = append(out, s)
	}
	return out
}

// liveJobs counts live River jobs of a kind for an attempt.
func (h *harness) liveJobs(kind string, id uuid.UUID) int {
	h.t.Helper()
	var n int
	require.NoError(h.t, h.pool.QueryRow(h.ctx, `SELECT count(*) FROM river_job WHERE kind = $1
		AND args->>'attempt_id' = $2 AND state IN ('available','pending','running','retryable','scheduled')`,
		kind, id.String()).Scan(&n))
	return n
}

func (h *harness) ownerEffects(id uuid.UUID) []string {
	h.t.Helper()
	rows, err := h.pool.Query(h.ctx, `SELECT status FROM test_owner_effects WHERE attempt_id = $1`, id)
	require.NoError(h.t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(h.t, err)
	return out
}

func (h *harness) requireNoViolations() {
	h.t.Helper()
	vs, err := Verify(h.ctx, h.pool)
	require.NoError(h.t, err)
	require.Empty(h.t, vs)
}

// deadURL returns an http URL on which nothing listens (connect refused).
func deadURL(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr
}

func (a Attempt) inputForTest() providers.OperationInput {
	return providers.OperationInput{Operation: providers.Operation(a.Operation), Amount: "1.00", Currency: "BRL"}
}
