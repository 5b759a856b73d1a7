package sim

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/providers"
)

// Errors of Server methods (and the admin endpoints that call them).
var (
	ErrCobNotFound = errors.New("sim: no cob with this txid")
	ErrCobExpired  = errors.New("sim: cob expired")
	ErrCobPaid     = errors.New("sim: cob already paid")
)

// Server is the simulated PSP. Build it with NewServer, serve it with Start
// (or mount Handler), and always Close it: Close stops the webhook
// dispatcher and the settlement ticker and ends hanging connections.
type Server struct {
	cfg  Config
	log  *slog.Logger
	now  func() time.Time
	mux  *http.ServeMux
	hook *dispatcher

	reqSeq atomic.Uint64

	mu        sync.Mutex
	idRNG     *rand.Rand
	faultRNG  *rand.Rand
	ops       []*Operation
	byRef     map[string][]*Operation
	byID      map[string]*Operation
	cobs      map[string]*Operation
	open      []*Operation // processing operations, creation order
	keys      map[string]*keyEntry
	balances  map[string]decimal.Decimal
	rules     []*ruleState
	submitSeq int
	lies      []StatementLie // AddStatementLie (statement_lies.go)
	// random is the random fault profile in force: Config.Random until
	// SetRandomFaults replaces it.
	random FaultProfile

	ts        *httptest.Server
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

type keyEntry struct {
	hash    [32]byte
	created time.Time
	done    bool
	resp    storedResponse
}

type storedResponse struct {
	status int
	header http.Header
	body   []byte
}

// NewServer builds a server from cfg and starts its background workers
// (settlement ticker; webhook dispatcher when WebhookURL is set). It panics
// on an invalid fault rule or balance in cfg, which are programming errors;
// validate scripts from users with ParseFaults first.
func NewServer(cfg Config) *Server {
	cfg = cfg.withDefaults()
	seed := uint64(cfg.Seed)
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		now:      cfg.Clock,
		idRNG:    rand.New(rand.NewPCG(seed, 0x1D5)),
		faultRNG: rand.New(rand.NewPCG(seed, 0xFA17)),
		byRef:    map[string][]*Operation{},
		byID:     map[string]*Operation{},
		cobs:     map[string]*Operation{},
		keys:     map[string]*keyEntry{},
		balances: map[string]decimal.Decimal{},
		random:   cfg.Random,
	}
	for _, r := range cfg.Faults {
		if err := r.Validate(); err != nil {
			panic(err)
		}
		s.rules = append(s.rules, &ruleState{FaultRule: r})
	}
	if cfg.Balances == nil {
		for c := range currencyDecimals {
			s.balances[c] = decimal.RequireFromString(DefaultBalance)
		}
	} else {
		for c, v := range cfg.Balances {
			if _, ok := currencyDecimals[c]; !ok {
				panic(fmt.Sprintf("sim: balance in unsupported currency %q", c))
			}
			d, err := decimal.NewFromString(v)
			if err != nil || d.IsNegative() {
				panic(fmt.Sprintf("sim: bad balance %q for %s", v, c))
			}
			s.balances[c] = d
		}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if cfg.WebhookURL != "" {
		s.hook = newDispatcher(cfg, seed)
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.hook.run(s.ctx) }()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(cfg.TickInterval)
		defer t.Stop()
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-t.C:
				s.tick()
			}
		}
	}()

	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /v1/operations", s.handleSubmit)
	s.mux.HandleFunc("GET /v1/operations", s.handleLookup)
	s.mux.HandleFunc("GET /v1/statements", s.handleStatement)
	s.mux.HandleFunc("GET /v1/capabilities", s.handleCapabilities)
	s.mux.HandleFunc("GET /sim/oracle/{reference}", s.handleOracle)
	s.mux.HandleFunc("GET /sim/duplicates", s.handleDuplicates)
	s.mux.HandleFunc("GET /sim/operations", s.handleAllOperations)
	s.mux.HandleFunc("GET /sim/balances", s.handleBalances)
	s.mux.HandleFunc("POST /sim/cobs/{txid}/pay", s.handlePay)
	s.mux.HandleFunc("POST /sim/faults", s.handleFaults)
	s.mux.HandleFunc("PUT /sim/random-faults", s.handleRandomFaults)
	s.mux.HandleFunc("POST /sim/statement-lies", s.handleStatementLie)
	for path, allow := range map[string]string{"/v1/operations": "GET, POST", "/v1/statements": "GET",
		"/v1/capabilities": "GET", "/sim/oracle/{reference}": "GET", "/sim/cobs/{txid}/pay": "POST"} {
		s.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: &apiError{Type: errTypeInvalid,
				Code: "method_not_allowed", Message: r.Method + " is not allowed on " + r.URL.Path}})
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Error: &apiError{Type: errTypeInvalid, Code: codeMissing,
			Message: fmt.Sprintf("unrecognized request URL (%s %s)", r.Method, r.URL.Path)}})
	})
	return s
}

