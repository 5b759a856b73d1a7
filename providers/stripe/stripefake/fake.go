// Package stripefake is an httptest Stripe that keeps state the way Stripe
// documents it, for saldo's tests (issue 14): PaymentIntents, Refunds,
// Transfers and Payouts created by form-encoded POSTs; idempotency keys
// that replay the first stored answer (500s and declines included, with
// Idempotent-Replayed: true), answer 400 idempotency_error for other
// parameters and 409 idempotency_key_in_use while the first request runs,
// and expire after 24 hours; 429s, 401s and validation errors that are not
// stored; a Search API that lags behind writes; lists newest first with
// starting_after; GET /v1/account naming the account the keys belong to
// (WithAccount, WithKeys for a rotated key); scripted faults (a connection cut after the request was
// written, a hang after the operation was recorded, a 500, a 429 with
// Retry-After, a 403, a slow request); signed webhook events; and card
// disputes (OpenDispute, CloseDispute: the Dispute object, its balance
// transactions, the charge.dispute.* events Stripe sends, and refunds of
// the disputed charge refused with charge_disputed).
//
// It is a test double of Stripe, not of saldo: nothing in it knows saldo's
// code.
package stripefake

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v85/webhook"
)

// Test payment methods (Stripe's test-mode names).
const (
	PMVisa         = "pm_card_visa"
	PMDeclined     = "pm_card_chargeDeclined"
	PMInsufficient = "pm_card_chargeDeclinedInsufficientFunds"
	PMProcessing   = "pm_card_processing" // the PaymentIntent stays processing
)

// DefaultExternalAccount is the external bank account a payout that names
// no destination goes to.
const DefaultExternalAccount = "ba_fakeDefault0000"

// KeyLifetime is how long a key is kept.
const KeyLifetime = 24 * time.Hour

// FaultKind is a scripted misbehaviour for one request.
type FaultKind string

// Faults.
const (
	// FaultRateLimit: 429 with Retry-After, nothing processed or stored.
	FaultRateLimit FaultKind = "rate_limit"
	// FaultServerError: 500 api_error, stored under the key (replayed),
	// nothing created.
	FaultServerError FaultKind = "server_error"
	// FaultCutAfterWrite: the request is read and the operation recorded,
	// then the connection is closed without an answer.
	FaultCutAfterWrite FaultKind = "cut_after_write"
	// FaultHangAfterCommit: the operation is recorded and its answer stored
	// under the key, then the connection hangs for Delay (or until the
	// client leaves) and is closed without an answer.
	FaultHangAfterCommit FaultKind = "hang_after_commit"
	// FaultSlow: the key is held in flight for Delay before processing.
	FaultSlow FaultKind = "slow"
	// FaultForbidden: 403 permission_error, nothing processed or stored.
	FaultForbidden FaultKind = "forbidden"
	// FaultShouldRetry400: 400 invalid_request_error lock-like answer with
	// Stripe-Should-Retry: true, nothing stored.
	FaultShouldRetry400 FaultKind = "should_retry_400"
)

// Fault is one scripted misbehaviour. Path limits it to one create path
// ("/v1/payment_intents"); empty matches any POST.
type Fault struct {
	Kind       FaultKind
	Path       string
	Delay      time.Duration
	RetryAfter int
}

type keyEntry struct {
	fingerprint string
	status      int
	body        []byte
	created     time.Time
	inFlight    bool
}

// Server is the fake.
type Server struct {
	srv *httptest.Server

	mu        sync.Mutex
	apiKeys   map[string]bool // every key accepted, all of one account
	account   string          // the account's id (GET /v1/account)
	now       time.Time
	clockReal bool
	lag       time.Duration
	balance   int64
	seq       int
	objects   map[string]map[string]any // id -> object
	order     []string                  // creation order
	visibleAt map[string]time.Time      // search visibility of PaymentIntents
	keys      map[string]*keyEntry
	faults    []Fault
	requests  map[string]int // "METHOD path" -> count
	keysSeen  []string       // Idempotency-Key of each POST, in order
	stop      chan struct{}
	stopOnce  sync.Once
}