// Start serves the server on a loopback port, like httptest.NewServer, and
// returns s.
func (s *Server) Start() *Server {
	s.ts = httptest.NewUnstartedServer(s.Handler())
	s.ts.Start()
	return s
}

// URL is the base URL of a started server ("http://127.0.0.1:port").
func (s *Server) URL() string {
	if s.ts == nil {
		return ""
	}
	return s.ts.URL
}

// Close ends hanging and slow requests, stops the background workers
// (pending webhooks are abandoned; FlushWebhooks first to wait for them) and
// shuts the listener of a started server.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.cancel()
		if s.ts != nil {
			s.ts.Close()
		}
		s.wg.Wait()
	})
}

// Config returns the effective configuration.
func (s *Server) Config() Config { return s.cfg }

// Capabilities are what this server does, for an adapter to declare.
func (s *Server) Capabilities() providers.Capabilities { return capabilitiesOf(s.cfg) }

func capabilitiesOf(cfg Config) providers.Capabilities {
	cfg = cfg.withDefaults()
	c := providers.Capabilities{
		IdempotencyKeys:   !cfg.NoIdempotency,
		LookupByReference: true,
		ConsistencyWindow: cfg.ConsistencyWindow,
		Webhooks:          cfg.WebhookURL != "",
		Statements:        true,
		Operations: []providers.Operation{providers.OpPixTransfer, providers.OpBankPayout, providers.OpRefund,
			providers.OpCardCharge, providers.OpPixCharge},
		Destinations: Destinations(),
	}
	if c.IdempotencyKeys {
		c.KeyLifetime = cfg.KeyLifetime
	}
	return c
}

// Destinations are the destination kinds the sim pays, as a Pix PSP does:
// a Pix transfer to a Pix key or a Brazilian bank account, a bank payout
// to a Brazilian bank account. They are not configurable.
func Destinations() map[providers.Operation][]providers.DestinationKind {
	return map[providers.Operation][]providers.DestinationKind{
		providers.OpPixTransfer: {providers.DestPixKey, providers.DestBankAccount},
		providers.OpBankPayout:  {providers.DestBankAccount},
	}
}

// Handler is the server's HTTP handler, for `saldo sim-provider` or any
// other mount. Close the Server when done with it.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Request-Id", "req_"+strconv.FormatUint(s.reqSeq.Add(1), 10))
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler { //nolint:errorlint // sentinel compared as net/http does
				panic(v)
			}
			s.log.Error("sim: handler panic", "panic", v, "stack", string(debug.Stack()))
			writeJSON(w, http.StatusInternalServerError, errorBody{Error: &apiError{Type: errTypeAPI,
				Code: codeInternal, Message: "internal error"}})
		}
	}()
	s.tick()
	s.mux.ServeHTTP(w, r)
}

// tick settles due operations and expires due cobs by the sim clock.
func (s *Server) tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked(s.now())
}

func (s *Server) advanceLocked(now time.Time) {
	kept := s.open[:0]
	for _, op := range s.open {
		switch {
		case op.Cob != nil && op.Cob.Status == CobActive && !now.Before(op.Cob.ExpiresAt):
			op.Cob.Status = CobExpired
			op.State, op.FinalAt = providers.StateFailed, op.Cob.ExpiresAt
			op.FailureCode, op.FailureReason = codeCobExpired, "the cob expired unpaid"
			s.emitLocked(op)
		case op.Cob == nil && op.State == providers.StateProcessing && !op.settleAt.IsZero() && !now.Before(op.settleAt):
			op.State, op.FinalAt = providers.StateSucceeded, op.settleAt
			s.emitLocked(op)
		default:
			if op.State == providers.StateProcessing {
				kept = append(kept, op)
			}
		}
	}
	for i := len(kept); i < len(s.open); i++ {
		s.open[i] = nil
	}
	s.open = kept
}