// Option configures a Server.
type Option func(*Server)

// WithSearchLag makes a PaymentIntent visible to Search only lag after its
// creation (fake clock).
func WithSearchLag(lag time.Duration) Option { return func(s *Server) { s.lag = lag } }

// WithBalance sets the available balance (minor units) transfers and payouts
// draw from. Default 10^10.
func WithBalance(minor int64) Option { return func(s *Server) { s.balance = minor } }

// WithFakeClock starts the clock at t; it moves only with Advance.
// Without it the fake follows the wall clock plus Advance offsets.
func WithFakeClock(t time.Time) Option {
	return func(s *Server) { s.now, s.clockReal = t, false }
}

// WithAccount sets the id of the account the keys belong to (GET
// /v1/account). Default DefaultAccount.
func WithAccount(id string) Option { return func(s *Server) { s.account = id } }

// WithKeys makes the fake accept more keys of the same account too (a
// rotated key: Stripe lets the old and new keys work side by side).
func WithKeys(keys ...string) Option {
	return func(s *Server) {
		for _, k := range keys {
			s.apiKeys[k] = true
		}
	}
}

// DefaultAccount is the account id the fake's keys belong to by default.
const DefaultAccount = "acct_fake0000000000"

// New starts a fake that accepts apiKey.
func New(apiKey string, opts ...Option) *Server {
	s := &Server{apiKeys: map[string]bool{apiKey: true}, account: DefaultAccount, clockReal: true, balance: 10_000_000_000, objects: map[string]map[string]any{},
		visibleAt: map[string]time.Time{}, keys: map[string]*keyEntry{}, requests: map[string]int{},
		stop: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// URL is the base URL.
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server (hanging requests are released).
func (s *Server) Close() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// Now is the fake's clock.
func (s *Server) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clock()
}

func (s *Server) clock() time.Time {
	if s.clockReal {
		return time.Now().Add(s.now.Sub(time.Time{}))
	}
	return s.now
}

// Advance moves the clock forward.
func (s *Server) Advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = s.now.Add(d)
}

// Script queues faults, applied to the next matching POSTs in order.
func (s *Server) Script(f ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f...)
}

// Requests counts requests by "METHOD /path".
func (s *Server) Requests(methodPath string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[methodPath]
}

// KeysSeen lists the Idempotency-Key of every POST that reached the
// idempotency layer, in order ("" when a request had none).
func (s *Server) KeysSeen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keysSeen...)
}

// Objects returns copies of the objects of a type ("payment_intent",
// "refund", "transfer", "payout") in creation order.
func (s *Server) Objects(object string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, id := range s.order {
		if o := s.objects[id]; o["object"] == object {
			out = append(out, clone(o))
		}
	}
	return out
}

// Object returns a copy of one object.
func (s *Server) Object(id string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return clone(s.objects[id])
}

// SetStatus changes an object's status (a payout paid or failed, a refund
// failed), as Stripe does later, and returns the object.
func (s *Server) SetStatus(id, status, failureCode string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.objects[id]
	if o == nil {
		return nil
	}
	o["status"] = status
	if failureCode != "" {
		switch o["object"] {
		case "payout":
			o["failure_code"], o["failure_message"] = failureCode, "the bank refused the payout"
		case "refund":
			o["failure_reason"] = failureCode
		}
	}
	return clone(o)
}

// Reverse marks a transfer fully reversed.
func (s *Server) Reverse(id string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.objects[id]
	o["reversed"], o["amount_reversed"] = true, o["amount"]
	return clone(o)
}

// DisputeFee is what the fake withdraws from the balance besides the
// disputed amount when it opens a chargeback (minor units), as Stripe's
// dispute fee.
const DisputeFee = 1500