// emitLocked queues a webhook for op's current state.
func (s *Server) emitLocked(op *Operation) {
	if s.hook == nil {
		return
	}
	s.hook.enqueue(event{
		ID:        fmt.Sprintf("evt_%016x", s.idRNG.Uint64()),
		Type:      string(op.Operation) + "." + string(op.State),
		CreatedAt: s.now().UTC(),
		Data:      op.snapshot(false),
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"type":"api_error","code":"internal_error","message":"encoding failed"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func respond(status int, v any) storedResponse {
	b, err := json.Marshal(v)
	if err != nil {
		return storedResponse{status: http.StatusInternalServerError,
			body: []byte(`{"error":{"type":"api_error","code":"internal_error","message":"encoding failed"}}`)}
	}
	return storedResponse{status: status, body: append(b, '\n')}
}

func (sr storedResponse) write(w http.ResponseWriter, replayed bool) {
	for k, vs := range sr.header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(sr.status)
	_, _ = w.Write(sr.body)
}

// readBody reads the whole body (so the client's write completes) with a cap.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &apiError{Status: http.StatusRequestEntityTooLarge, Type: errTypeInvalid,
				Code: "body_too_large", Message: fmt.Sprintf("request body exceeds %d bytes", maxBodyBytes)}
		}
		return nil, &apiError{Status: http.StatusBadRequest, Type: errTypeInvalid, Code: "body_unreadable",
			Message: "could not read the request body"}
	}
	return b, nil
}

func writeAPIError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.Status, errorBody{Error: e})
}

// abortConn resets the connection without an answer.
func abortConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0) // RST, not FIN
	}
	_ = conn.Close()
}

// wait sleeps d unless the server closes; it does not stop when the client
// leaves (the PSP keeps working).
func (s *Server) wait(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.ctx.Done():
	}
}

// hang keeps the connection open until the client leaves, d passes or the
// server closes, then resets it.
func (s *Server) hang(w http.ResponseWriter, r *http.Request, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	case <-s.ctx.Done():
	}
	abortConn(w)
}

// preFault applies the faults that answer before processing. It reports
// whether the request was answered.
func (s *Server) preFault(w http.ResponseWriter, f fault) bool {
	switch f.Kind {
	case FaultResetBefore:
		abortConn(w)
		return true
	case FaultUnavailable:
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: &apiError{Type: errTypeAPI, Code: codeUnavailable,
			Message: "the service is temporarily unavailable"}})
		return true
	case FaultRateLimit:
		w.Header().Set("Retry-After", strconv.Itoa(int((f.RetryAfter+time.Second-1)/time.Second)))
		writeJSON(w, http.StatusTooManyRequests, errorBody{Error: &apiError{Type: errTypeRateLimit, Code: codeRateLimited,
			Message: "too many requests"}})
		return true
	}
	return false
}

func (s *Server) pick(endpoint, reference string, op providers.Operation) fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := pickFault(s.rules, s.random, s.faultRNG, endpoint, reference, op, s.cfg.HangFor)
	if f.Kind != "" {
		s.log.Info("sim: fault", "kind", f.Kind, "source", f.Source, "endpoint", endpoint, "reference", reference)
	}
	return f
}

// handleSubmit is POST /v1/operations.
func (s *Server) handleSubmit(w http.ResponseWriter, r *http.Request) {
	body, rerr := readBody(w, r)
	if rerr != nil {
		writeAPIError(w, rerr)
		return
	}
	var wr wireRequest
	derr := decodeStrict(body, &wr)
	f := s.pick(OnSubmit, wr.Reference, wr.Operation)
	if s.preFault(w, f) {
		return
	}
	if derr != nil {
		writeAPIError(w, &apiError{Status: http.StatusBadRequest, Type: errTypeInvalid, Code: "body_invalid",
			Message: "invalid JSON body: " + derr.Error()})
		return
	}
	req, verr := validate(wr)
	if verr != nil {
		writeAPIError(w, verr)
		return
	}

	key := r.Header.Get("Idempotency-Key")
	if s.cfg.NoIdempotency {
		key = ""
	}
	if len(key) > 255 {
		writeAPIError(w, invalid("Idempotency-Key", "idempotency keys are at most 255 characters"))
		return
	}
	var (
		resp     storedResponse
		replayed bool
		entry    *keyEntry
	)
	if key != "" {
		hash := sha256.Sum256(body)
		s.mu.Lock()
		now := s.now()
		e := s.keys[key]
		if e != nil && e.done && now.Sub(e.created) >= s.cfg.KeyLifetime {
			delete(s.keys, key) // expired: the next send is a new operation
			e = nil
		}
		switch {
		case e != nil && e.hash != hash:
			s.mu.Unlock()
			writeAPIError(w, &apiError{Status: http.StatusBadRequest, Type: errTypeIdempotency, Code: codeKeyMismatch,
				Message: "keys for idempotent requests can only be used with the same parameters they were first used with"})
			return
		case e != nil && !e.done:
			s.mu.Unlock()
			writeAPIError(w, &apiError{Status: http.StatusConflict, Type: errTypeIdempotency, Code: codeKeyInUse,
				Message: "there is currently another in-progress request using this idempotency key"})
			return
		case e != nil:
			resp, replayed = e.resp, true
		default:
			entry = &keyEntry{hash: hash, created: now}
			s.keys[key] = entry
		}
		s.mu.Unlock()
	}
	if entry != nil {
		// A panic below must not leave the key in flight forever.
		defer func() {
			s.mu.Lock()
			if !entry.done && s.keys[key] == entry {
				delete(s.keys, key)
			}
			s.mu.Unlock()
		}()
	}
	if f.Kind == FaultSlow {
		s.wait(f.Delay)
	}
	if !replayed {
		resp = s.execute(req, key)
		if f.Kind == FaultErrorAfter {
			resp = respond(http.StatusInternalServerError, errorBody{Error: &apiError{Type: errTypeAPI, Code: codeInternal,
				Message: "an error occurred while processing the request"}})
		}
		if entry != nil {
			s.mu.Lock()
			entry.resp, entry.done = resp, true
			s.mu.Unlock()
		}
	} else if f.Kind == FaultErrorAfter {
		resp = respond(http.StatusInternalServerError, errorBody{Error: &apiError{Type: errTypeAPI, Code: codeInternal,
			Message: "an error occurred while processing the request"}})
	}
	if f.Kind == FaultHangAfter {
		s.hang(w, r, f.Delay)
		return
	}
	resp.write(w, replayed)
}