// OpenDispute opens a chargeback of PaymentIntent pi's charge, as a card
// network does when a cardholder disputes it: a Dispute (amount, the
// charge's currency, charge, payment_intent, reason, status
// needs_response, is_charge_refundable false) whose balance_transactions
// list the withdrawal of the amount plus DisputeFee from the balance, and
// the events Stripe sends for it, in its order: charge.dispute.created
// then charge.dispute.funds_withdrawn, each a snapshot of the dispute now
// (sign and deliver them with Sign or Deliver, in any order a test wants).
// From now on a refund of pi is refused with charge_disputed. An inquiry
// (inquiry true) withdraws nothing: status warning_needs_response, no
// balance transaction, refundable, and only charge.dispute.created.
func (s *Server) OpenDispute(pi string, amount int64, reason string, inquiry bool) (map[string]any, [][]byte) {
	s.mu.Lock()
	p := s.objects[pi]
	if p == nil || p["object"] != "payment_intent" || p["status"] != "succeeded" {
		s.mu.Unlock()
		panic("stripefake: OpenDispute of " + pi + ", not a succeeded PaymentIntent")
	}
	now := s.clock()
	d := map[string]any{"object": "dispute", "amount": amount, "currency": p["currency"], "charge": p["latest_charge"],
		"payment_intent": pi, "reason": reason, "status": "needs_response", "created": now.Unix(), "metadata": map[string]any{},
		"is_charge_refundable": false, "balance_transactions": []any{}, "enhanced_eligibility_types": []any{},
		"evidence": map[string]any{}, "evidence_details": map[string]any{"has_evidence": false, "past_due": false,
			"submission_count": 0, "due_by": now.Add(7 * 24 * time.Hour).Unix()}}
	types := []string{"charge.dispute.created"}
	if inquiry {
		d["status"], d["is_charge_refundable"] = "warning_needs_response", true
	}
	s.add(d)
	if !inquiry {
		d["balance_transactions"] = []any{s.disputeTxn(d, -amount, DisputeFee, "dispute", "Chargeback withdrawal for "+fmt.Sprint(p["latest_charge"]))}
		s.balance -= amount + DisputeFee
		types = append(types, "charge.dispute.funds_withdrawn")
	}
	s.mu.Unlock()
	return s.Object(d["id"].(string)), s.events(d["id"].(string), types...)
}

// CloseDispute closes dispute id as won or lost, as the card network
// decides it, and returns the events Stripe sends: won gives the
// disputed amount back (a second balance transaction) with
// charge.dispute.funds_reinstated then charge.dispute.closed; lost keeps
// it withdrawn, with charge.dispute.closed.
func (s *Server) CloseDispute(id string, won bool) (map[string]any, [][]byte) {
	s.mu.Lock()
	d := s.objects[id]
	if d == nil || d["object"] != "dispute" {
		s.mu.Unlock()
		panic("stripefake: CloseDispute of " + id + ", not a dispute")
	}
	types := []string{"charge.dispute.closed"}
	if won {
		d["status"] = "won"
		d["balance_transactions"] = append(d["balance_transactions"].([]any),
			s.disputeTxn(d, toInt(d["amount"]), 0, "dispute_reversal", "Chargeback reversal for "+fmt.Sprint(d["charge"])))
		s.balance += toInt(d["amount"])
		types = []string{"charge.dispute.funds_reinstated", "charge.dispute.closed"}
	} else {
		d["status"] = "lost"
	}
	s.mu.Unlock()
	return s.Object(id), s.events(id, types...)
}