// execute runs one validated operation and returns its answer.
func (s *Server) execute(req opRequest, key string) storedResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UTC()
	s.submitSeq++
	if s.submitSeq%4096 == 0 {
		s.pruneKeysLocked(now)
	}
	op := &Operation{
		ID:             fmt.Sprintf("op_%016x", s.idRNG.Uint64()),
		Reference:      req.reference,
		Operation:      req.op,
		Amount:         formatAmount(req.amount, req.currency),
		Currency:       req.currency,
		IdempotencyKey: key,
		CreatedAt:      now,
		Destination:    req.wire.Destination,
		CardToken:      req.wire.CardToken,
		Description:    req.wire.Description,
		Metadata:       req.wire.Metadata,
		amount:         req.amount,
	}
	decline := func(status int, typ, code, reason string) storedResponse {
		op.State, op.FinalAt, op.FailureCode, op.FailureReason = providers.StateFailed, now, code, reason
		s.recordLocked(op)
		snap := op.snapshot(false)
		e := &apiError{Type: typ, Code: code, Message: reason}
		if typ == errTypeCard {
			e.Code, e.DeclineCode = codeCardDeclined, code
			if code == codeExpiredCard {
				e.Code = codeExpiredCard
			}
		}
		return respond(status, errorBody{Error: e, Operation: &snap})
	}
	succeed := func(status int) storedResponse {
		s.recordLocked(op)
		return respond(status, op.snapshot(false))
	}

	switch req.op {
	case providers.OpPixTransfer, providers.OpBankPayout:
		d := req.wire.Destination
		switch {
		case d.PixKey != nil && d.PixKey.Value == DeclinedPixKey:
			return decline(http.StatusUnprocessableEntity, errTypeDecline, codePixKeyUnknown, "the pix key is not registered in DICT")
		case d.BankAccount != nil && d.BankAccount.Account == ClosedAccount:
			return decline(http.StatusUnprocessableEntity, errTypeDecline, codeClosed, "the destination account is closed")
		case s.balances[req.currency].LessThan(req.amount):
			return decline(http.StatusUnprocessableEntity, errTypeDecline, codeInsufficient, "insufficient funds in the platform balance")
		}
		s.balances[req.currency] = s.balances[req.currency].Sub(req.amount)
		if s.cfg.SettleAfter > 0 {
			op.State, op.settleAt = providers.StateProcessing, now.Add(s.cfg.SettleAfter)
		} else {
			op.State, op.FinalAt = providers.StateSucceeded, now
		}
		return succeed(http.StatusOK)

	case providers.OpCardCharge:
		switch req.wire.CardToken {
		case TokenDecline:
			return decline(http.StatusPaymentRequired, errTypeCard, "generic_decline", "your card was declined")
		case TokenInsufficient:
			return decline(http.StatusPaymentRequired, errTypeCard, codeInsufficient, "your card has insufficient funds")
		case TokenExpired:
			return decline(http.StatusPaymentRequired, errTypeCard, codeExpiredCard, "your card has expired")
		}
		s.balances[req.currency] = s.balances[req.currency].Add(req.amount)
		op.State, op.FinalAt = providers.StateSucceeded, now
		return succeed(http.StatusOK)

	case providers.OpRefund:
		ch, aerr := s.findChargeLocked(req.wire.Charge)
		if aerr != nil {
			return respond(aerr.Status, errorBody{Error: aerr})
		}
		if ch.Currency != req.currency {
			return respond(http.StatusBadRequest, errorBody{Error: invalid("currency",
				"refund currency %s does not match the charge's %s", req.currency, ch.Currency)})
		}
		left := ch.amount.Sub(ch.refunded)
		if req.amount.GreaterThan(left) {
			return respond(http.StatusBadRequest, errorBody{Error: &apiError{Status: http.StatusBadRequest,
				Type: errTypeInvalid, Code: codeTooLarge, Param: "amount",
				Message: fmt.Sprintf("refund amount (%s) is greater than the unrefunded amount on the charge (%s)",
					formatAmount(req.amount, req.currency), formatAmount(left, ch.Currency))}})
		}
		op.ChargeID, op.ChargeReference = ch.ID, ch.Reference
		if s.balances[req.currency].LessThan(req.amount) {
			return decline(http.StatusUnprocessableEntity, errTypeDecline, codeInsufficient, "insufficient funds in the platform balance")
		}
		s.balances[req.currency] = s.balances[req.currency].Sub(req.amount)
		ch.refunded = ch.refunded.Add(req.amount)
		op.State, op.FinalAt = providers.StateSucceeded, now
		return succeed(http.StatusOK)

	case providers.OpPixCharge:
		if prev := s.cobs[req.reference]; prev != nil {
			return respond(http.StatusConflict, errorBody{Error: &apiError{Type: errTypeInvalid, Code: codeDuplicate,
				Param: "reference", Message: "a cob with this txid already exists"}})
		}
		exp := req.expiresIn
		if exp <= 0 {
			exp = s.cfg.DefaultCobExpiry
		}
		loc := "pix.sim.saldo.test/qr/v2/cobv/" + req.reference
		op.State = providers.StateProcessing
		op.Cob = &Cob{TxID: req.reference, Status: CobActive, ExpiresAt: now.Add(exp), Location: loc,
			CopyPaste: brCode(loc, op.Amount)}
		if p := req.wire.Payer; p != nil {
			op.Cob.PayerName, op.Cob.PayerTaxID = p.Name, p.TaxID
		}
		s.cobs[req.reference] = op
		return succeed(http.StatusCreated)
	}
	// validate admits only the operations above.
	return respond(http.StatusBadRequest, errorBody{Error: invalid("operation", "unknown operation %q", req.op)})
}

// pruneKeysLocked forgets expired keys so long runs do not grow without bound.
func (s *Server) pruneKeysLocked(now time.Time) {
	for k, e := range s.keys {
		if e.done && now.Sub(e.created) >= s.cfg.KeyLifetime {
			delete(s.keys, k)
		}
	}
}

func (s *Server) findChargeLocked(ref *wireChargeRef) (*Operation, *apiError) {
	var ch *Operation
	if ref.ID != "" {
		ch = s.byID[ref.ID]
	}
	if ch == nil && ref.ID == "" {
		for _, o := range s.byRef[ref.Reference] {
			if (o.Operation == providers.OpCardCharge || o.Operation == providers.OpPixCharge) &&
				o.State == providers.StateSucceeded {
				ch = o
				break
			}
		}
	}
	if ch != nil && ref.Reference != "" && ch.Reference != ref.Reference {
		return nil, invalid("charge", "charge %s does not have reference %s", ref.ID, ref.Reference)
	}
	if ch == nil || (ch.Operation != providers.OpCardCharge && ch.Operation != providers.OpPixCharge) {
		return nil, &apiError{Status: http.StatusNotFound, Type: errTypeInvalid, Code: codeMissing, Param: "charge",
			Message: "no such charge"}
	}
	if ch.State != providers.StateSucceeded {
		return nil, invalid("charge", "charge %s is %s and cannot be refunded", ch.ID, ch.State)
	}
	return ch, nil
}

func (s *Server) recordLocked(op *Operation) {
	s.ops = append(s.ops, op)
	s.byRef[op.Reference] = append(s.byRef[op.Reference], op)
	s.byID[op.ID] = op
	if op.State == providers.StateProcessing {
		s.open = append(s.open, op)
	}
	s.log.Info("sim: operation", "id", op.ID, "reference", op.Reference, "operation", op.Operation,
		"amount", op.Amount, "currency", op.Currency, "state", op.State, "failure_code", op.FailureCode)
	s.emitLocked(op)
}

// handleLookup is GET /v1/operations?reference=R[&operation=OP]: the
// operations for R that are visible (older than LookupLag).
func (s *Server) handleLookup(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ref, opName := q.Get("reference"), providers.Operation(q.Get("operation"))
	f := s.pick(OnLookup, ref, opName)
	if s.preFault(w, f) {
		return
	}
	switch f.Kind {
	case FaultLookupFail:
		writeJSON(w, http.StatusInternalServerError, errorBody{Error: &apiError{Type: errTypeAPI, Code: codeInternal,
			Message: "search is temporarily failing"}})
		return
	case FaultSlow:
		s.wait(f.Delay)
	}
	if ref == "" {
		writeAPIError(w, invalid("reference", "reference is required"))
		return
	}
	if opName != "" && !opName.Valid() {
		writeAPIError(w, invalid("operation", "unknown operation %q", opName))
		return
	}
	s.mu.Lock()
	now := s.now()
	data := []Operation{}
	for _, o := range s.byRef[ref] {
		if opName != "" && o.Operation != opName {
			continue
		}
		if o.CreatedAt.Add(s.cfg.LookupLag).After(now) {
			continue // not visible yet
		}
		data = append(data, o.snapshot(false))
	}
	s.mu.Unlock()
	if f.Kind == FaultHangAfter {
		s.hang(w, r, f.Delay)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data})
}

// handleStatement is GET /v1/statements?date=YYYY-MM-DD: the operations
// that reached a final state on that UTC day.
func (s *Server) handleStatement(w http.ResponseWriter, r *http.Request) {
	day, err := time.Parse(time.DateOnly, r.URL.Query().Get("date"))
	if err != nil {
		writeAPIError(w, invalid("date", "date must be YYYY-MM-DD"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"date": day.Format(time.DateOnly), "data": s.Statement(day)})
}

// Statement lists the operations that reached a final state (succeeded or
// failed) on the UTC day containing day, ordered by that time then id.
// Operations still processing are not on any statement yet.
func (s *Server) Statement(day time.Time) []Operation {
	s.tick()
	start := time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, time.UTC)
	if day.Location() != time.UTC {
		d := day.UTC()
		start = time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, time.UTC)
	}
	end := start.Add(24 * time.Hour)
	s.mu.Lock()
	out := []Operation{}
	for _, o := range s.ops {
		if o.FinalAt.IsZero() || o.FinalAt.Before(start) || !o.FinalAt.Before(end) {
			continue
		}
		out = append(out, o.snapshot(false))
	}
	out = s.lieLocked(out, start, end)
	s.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].FinalAt.Equal(out[j].FinalAt) {
			return out[i].FinalAt.Before(out[j].FinalAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func (s *Server) handleCapabilities(w http.ResponseWriter, _ *http.Request) {
	c := s.Capabilities()
	writeJSON(w, http.StatusOK, wireCapabilities{
		IdempotencyKeys:          c.IdempotencyKeys,
		KeyLifetimeSeconds:       int64(c.KeyLifetime / time.Second),
		LookupByReference:        c.LookupByReference,
		ConsistencyWindowSeconds: c.ConsistencyWindow.Seconds(),
		Webhooks:                 c.Webhooks,
		Statements:               c.Statements,
		Operations:               c.Operations,
	})
}

type wireCapabilities struct {
	IdempotencyKeys          bool                  `json:"idempotency_keys"`
	KeyLifetimeSeconds       int64                 `json:"key_lifetime_seconds"`
	LookupByReference        bool                  `json:"lookup_by_reference"`
	ConsistencyWindowSeconds float64               `json:"consistency_window_seconds"`
	Webhooks                 bool                  `json:"webhooks"`
	Statements               bool                  `json:"statements"`
	Operations               []providers.Operation `json:"operations"`
}

// Operations is the oracle: every operation executed for reference, in
// execution order, regardless of lookup lag, with idempotency keys. For
// tests and audits only.
func (s *Server) Operations(reference string) []Operation {
	s.tick()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Operation, 0, len(s.byRef[reference]))
	for _, o := range s.byRef[reference] {
		out = append(out, o.snapshot(true))
	}
	return out
}

// AllOperations lists every operation executed, in execution order.
func (s *Server) AllOperations() []Operation {
	s.tick()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Operation, 0, len(s.ops))
	for _, o := range s.ops {
		out = append(out, o.snapshot(true))
	}
	return out
}