// disputeTxn is a balance transaction of dispute d (type adjustment).
// Caller holds mu.
func (s *Server) disputeTxn(d map[string]any, amount, fee int64, category, description string) map[string]any {
	s.seq++
	now := s.clock().Unix()
	feeDetails := []any{}
	if fee > 0 {
		feeDetails = append(feeDetails, map[string]any{"amount": fee, "currency": d["currency"], "description": "Dispute fee", "type": "stripe_fee"})
	}
	return map[string]any{"id": fmt.Sprintf("txn_fake%06d", s.seq), "object": "balance_transaction", "amount": amount,
		"available_on": now, "balance_type": "payments", "created": now, "currency": d["currency"], "description": description,
		"fee": fee, "fee_details": feeDetails, "net": amount - fee, "reporting_category": category, "source": d["id"],
		"status": "available", "type": "adjustment"}
}

// disputeOf is the dispute of PaymentIntent pi, nil when none. Caller
// holds mu.
func (s *Server) disputeOf(pi string) map[string]any {
	for _, id := range s.order {
		if o := s.objects[id]; o["object"] == "dispute" && o["payment_intent"] == pi {
			return o
		}
	}
	return nil
}

// events is Event for each type, in order, of object id as it is now.
func (s *Server) events(id string, types ...string) [][]byte {
	out := make([][]byte, 0, len(types))
	for _, t := range types {
		out = append(out, s.Event(t, id))
	}
	return out
}

// Seed adds an object as if created at created (for lists and statements).
func (s *Server) Seed(object string, amount int64, currency, reference string, created time.Time) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	md := map[string]any{}
	if reference != "" {
		md["saldo_reference"] = reference
	}
	o := map[string]any{"object": object, "amount": amount, "currency": currency, "metadata": md, "created": created.Unix()}
	switch object {
	case "payment_intent":
		o["status"] = "succeeded"
	case "refund":
		o["status"] = "succeeded"
		o["payment_intent"] = "pi_seeded"
	case "transfer":
		o["destination"], o["transfer_group"], o["reversed"], o["amount_reversed"] = "acct_seeded", reference, false, 0
	case "payout":
		o["status"] = "paid"
	}
	s.add(o)
	s.visibleAt[o["id"].(string)] = created
	return clone(o)
}

func clone(o map[string]any) map[string]any {
	if o == nil {
		return nil
	}
	b, _ := json.Marshal(o)
	var c map[string]any
	_ = json.Unmarshal(b, &c)
	return c
}

var prefixes = map[string]string{"payment_intent": "pi_", "refund": "re_", "transfer": "tr_", "payout": "po_", "event": "evt_",
	"charge": "ch_", "dispute": "dp_"}

// add gives o an id and stores it. Caller holds mu.
func (s *Server) add(o map[string]any) {
	s.seq++
	id := fmt.Sprintf("%sfake%06d", prefixes[o["object"].(string)], s.seq)
	o["id"] = id
	o["livemode"] = false
	s.objects[id] = o
	s.order = append(s.order, id)
}