// Duplicates lists, sorted, the references with more than one money-moving
// operation (outgoing: succeeded or processing; incoming: succeeded): the
// "was anyone paid or charged twice?" audit. Empty is the goal.
func (s *Server) Duplicates() []string {
	s.tick()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for ref, ops := range s.byRef {
		n := 0
		for _, o := range ops {
			if o.moneyMoving() {
				n++
			}
		}
		if n > 1 {
			out = append(out, ref)
		}
	}
	sort.Strings(out)
	return out
}

// Balance is the platform balance in currency, formatted with its decimals.
func (s *Server) Balance(currency string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return formatAmount(s.balances[currency], currency)
}

// Balances returns every platform balance.
func (s *Server) Balances() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for _, c := range sortedCurrencies() {
		out[c] = formatAmount(s.balances[c], c)
	}
	return out
}

// SetRandomFaults replaces the random fault profile at run time (a zero
// profile turns random faults off); the fault script is unchanged. A chaos
// run uses it to calm the PSP once its attack is over.
func (s *Server) SetRandomFaults(p FaultProfile) error {
	for _, r := range []float64{p.ResetBefore, p.HangAfter, p.ErrorAfter, p.Unavailable, p.RateLimit, p.Slow, p.LookupFail} {
		if r < 0 || r > 1 {
			return fmt.Errorf("sim: random fault rates must be between 0 and 1")
		}
	}
	s.mu.Lock()
	p.SlowDelay = s.random.SlowDelay
	s.random = p
	s.mu.Unlock()
	return nil
}

// handleRandomFaults is PUT /sim/random-faults: the body is a profile in
// ParseFaultProfile's form ("error_after=0.02,lookup_fail=0.01"; empty:
// none) and replaces the random fault profile.
func (s *Server) handleRandomFaults(w http.ResponseWriter, r *http.Request) {
	body, rerr := readBody(w, r)
	if rerr != nil {
		writeAPIError(w, rerr)
		return
	}
	p, err := ParseFaultProfile(string(body))
	if err == nil {
		err = s.SetRandomFaults(p)
	}
	if err != nil {
		writeAPIError(w, invalid("profile", "%v", err))
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// AddFault appends a rule to the fault script at run time.
func (s *Server) AddFault(r FaultRule) error {
	if err := r.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	s.rules = append(s.rules, &ruleState{FaultRule: r})
	s.mu.Unlock()
	return nil
}

// PayCob plays a payer paying the cob with this txid: the cob becomes paid
// (CONCLUIDA), its operation succeeded, the platform balance is credited and
// a webhook fires. ErrCobNotFound, ErrCobExpired, ErrCobPaid otherwise.
func (s *Server) PayCob(txid, payerName, payerTaxID string) (Operation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UTC()
	s.advanceLocked(now)
	op := s.cobs[txid]
	switch {
	case op == nil:
		return Operation{}, ErrCobNotFound
	case op.Cob.Status == CobExpired:
		return op.snapshot(false), ErrCobExpired
	case op.Cob.Status == CobPaid:
		return op.snapshot(false), ErrCobPaid
	}
	op.Cob.Status, op.Cob.PaidAt = CobPaid, now
	if payerName != "" || payerTaxID != "" {
		op.Cob.PayerName, op.Cob.PayerTaxID = payerName, payerTaxID
	}
	op.State, op.FinalAt = providers.StateSucceeded, now
	s.balances[op.Currency] = s.balances[op.Currency].Add(op.amount)
	s.log.Info("sim: cob paid", "id", op.ID, "txid", txid, "amount", op.Amount)
	s.emitLocked(op)
	return op.snapshot(false), nil
}

// FlushWebhooks settles what the clock makes due, then waits until every
// queued webhook was delivered or given up (held-back events are released).
// Without webhooks it returns at once.
func (s *Server) FlushWebhooks(ctx context.Context) error {
	s.tick()
	if s.hook == nil {
		return nil
	}
	return s.hook.flush(ctx)
}

// WebhookDeliveries lists every delivery try so far, in order.
func (s *Server) WebhookDeliveries() []Delivery {
	if s.hook == nil {
		return nil
	}
	return s.hook.deliveries()
}

func (s *Server) handleOracle(w http.ResponseWriter, r *http.Request) {
	ref := r.PathValue("reference")
	ops := s.Operations(ref)
	n := 0
	for i := range ops {
		if ops[i].moneyMoving() {
			n++
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"reference": ref, "operations": ops, "money_moving": n})
}

// handleAllOperations is GET /sim/operations: the oracle for every
// reference at once (AllOperations), each operation with money_moving.
func (s *Server) handleAllOperations(w http.ResponseWriter, _ *http.Request) {
	ops := s.AllOperations()
	out := make([]OracleOperation, 0, len(ops))
	for i := range ops {
		out = append(out, OracleOperation{Operation: ops[i], MoneyMoving: ops[i].moneyMoving()})
	}
	writeJSON(w, http.StatusOK, map[string]any{"operations": out})
}

// OracleOperation is one operation in GET /sim/operations: the operation
// and whether it moved money (outgoing: succeeded or processing; incoming:
// succeeded), as Duplicates counts it.
type OracleOperation struct {
	Operation
	MoneyMoving bool `json:"money_moving"`
}

func (s *Server) handleDuplicates(w http.ResponseWriter, _ *http.Request) {
	d := s.Duplicates()
	if d == nil {
		d = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"references": d})
}

func (s *Server) handleBalances(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Balances())
}

func (s *Server) handlePay(w http.ResponseWriter, r *http.Request) {
	body, rerr := readBody(w, r)
	if rerr != nil {
		writeAPIError(w, rerr)
		return
	}
	var p wirePayer
	if len(body) > 0 {
		if err := decodeStrict(body, &p); err != nil {
			writeAPIError(w, &apiError{Status: http.StatusBadRequest, Type: errTypeInvalid, Code: "body_invalid",
				Message: "invalid JSON body: " + err.Error()})
			return
		}
	}
	op, err := s.PayCob(r.PathValue("txid"), p.Name, p.TaxID)
	switch {
	case errors.Is(err, ErrCobNotFound):
		writeAPIError(w, &apiError{Status: http.StatusNotFound, Type: errTypeInvalid, Code: codeMissing, Message: err.Error()})
	case errors.Is(err, ErrCobExpired):
		writeJSON(w, http.StatusGone, errorBody{Error: &apiError{Type: errTypeInvalid, Code: codeCobExpired, Message: err.Error()}, Operation: &op})
	case errors.Is(err, ErrCobPaid):
		writeJSON(w, http.StatusConflict, errorBody{Error: &apiError{Type: errTypeInvalid, Code: codeCobPaid, Message: err.Error()}, Operation: &op})
	default:
		writeJSON(w, http.StatusOK, op)
	}
}

func (s *Server) handleFaults(w http.ResponseWriter, r *http.Request) {
	body, rerr := readBody(w, r)
	if rerr != nil {
		writeAPIError(w, rerr)
		return
	}
	rules, err := ParseFaults(wrapRule(body))
	if err != nil {
		writeAPIError(w, invalid("rules", "%v", err))
		return
	}
	for _, rule := range rules {
		_ = s.AddFault(rule) // validated by ParseFaults
	}
	writeJSON(w, http.StatusOK, map[string]any{"added": len(rules)})
}

// wrapRule lets POST /sim/faults take one rule object as well as a script.
func wrapRule(b []byte) []byte {
	var probe map[string]json.RawMessage
	if json.Unmarshal(b, &probe) == nil {
		if _, ok := probe["rules"]; !ok {
			return append(append([]byte{'['}, b...), ']')
		}
	}
	return b
}