func (s *Server) write(w http.ResponseWriter, status int, body []byte, replayed bool) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", fmt.Sprintf("req_fake%d", time.Now().UnixNano()))
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func apiError(status int, typ, code, msg string, extra map[string]any) (int, []byte) {
	e := map[string]any{"type": typ, "message": msg}
	if code != "" {
		e["code"] = code
	}
	for k, v := range extra {
		e[k] = v
	}
	b, _ := json.Marshal(map[string]any{"error": e})
	return status, b
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests[r.Method+" "+r.URL.Path]++
	s.mu.Unlock()
	if key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); !ok || !s.acceptsKey(key) {
		// Stripe masks the key it was given.
		st, b := apiError(http.StatusUnauthorized, "invalid_request_error", "", "Invalid API Key provided: "+mask(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")), nil)
		s.write(w, st, b, false)
		return
	}
	if r.Header.Get("Stripe-Version") == "" {
		st, b := apiError(http.StatusBadRequest, "invalid_request_error", "", "fake: no Stripe-Version", nil)
		s.write(w, st, b, false)
		return
	}
	switch r.Method {
	case http.MethodGet:
		s.serveGet(w, r)
	case http.MethodPost:
		s.servePost(w, r)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func (s *Server) acceptsKey(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.apiKeys[key]
}

func mask(key string) string {
	if len(key) <= 4 {
		return "****"
	}
	return strings.Repeat("*", 8) + key[len(key)-4:]
}

func (s *Server) takeFault(path string) (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if f.Path == "" || f.Path == path {
			s.faults = append(s.faults[:i], s.faults[i+1:]...)
			return f, true
		}
	}
	return Fault{}, false
}

func (s *Server) servePost(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != "application/x-www-form-urlencoded" {
		st, b := apiError(http.StatusBadRequest, "invalid_request_error", "", "fake: want a form-encoded body, got "+ct, nil)
		s.write(w, st, b, false)
		return
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	form, err := url.ParseQuery(string(raw))
	if err != nil {
		st, b := apiError(http.StatusBadRequest, "invalid_request_error", "", "fake: unreadable form", nil)
		s.write(w, st, b, false)
		return
	}
	fault, faulted := s.takeFault(r.URL.Path)
	switch {
	case faulted && fault.Kind == FaultRateLimit:
		w.Header().Set("Retry-After", strconv.Itoa(fault.RetryAfter))
		st, b := apiError(http.StatusTooManyRequests, "invalid_request_error", "rate_limit", "Too many requests hit the API too quickly.", nil)
		s.write(w, st, b, false)
		return
	case faulted && fault.Kind == FaultForbidden:
		st, b := apiError(http.StatusForbidden, "invalid_request_error", "", "The provided key does not have the required permissions for this endpoint.", nil)
		s.write(w, st, b, false)
		return
	case faulted && fault.Kind == FaultShouldRetry400:
		w.Header().Set("Stripe-Should-Retry", "true")
		st, b := apiError(http.StatusBadRequest, "invalid_request_error", "", "Please retry this request.", nil)
		s.write(w, st, b, false)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	fingerprint := r.URL.Path + "?" + form.Encode()
	s.mu.Lock()
	s.keysSeen = append(s.keysSeen, key)
	now := s.clock()
	if e, ok := s.keys[key]; ok && key != "" && now.Sub(e.created) > KeyLifetime {
		delete(s.keys, key) // pruned: a re-send creates a new object
	}
	if e, ok := s.keys[key]; ok && key != "" {
		switch {
		case e.fingerprint != fingerprint:
			s.mu.Unlock()
			st, b := apiError(http.StatusBadRequest, "idempotency_error", "",
				"Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '"+key+"' if you meant to execute a different request.", nil)
			s.write(w, st, b, false)
		case e.inFlight:
			s.mu.Unlock()
			w.Header().Set("Stripe-Should-Retry", "true")
			st, b := apiError(http.StatusConflict, "idempotency_error", "idempotency_key_in_use",
				"There is currently another in-progress request using this Stripe-Idempotency-Key. Please try again later.", nil)
			s.write(w, st, b, false)
		default:
			status, body := e.status, e.body
			s.mu.Unlock()
			s.write(w, status, body, true)
		}
		return
	}
	var entry *keyEntry
	if key != "" {
		entry = &keyEntry{fingerprint: fingerprint, created: now, inFlight: true}
		s.keys[key] = entry
	}
	s.mu.Unlock()

	if faulted && fault.Kind == FaultSlow {
		select {
		case <-time.After(fault.Delay):
		case <-s.stop:
		}
	}
	var status int
	var body []byte
	if faulted && fault.Kind == FaultServerError {
		status, body = apiError(http.StatusInternalServerError, "api_error", "", "An unknown error occurred", nil)
	} else {
		status, body = s.create(r.URL.Path, form)
	}
	s.mu.Lock()
	if entry != nil {
		// Validation errors (400 invalid_request_error without a created
		// object) are not stored; everything that started executing is.
		if status == http.StatusBadRequest && !strings.Contains(string(body), `"stored"`) {
			delete(s.keys, key)
		} else {
			entry.status, entry.body, entry.inFlight = status, stripStored(body), false
		}
	}
	s.mu.Unlock()
	body = stripStored(body)
	if faulted && (fault.Kind == FaultCutAfterWrite || fault.Kind == FaultHangAfterCommit) {
		if fault.Kind == FaultHangAfterCommit {
			d := fault.Delay
			if d <= 0 {
				d = time.Minute
			}
			select {
			case <-time.After(d):
			case <-r.Context().Done():
			case <-s.stop:
			}
		}
		hijack(w)
		return
	}
	s.write(w, status, body, false)
}

// stripStored removes the internal marker that a 400 was stored.
func stripStored(b []byte) []byte {
	return []byte(strings.Replace(string(b), `,"stored":true`, "", 1))
}

func hijack(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			_ = c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func metadataOf(form url.Values) map[string]any {
	md := map[string]any{}
	for k, vs := range form {
		if strings.HasPrefix(k, "metadata[") && strings.HasSuffix(k, "]") {
			md[k[len("metadata["):len(k)-1]] = vs[0]
		}
	}
	return md
}

func positive(form url.Values, name string) (int64, bool) {
	n, err := strconv.ParseInt(form.Get(name), 10, 64)
	return n, err == nil && n > 0
}

// create performs a create request and answers it.
func (s *Server) create(path string, form url.Values) (int, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	amount, ok := positive(form, "amount")
	if !ok {
		return apiError(http.StatusBadRequest, "invalid_request_error", "parameter_invalid_integer", "Invalid positive integer", map[string]any{"param": "amount"})
	}
	cur := form.Get("currency")
	o := map[string]any{"amount": amount, "currency": cur, "metadata": metadataOf(form), "created": now.Unix()}
	switch path {
	case "/v1/payment_intents":
		if amount > 99999999 {
			return apiError(http.StatusBadRequest, "invalid_request_error", "amount_too_large", "Amount must be no more than $999,999.99", map[string]any{"param": "amount"})
		}
		if form.Get("confirm") != "true" || form.Get("payment_method") == "" || cur == "" {
			return apiError(http.StatusBadRequest, "invalid_request_error", "parameter_missing", "fake: confirm, payment_method and currency are required", nil)
		}
		o["object"], o["capture_method"] = "payment_intent", "automatic"
		o["payment_method"] = form.Get("payment_method")
		o["description"] = form.Get("description")
		s.add(o)
		s.visibleAt[o["id"].(string)] = now.Add(s.lag)
		switch form.Get("payment_method") {
		case PMDeclined, PMInsufficient:
			decline := "generic_decline"
			if form.Get("payment_method") == PMInsufficient {
				decline = "insufficient_funds"
			}
			o["status"] = "requires_payment_method"
			lpe := map[string]any{"type": "card_error", "code": "card_declined", "decline_code": decline, "message": "Your card was declined."}
			o["last_payment_error"] = lpe
			return apiError(http.StatusPaymentRequired, "card_error", "card_declined", "Your card was declined.",
				map[string]any{"decline_code": decline, "payment_intent": clone(o), "stored": true})
		case PMProcessing:
			o["status"] = "processing"
		default:
			o["status"] = "succeeded"
			s.seq++
			o["latest_charge"] = fmt.Sprintf("ch_fake%06d", s.seq)
		}
	case "/v1/refunds":
		pi := s.objects[form.Get("payment_intent")]
		if pi == nil || pi["object"] != "payment_intent" {
			return apiError(http.StatusBadRequest, "invalid_request_error", "resource_missing", "No such payment_intent: '"+form.Get("payment_intent")+"'", map[string]any{"param": "payment_intent"})
		}
		if pi["status"] != "succeeded" {
			return apiError(http.StatusBadRequest, "invalid_request_error", "charge_not_refundable", "This PaymentIntent has no successful charge to refund.", nil)
		}
		if d := s.disputeOf(pi["id"].(string)); d != nil && d["is_charge_refundable"] != true {
			return apiError(http.StatusBadRequest, "invalid_request_error", "charge_disputed",
				"Charge "+fmt.Sprint(pi["latest_charge"])+" has been charged back; cannot issue a refund.", map[string]any{"stored": true})
		}
		var refunded int64
		for _, id := range s.order {
			if r := s.objects[id]; r["object"] == "refund" && r["payment_intent"] == pi["id"] && r["status"] != "failed" {
				refunded += toInt(r["amount"])
			}
		}
		if refunded+amount > toInt(pi["amount"]) {
			return apiError(http.StatusBadRequest, "invalid_request_error", "amount_too_large",
				fmt.Sprintf("Refund amount (%d) is greater than unrefunded amount on charge (%d)", amount, toInt(pi["amount"])-refunded), map[string]any{"param": "amount"})
		}
		o["object"], o["status"], o["payment_intent"], o["currency"] = "refund", "succeeded", pi["id"], pi["currency"]
		s.add(o)
	case "/v1/transfers":
		dest := form.Get("destination")
		if !regexp.MustCompile(`^acct_[A-Za-z0-9]+$`).MatchString(dest) {
			return apiError(http.StatusBadRequest, "invalid_request_error", "resource_missing", "No such destination: '"+dest+"'", map[string]any{"param": "destination"})
		}
		if amount > s.balance {
			return apiError(http.StatusBadRequest, "invalid_request_error", "balance_insufficient",
				"You have insufficient available funds in your Stripe account.", map[string]any{"stored": true})
		}
		s.balance -= amount
		o["object"], o["destination"], o["transfer_group"] = "transfer", dest, form.Get("transfer_group")
		o["reversed"], o["amount_reversed"], o["description"] = false, 0, form.Get("description")
		s.add(o)
	case "/v1/payouts":
		// A payout goes to an external account of the platform's account:
		// the one named in destination, else the default for the currency.
		dest := form.Get("destination")
		if dest != "" && !regexp.MustCompile(`^(ba|card)_[A-Za-z0-9]+$`).MatchString(dest) {
			return apiError(http.StatusBadRequest, "invalid_request_error", "resource_missing", "No such external account: '"+dest+"'", map[string]any{"param": "destination"})
		}
		if dest == "" {
			dest = DefaultExternalAccount
		}
		if amount > s.balance {
			return apiError(http.StatusBadRequest, "invalid_request_error", "balance_insufficient",
				"You have insufficient funds in your Stripe account for this payout.", map[string]any{"stored": true})
		}
		s.balance -= amount
		o["object"], o["status"], o["arrival_date"] = "payout", "pending", now.Add(48*time.Hour).Unix()
		o["destination"] = dest
		o["failure_code"], o["failure_message"], o["description"] = nil, nil, form.Get("description")
		s.add(o)
	default:
		return apiError(http.StatusNotFound, "invalid_request_error", "", "Unrecognized request URL (POST: "+path+")", nil)
	}
	b, _ := json.Marshal(o)
	return http.StatusOK, b
}

func toInt(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case float64:
		return int64(n)
	case int:
		return int64(n)
	}
	return 0
}

var searchRe = regexp.MustCompile(`^metadata\['([^']+)'\]:'((?:[^'\\]|\\.)*)'$`)

func (s *Server) serveGet(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 10
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n >= 1 && n <= 100 {
		limit = n
	}
	s.mu.Lock()
	now := s.clock()
	var object string
	var match func(o map[string]any) bool
	isSearch := false
	switch r.URL.Path {
	case "/v1/account":
		// The account the key belongs to, as Stripe answers it (the
		// fields saldo reads, and a few more).
		b, _ := json.Marshal(map[string]any{"id": s.account, "object": "account", "type": "standard",
			"charges_enabled": true, "payouts_enabled": true, "country": "BR", "default_currency": "brl"})
		s.mu.Unlock()
		s.write(w, http.StatusOK, b, false)
		return
	case "/v1/payment_intents/search":
		m := searchRe.FindStringSubmatch(q.Get("query"))
		if m == nil {
			s.mu.Unlock()
			st, b := apiError(http.StatusBadRequest, "invalid_request_error", "", "fake: unsupported search query", nil)
			s.write(w, st, b, false)
			return
		}
		field, value := m[1], strings.ReplaceAll(m[2], `\'`, `'`)
		object, isSearch = "payment_intent", true
		match = func(o map[string]any) bool {
			md, _ := o["metadata"].(map[string]any)
			return md[field] == value && !now.Before(s.visibleAt[o["id"].(string)])
		}
	case "/v1/payment_intents", "/v1/refunds", "/v1/transfers", "/v1/payouts":
		object = map[string]string{"/v1/payment_intents": "payment_intent", "/v1/refunds": "refund",
			"/v1/transfers": "transfer", "/v1/payouts": "payout"}[r.URL.Path]
		gte, hasGte := intParam(q, "created[gte]")
		lt, hasLt := intParam(q, "created[lt]")
		group := q.Get("transfer_group")
		match = func(o map[string]any) bool {
			c := toInt(o["created"])
			return (!hasGte || c >= gte) && (!hasLt || c < lt) && (group == "" || o["transfer_group"] == group)
		}
	default:
		if o := s.objects[strings.TrimPrefix(r.URL.Path[strings.LastIndexByte(r.URL.Path, '/'):], "/")]; o != nil {
			b, _ := json.Marshal(o)
			s.mu.Unlock()
			s.write(w, http.StatusOK, b, false)
			return
		}
		s.mu.Unlock()
		st, b := apiError(http.StatusNotFound, "invalid_request_error", "resource_missing", "No such object", nil)
		s.write(w, st, b, false)
		return
	}
	// Newest first (created, then creation order), as Stripe lists.
	ids := make([]string, 0, len(s.order))
	for i := len(s.order) - 1; i >= 0; i-- {
		if o := s.objects[s.order[i]]; o["object"] == object && match(o) {
			ids = append(ids, s.order[i])
		}
	}
	sort.SliceStable(ids, func(i, j int) bool { return toInt(s.objects[ids[i]]["created"]) > toInt(s.objects[ids[j]]["created"]) })
	if after := q.Get("starting_after"); after != "" && !isSearch {
		for i, id := range ids {
			if id == after {
				ids = ids[i+1:]
				break
			}
		}
	}
	more := len(ids) > limit
	if more {
		ids = ids[:limit]
	}
	data := make([]map[string]any, 0, len(ids))
	for _, id := range ids {
		data = append(data, s.objects[id])
	}
	kind := "list"
	if isSearch {
		kind = "search_result"
	}
	b, _ := json.Marshal(map[string]any{"object": kind, "data": data, "has_more": more, "url": r.URL.Path})
	s.mu.Unlock()
	s.write(w, http.StatusOK, b, false)
}

func intParam(q url.Values, name string) (int64, bool) {
	n, err := strconv.ParseInt(q.Get(name), 10, 64)
	return n, err == nil
}

// Event builds a webhook event of type typ whose data.object is the current
// state of object id.
func (s *Server) Event(typ, id string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	b, _ := json.Marshal(map[string]any{
		"id": fmt.Sprintf("evt_fake%06d", s.seq), "object": "event", "type": typ, "api_version": "2026-03-25.dahlia",
		"created": s.clock().Unix(), "livemode": false, "pending_webhooks": 1,
		"data": map[string]any{"object": s.objects[id]},
	})
	return b
}

// Sign is the Stripe-Signature header for body signed with secret at t.
func Sign(secret string, t time.Time, body []byte) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: t}).Header
}

// Deliver POSTs a signed event to url, as Stripe does, and returns the
// status code.
func Deliver(ctx context.Context, url, secret string, t time.Time, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Stripe-Signature", Sign(secret, t, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}
