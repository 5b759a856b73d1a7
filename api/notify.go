package api

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
)

// Outbound notifications (R24): a merchant registers URLs; when one of its
// payouts reaches a final status, saldo POSTs a signed event to each:
//
//	POST <url>
//	Content-Type: application/json
//	Saldo-Event-Id: evt_...
//	Saldo-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
//
//	{"id":"evt_...","type":"payout.succeeded","created_at":"...","data":{...payout...}}
//
// The event row and its delivery job are inserted in the SAME transaction
// that records the final status (payouts.Config.OnFinal), so a committed
// status always has its notice and a rolled-back one never does. Delivery is
// a River job retried with exponential backoff until a 2xx; receivers must
// deduplicate by event id (a delivery may repeat). VerifySignature checks a
// delivery.

// SignatureHeader carries the signature of a notification.
const SignatureHeader = "Saldo-Signature"

// EventIDHeader repeats the event id.
const EventIDHeader = "Saldo-Event-Id"

// Sign computes the SignatureHeader value for body at t.
func Sign(secret string, t time.Time, body []byte) string {
	return fmt.Sprintf("t=%d,v1=%s", t.Unix(), notificationMAC(secret, t.Unix(), body))
}

func notificationMAC(secret string, ts int64, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(strconv.FormatInt(ts, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// ErrSignature: a notification's signature or timestamp did not verify.
var ErrSignature = errors.New("api: notification signature invalid")

// VerifySignature checks a notification as a receiver should: the HMAC over
// "<t>.<body>" with the endpoint's secret, and t within tolerance of now.
func VerifySignature(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts int64
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("%w: bad timestamp", ErrSignature)
			}
			ts = n
		case "v1":
			sigs = append(sigs, v)
		}
	}
	if ts == 0 || len(sigs) == 0 {
		return fmt.Errorf("%w: malformed header", ErrSignature)
	}
	want := notificationMAC(secret, ts, body)
	ok := false
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			ok = true
		}
	}
	if !ok {
		return ErrSignature
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: timestamp outside tolerance", ErrSignature)
	}
	return nil
}

// NotifierConfig configures a Notifier. Pool is required.
type NotifierConfig struct {
	Pool *pgxpool.Pool
	// River enqueues delivery jobs outside a worker; default an insert-only
	// client on Pool. The client that runs the jobs must have the
	// Notifier's workers (AddWorkers).
	River *river.Client[pgx.Tx]
	// HTTP settings of the delivery client: short connect, bounded read.
	// Defaults: connect 3s, read 10s.
	HTTP   providers.HTTPSettings
	Clock  Clock
	Logger *slog.Logger
	Queue  string
	// MaxAttempts of one delivery (default 15: about a day with the backoff
	// of 10s doubling up to 2h).
	MaxAttempts int
	// RetryBase is the first retry delay (default 10s); it doubles per
	// attempt up to RetryMax (default 2h).
	RetryBase time.Duration
	RetryMax  time.Duration
	// MaxInFlightPerMerchant caps the deliveries to one merchant's
	// endpoints this process makes at once (default 4). A delivery past it
	// is snoozed (River: no attempt spent) and a worker goes to another
	// merchant's: a merchant whose endpoints hang (each try holding a
	// worker for the whole read timeout) delays only its own
	// notifications. Keep it below the delivery workers (the engine sets
	// a quarter of them).
	MaxInFlightPerMerchant int
}

// Notifier records and delivers outbound notifications.
type Notifier struct {
	cfg    NotifierConfig
	pool   *pgxpool.Pool
	river  *river.Client[pgx.Tx]
	client *providers.Client
	clock  Clock
	log    *slog.Logger

	mu       sync.Mutex
	inFlight map[string]int // merchant id -> deliveries under way in this process
}

// ErrMerchantBusy: the merchant already has MaxInFlightPerMerchant
// deliveries under way in this process; nothing was sent. The delivery
// worker snoozes the job.
var ErrMerchantBusy = errors.New("api: the merchant's deliveries are at their in-flight limit; nothing sent")

// admit takes one of the merchant's in-flight slots; release gives it back.
func (n *Notifier) admit(merchantID string) (release func(), ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.inFlight[merchantID] >= n.cfg.MaxInFlightPerMerchant {
		return nil, false
	}
	n.inFlight[merchantID]++
	return func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.inFlight[merchantID]--; n.inFlight[merchantID] <= 0 {
			delete(n.inFlight, merchantID)
		}
	}, true
}

// NewNotifier builds a Notifier. Wire it as payouts.Config.OnFinal =
// notifier.PayoutFinal and register its worker with AddWorkers.
func NewNotifier(cfg NotifierConfig) (*Notifier, error) {
	if cfg.Pool == nil {
		return nil, errors.New("api: NotifierConfig.Pool is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Queue == "" {
		cfg.Queue = river.QueueDefault
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 15
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = 10 * time.Second
	}
	if cfg.RetryMax < cfg.RetryBase {
		cfg.RetryMax = max(2*time.Hour, cfg.RetryBase)
	}
	if cfg.HTTP.ReadTimeout <= 0 {
		cfg.HTTP.ReadTimeout = 10 * time.Second
	}
	if cfg.MaxInFlightPerMerchant <= 0 {
		cfg.MaxInFlightPerMerchant = 4
	}
	n := &Notifier{cfg: cfg, pool: cfg.Pool, client: providers.NewClient(cfg.HTTP), clock: cfg.Clock, log: cfg.Logger, river: cfg.River,
		inFlight: map[string]int{}}
	if n.river == nil {
		c, err := river.NewClient(riverpgxv5.New(cfg.Pool), &river.Config{Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("api: insert-only river client: %w", err)
		}
		n.river = c
	}
	return n, nil
}

// SetRiverClient sets the client used to enqueue outside workers.
func (n *Notifier) SetRiverClient(c *river.Client[pgx.Tx]) {
	if c != nil {
		n.river = c
	}
}

// AddWorkers registers the delivery worker.
func (n *Notifier) AddWorkers(w *river.Workers) {
	river.AddWorker(w, &DeliverNotificationWorker{n: n})
}

// DeliverNotificationArgs is the River job delivering one event.
type DeliverNotificationArgs struct {
	EventID string `json:"event_id"`
}

// Kind is the River job kind.
func (DeliverNotificationArgs) Kind() string { return "saldo_deliver_notification" }

// DeliverNotificationWorker delivers one event per run; a failure returns an
// error and River retries it after NextRetry.
type DeliverNotificationWorker struct {
	river.WorkerDefaults[DeliverNotificationArgs]
	n *Notifier
}

// NextRetry: RetryBase doubling per attempt, at most RetryMax.
func (w *DeliverNotificationWorker) NextRetry(job *river.Job[DeliverNotificationArgs]) time.Time {
	d, limit := w.n.cfg.RetryBase, w.n.cfg.RetryMax
	for i := 1; i < job.Attempt && d < limit; i++ {
		d *= 2
	}
	return time.Now().Add(min(d, limit))
}

// Timeout bounds one delivery.
func (w *DeliverNotificationWorker) Timeout(*river.Job[DeliverNotificationArgs]) time.Duration {
	s := w.n.client.Settings()
	return s.ConnectTimeout + s.ReadTimeout + 5*time.Second
}

// Work delivers the event. A merchant at its in-flight limit
// (ErrMerchantBusy) has the job snoozed for a second or two, which spends
// none of its attempts.
func (w *DeliverNotificationWorker) Work(ctx context.Context, job *river.Job[DeliverNotificationArgs]) error {
	err := w.n.Deliver(ctx, job.Args.EventID)
	if errors.Is(err, ErrMerchantBusy) {
		return river.JobSnooze(time.Second + time.Duration(mathrand.Int64N(int64(time.Second))))
	}
	return err
}

// PayoutFinal records a payout.<status> event for each active endpoint of
// the payout's merchant and enqueues its delivery, on tx (the transaction
// that made the payout final). It is payouts.Config.OnFinal.
func (n *Notifier) PayoutFinal(ctx context.Context, tx pgx.Tx, p payouts.Payout) error {
	return n.record(ctx, tx, []notice{payoutNotice(p)})
}

// PayoutsFinal is PayoutFinal for payouts made final together (the
// group-committed record of their attempts), in three statements however
// many they are. It is payouts.Config.OnFinalMany.
func (n *Notifier) PayoutsFinal(ctx context.Context, tx pgx.Tx, ps []payouts.Payout) error {
	ns := make([]notice, len(ps))
	for i, p := range ps {
		ns[i] = payoutNotice(p)
	}
	return n.record(ctx, tx, ns)
}

func payoutNotice(p payouts.Payout) notice {
	dedupe := "payout:" + p.ID + ":" + string(p.Status)
	if p.CurrentAttemptID != nil {
		dedupe += ":" + p.CurrentAttemptID.String()
	}
	return notice{merchantID: p.MerchantID, typ: "payout." + string(p.Status), objectID: p.ID, dedupe: dedupe, data: payoutJSON(p)}
}

// PayoutDiverged records a payout.diverged event: the provider reported
// attempt a of payout p paid after saldo resolved it failed (its merchant
// may have been told payout.failed, or a successor is held: the money
// left), or failed after it succeeded (a reversal: the money came back);
// an operator settles it. It is payouts.Config.OnDiverged, called in
// the divergence's transaction. Its data is the payout as it stands, with
// the diverged attempt's id.
func (n *Notifier) PayoutDiverged(ctx context.Context, tx pgx.Tx, p payouts.Payout, a attempts.Attempt) error {
	d := divergedOf(payoutJSON(p), a)
	return n.record(ctx, tx, []notice{{merchantID: p.MerchantID, typ: "payout.diverged", objectID: p.ID,
		dedupe: "payout:" + p.ID + ":diverged:" + a.ID.String(), data: d}})
}

// ChargeDiverged records a charge.diverged event: the provider reported
// charge c paid (attempt a) after saldo resolved it failed or expired (the
// payer's money arrived and was not credited), failed after it was paid
// (a reversal: the merchant was credited with money that did not arrive),
// or disputed (a chargeback: the card network took the money back); an
// operator settles it. It is charges.Config.OnDiverged.
func (n *Notifier) ChargeDiverged(ctx context.Context, tx pgx.Tx, c charges.Charge, a attempts.Attempt) error {
	d := divergedOf(chargeJSONOf(c), a)
	return n.record(ctx, tx, []notice{{merchantID: c.MerchantID, typ: "charge.diverged", objectID: c.ID,
		dedupe: "charge:" + c.ID + ":diverged:" + a.ID.String(), data: d}})
}

// divergedJSON is a *.diverged event's data: the payout or charge as it
// stands, the attempt the provider contradicted and which way
// (Divergence*).
type divergedJSON struct {
	Object     any        `json:"object"`
	AttemptID  string     `json:"attempt_id"`
	DivergedAt *time.Time `json:"diverged_at"`
	Kind       string     `json:"divergence_kind"`
}

// The divergence kinds (attempts.Divergence*), as *.diverged events name
// them.
const (
	// DivergencePaidAfterFailure: the provider reported the operation
	// succeeded after saldo resolved it failed (money moved that the ledger
	// released or never credited).
	DivergencePaidAfterFailure = attempts.DivergencePaidAfterFailure
	// DivergenceReversal: the provider reported the operation failed after
	// it succeeded (a payout returned, a refund failed late, a charge that
	// did not settle): the ledger shows money moved that came back or never
	// arrived.
	DivergenceReversal = attempts.DivergenceReversal
	// DivergenceDispute: a paid card charge was disputed and the card
	// network took its money back (a chargeback); it may come back if the
	// merchant wins.
	DivergenceDispute = attempts.DivergenceDispute
	// DivergenceSecondOperation: the provider reported another operation
	// succeeded under the reference of an attempt that succeeded as its
	// own (a cob paid twice, a transfer made twice): money moved twice.
	DivergenceSecondOperation = attempts.DivergenceSecondOperation
)

// divergedOf is the data of a divergence: its kind is the one recorded
// with it (attempts.divergence_kind, read with the attempt: a charge's may
// be a dispute, a succeeded attempt's a reversal or a second operation);
// an attempt read without one gets the kind its status always meant.
func divergedOf(object any, a attempts.Attempt) divergedJSON {
	kind := a.DivergenceKind
	if kind == "" {
		kind = DivergencePaidAfterFailure
		if a.Status == attempts.StatusSucceeded {
			kind = DivergenceReversal
		}
	}
	return divergedJSON{Object: object, AttemptID: a.ID.String(), DivergedAt: a.DivergedAt, Kind: kind}
}

// ChargeFinal records a charge.<status> event (paid, failed, expired) like
// PayoutFinal does for payouts. It is charges.Config.OnFinal (called inside
// the transaction that makes the charge final); a charge not final is
// skipped.
func (n *Notifier) ChargeFinal(ctx context.Context, tx pgx.Tx, c charges.Charge) error {
	return n.ChargesFinal(ctx, tx, []charges.Charge{c})
}

// ChargesFinal is ChargeFinal for charges made final together (the
// group-committed record of their attempts), in three statements however
// many they are. It is charges.Config.OnFinalMany.
func (n *Notifier) ChargesFinal(ctx context.Context, tx pgx.Tx, cs []charges.Charge) error {
	ns := make([]notice, 0, len(cs))
	for _, c := range cs {
		if c.Status.Final() {
			ns = append(ns, notice{merchantID: c.MerchantID, typ: "charge." + string(c.Status), objectID: c.ID,
				dedupe: "charge:" + c.ID + ":" + string(c.Status), data: chargeJSONOf(c)})
		}
	}
	if len(ns) == 0 {
		return nil
	}
	return n.record(ctx, tx, ns)
}

type eventEnvelope struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	Data      any       `json:"data"`
}

// notice is one event to record for every live endpoint of its merchant.
type notice struct {
	merchantID, typ, objectID, dedupe string
	data                              any
}

// record inserts, inside tx, an event per notice and live endpoint of the
// notice's merchant (an event already recorded under its dedupe key is
// skipped) and a delivery job per event inserted: one statement to find
// the endpoints, one to insert the events, one to enqueue the jobs.
func (n *Notifier) record(ctx context.Context, tx pgx.Tx, ns []notice) error {
	merchants := make([]string, 0, len(ns))
	for _, x := range ns {
		merchants = append(merchants, x.merchantID)
	}
	rows, err := tx.Query(ctx, `SELECT merchant_id, id FROM notification_endpoints
		WHERE merchant_id = ANY ($1::text[]) AND disabled_at IS NULL ORDER BY merchant_id, id`, merchants)
	if err != nil {
		return err
	}
	endpoints := map[string][]string{}
	var merchant, endpoint string
	if _, err := pgx.ForEachRow(rows, []any{&merchant, &endpoint}, func() error {
		endpoints[merchant] = append(endpoints[merchant], endpoint)
		return nil
	}); err != nil {
		return err
	}
	if len(endpoints) == 0 {
		return nil
	}
	now := n.clock.Now().UTC()
	var ids, eps, ms, types, objects, dedupes []string
	var bodies [][]byte
	for _, x := range ns {
		for _, ep := range endpoints[x.merchantID] {
			id := "evt_" + randomHex(16)
			body, err := json.Marshal(eventEnvelope{ID: id, Type: x.typ, CreatedAt: now, Data: x.data})
			if err != nil {
				return err
			}
			ids, eps, ms, types = append(ids, id), append(eps, ep), append(ms, x.merchantID), append(types, x.typ)
			objects, dedupes, bodies = append(objects, x.objectID), append(dedupes, x.dedupe), append(bodies, body)
		}
	}
	rows, err = tx.Query(ctx, `INSERT INTO notification_events (id, endpoint_id, merchant_id, type, object_id, dedupe_key, payload, created_at)
		SELECT id, endpoint_id, merchant_id, type, object_id, dedupe_key, payload, $8
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bytea[])
			AS u(id, endpoint_id, merchant_id, type, object_id, dedupe_key, payload)
		ON CONFLICT (endpoint_id, dedupe_key) DO NOTHING RETURNING id`,
		ids, eps, ms, types, objects, dedupes, bodies, now)
	if err != nil {
		return err
	}
	inserted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(inserted) == 0 {
		return nil
	}
	client := n.river
	if c, err := river.ClientFromContextSafely[pgx.Tx](ctx); err == nil {
		client = c
	}
	jobs := make([]river.InsertManyParams, len(inserted))
	for i, id := range inserted {
		jobs[i] = river.InsertManyParams{Args: DeliverNotificationArgs{EventID: id},
			InsertOpts: &river.InsertOpts{Queue: n.cfg.Queue, MaxAttempts: n.cfg.MaxAttempts}}
	}
	if _, err := client.InsertManyTx(ctx, tx, jobs); err != nil {
		return fmt.Errorf("api: enqueue %d notifications: %w", len(jobs), err)
	}
	return nil
}

// Deliver makes one delivery of an event: a signed POST with the event
// body. A 2xx marks it delivered; anything else is recorded and returned as
// an error (the job retries). A delivered event is not sent again. With
// its merchant at MaxInFlightPerMerchant deliveries in this process it
// sends nothing and returns ErrMerchantBusy.
func (n *Notifier) Deliver(ctx context.Context, eventID string) error {
	var url, secret, merchantID string
	var body []byte
	var delivered, disabled *time.Time
	err := n.pool.QueryRow(ctx, `SELECT e.payload, e.delivered_at, p.url, p.secret, p.disabled_at, e.merchant_id FROM notification_events e
		JOIN notification_endpoints p ON p.id = e.endpoint_id WHERE e.id = $1`, eventID).Scan(&body, &delivered, &url, &secret, &disabled, &merchantID)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("api: notification %s not found", eventID)
	}
	if err != nil {
		return err
	}
	if delivered != nil {
		return nil
	}
	if disabled != nil {
		_, err := n.pool.Exec(ctx, `UPDATE notification_events SET last_error = 'endpoint disabled; not sent' WHERE id = $1`, eventID)
		return err
	}
	release, admitted := n.admit(merchantID)
	if !admitted {
		return ErrMerchantBusy
	}
	defer release()
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "saldo-notifications/1")
	h.Set(EventIDHeader, eventID)
	h.Set(SignatureHeader, Sign(secret, n.clock.Now(), body))
	ex := n.client.Do(ctx, http.MethodPost, url, h, body)
	ok := ex.Err == nil && ex.StatusCode >= 200 && ex.StatusCode < 300
	errText := ""
	switch {
	case ex.Err != nil:
		errText = deliveryErrorText(url, ex.Err)
	case !ok:
		errText = fmt.Sprintf("receiver answered %d", ex.StatusCode)
	}
	var status *int
	if ex.StatusCode != 0 {
		status = &ex.StatusCode
	}
	wctx := context.WithoutCancel(ctx)
	if ok {
		_, err = n.pool.Exec(wctx, `UPDATE notification_events SET attempts = attempts + 1, last_status = $2, last_error = NULL,
			delivered_at = $3 WHERE id = $1`, eventID, status, n.clock.Now())
		n.log.InfoContext(ctx, "api: notification delivered", "event_id", eventID, "status", ex.StatusCode)
		return err
	}
	if _, err := n.pool.Exec(wctx, `UPDATE notification_events SET attempts = attempts + 1, last_status = $2, last_error = $3
		WHERE id = $1`, eventID, status, errText); err != nil {
		n.log.ErrorContext(ctx, "api: record notification failure", "event_id", eventID, "error", err)
	}
	n.log.WarnContext(ctx, "api: notification delivery failed", "event_id", eventID, "error", errText)
	return fmt.Errorf("api: deliver %s: %s", eventID, errText)
}

// deliveryErrorText is the text of a failed delivery's transport error,
// as it is logged, stored in notification_events.last_error and returned
// to River (kept in the job's errors, shown at /ops/river). Secrets never
// reach logs: a merchant's URL often carries its credential (?token=...,
// a path segment such as Slack's and Discord's webhook tokens, user:pass@),
// and net/http's *url.Error quotes the whole URL. The URL is written as
// redactURL gives it, and any other trace of it is cut from the text.
func deliveryErrorText(rawURL string, err error) string {
	red := redactURL(rawURL)
	var ue *url.Error
	if errors.As(err, &ue) {
		inner := "invalid URL"
		if ue.Op != "parse" && ue.Err != nil { // a parse error quotes a piece of the URL
			inner = scrubURL(ue.Err.Error(), rawURL, ue.URL)
		}
		return fmt.Sprintf("%s %s: %s", ue.Op, red, inner)
	}
	return scrubURL(err.Error(), rawURL, "")
}

// redactURL keeps a URL's scheme and host (port included): no userinfo,
// path, query or fragment, any of which may hold the receiver's secret.
func redactURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "<unparseable URL>"
	}
	return u.Scheme + "://" + u.Host
}

// scrubURL cuts from text every form of the URL it may quote (the
// registered text, net/http's rewriting of it, its userinfo, path, query
// and fragment).
func scrubURL(text, rawURL, seen string) string {
	red := redactURL(rawURL)
	cut := []string{rawURL, seen}
	if u, err := url.Parse(rawURL); err == nil {
		cut = append(cut, u.String(), u.Redacted(), u.RawQuery, u.Fragment, u.EscapedFragment())
		if u.User != nil {
			cut = append(cut, u.User.String())
		}
		if p := u.EscapedPath(); len(p) > 1 {
			cut = append(cut, p, u.Path)
		}
	}
	for _, c := range cut {
		if c != "" && c != red {
			text = strings.ReplaceAll(text, c, "[redacted]")
		}
	}
	return text
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ---- endpoints: registration ----

type notificationEndpointJSON struct {
	ID         string     `json:"id"`
	MerchantID string     `json:"merchant_id"`
	URL        string     `json:"url"`
	Secret     string     `json:"secret,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	DisabledAt *time.Time `json:"disabled_at,omitempty"`
}

type createEndpointRequest struct {
	URL string `json:"url"`
}

// createNotificationEndpoint registers a URL and returns its signing
// secret, shown once. With an Idempotency-Key a retry answers the endpoint
// made the first time, without its secret (saldo never stores an answer's
// secret for replay): a client that lost the first answer disables that
// endpoint and registers another. That answer is stored in the endpoint's
// own transaction (completeIdempotentInTx): an endpoint has no client key
// of its own, so a retry after a lost COMMIT answer, or beside a request
// that outlived its lease, would otherwise register a second one. A URL into the platform's network is
// refused (checkNotificationURL) unless Config.AllowPrivateNotificationURLs.
func (s *Server) createNotificationEndpoint(w http.ResponseWriter, r *http.Request) {
	var req createEndpointRequest
	if err := s.decode(w, r, &req); err != nil {
		s.problem(w, r, err)
		return
	}
	u, err := url.Parse(req.URL)
	// The length is that of the text stored (u.String() percent-encodes
	// spaces and non-ASCII characters: "é" becomes 6 characters), which
	// the table's CHECK bounds too.
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(req.URL) > 2000 ||
		len(u.String()) > 2000 || u.User != nil {
		s.problem(w, r, invalidField("url", "an absolute http(s) URL without credentials, up to 2000 characters"))
		return
	}
	if !s.cfg.AllowPrivateNotificationURLs {
		if err := checkNotificationURL(r.Context(), u); err != nil {
			s.problem(w, r, err)
			return
		}
	}
	// Stored as parsed: url.Parse lowercases the scheme (RFC 3986: schemes
	// are case-insensitive), which the table's CHECK expects.
	ep := notificationEndpointJSON{ID: "we_" + randomHex(16), MerchantID: chi.URLParam(r, "merchant_id"), URL: u.String(),
		Secret: "whsec_" + randomHex(32), CreatedAt: s.clock.Now().UTC()}
	tooMany := &apiError{status: http.StatusConflict, code: "too_many_endpoints", title: "Too many endpoints",
		detail: fmt.Sprintf("at most %d active notification endpoints per merchant; disable one first", MaxNotificationEndpoints)}
	// The count and the insert under the merchant's row lock: concurrent
	// registrations serialise, so the limit holds (each active endpoint
	// gets every event, written in the transaction that makes a payout
	// final). The count is a statement of its own, after the lock: a
	// count inside the locking statement reads that statement's snapshot,
	// taken before the wait, so every waiter counted without the
	// endpoints the lock's holders inserted (docs/pitfalls.md).
	withoutSecret := ep
	withoutSecret.Secret = ""
	w.Header().Set("Cache-Control", "no-store")
	err = pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
		var one, active int
		if err := tx.QueryRow(r.Context(), `SELECT 1 FROM merchants WHERE id = $1 FOR UPDATE`, ep.MerchantID).Scan(&one); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return errNotFound
			}
			return err
		}
		if err := tx.QueryRow(r.Context(), `SELECT count(*) FROM notification_endpoints
			WHERE merchant_id = $1 AND disabled_at IS NULL`, ep.MerchantID).Scan(&active); err != nil {
			return err
		}
		if active >= MaxNotificationEndpoints {
			return tooMany
		}
		if _, err := tx.Exec(r.Context(), `INSERT INTO notification_endpoints (id, merchant_id, url, secret, created_at)
			VALUES ($1, $2, $3, $4, $5)`, ep.ID, ep.MerchantID, ep.URL, ep.Secret, ep.CreatedAt); err != nil {
			return err
		}
		return s.completeIdempotentInTx(r.Context(), tx, r, http.StatusCreated, withoutSecret, w.Header())
	})
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, ep)
}

// checkNotificationURL refuses, at registration, a notification URL whose
// host is inside the platform's network: localhost names, an address that
// providers.PrivateAddress refuses (loopback, private, link-local, CGNAT,
// unspecified), an IPv4 address in a non-dotted form ("2130706433",
// "0x7f.1", which resolvers read as 127.0.0.1), or a name that resolves to
// such an address now. A name that does not resolve now is accepted: DNS
// can change after registration anyway, and the delivery client's
// DenyPrivateNetworks checks the address actually dialled.
func checkNotificationURL(ctx context.Context, u *url.URL) error {
	refuse := invalidField("url", "a notification URL may not point at loopback, private or link-local addresses")
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" || host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return refuse
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if providers.PrivateAddress(net.IP(ip.Unmap().AsSlice())) || providers.PrivateAddress(net.IP(ip.AsSlice())) ||
			providers.OwnAddress(net.IP(ip.Unmap().AsSlice())) {
			return refuse
		}
		return nil
	}
	labels := strings.Split(host, ".")
	if last := labels[len(labels)-1]; numericLabel.MatchString(last) {
		return invalidField("url", "write an IP address in dotted decimal (or use a host name)")
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(lctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if providers.PrivateAddress(net.IP(a.Unmap().AsSlice())) || providers.OwnAddress(net.IP(a.Unmap().AsSlice())) {
			return refuse
		}
	}
	return nil
}

// numericLabel: a last label no top-level domain has, which resolvers read
// as (part of) an IPv4 address.
var numericLabel = regexp.MustCompile(`^(0x[0-9a-f]*|[0-9]+)$`)

// MaxNotificationEndpoints bounds a merchant's active endpoints.
const MaxNotificationEndpoints = 10

// disableNotificationEndpoint stops deliveries to an endpoint: no new
// events, and pending deliveries are dropped (recorded as such). Disabling a
// disabled endpoint changes nothing. With an Idempotency-Key the answer is
// stored in the endpoint's own transaction (completeIdempotentInTx), as for
// its registration: a retry after a lost COMMIT answer replays it, and a
// request a retry took over disables nothing (R4, R5).
func (s *Server) disableNotificationEndpoint(w http.ResponseWriter, r *http.Request) {
	var e notificationEndpointJSON
	err := pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(r.Context(), `UPDATE notification_endpoints SET disabled_at = coalesce(disabled_at, $3)
			WHERE id = $1 AND merchant_id = $2 RETURNING id, merchant_id, url, created_at, disabled_at`,
			chi.URLParam(r, "endpoint_id"), chi.URLParam(r, "merchant_id"), s.clock.Now()).
			Scan(&e.ID, &e.MerchantID, &e.URL, &e.CreatedAt, &e.DisabledAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return errNotFound
		}
		if err != nil {
			return err
		}
		e.CreatedAt, e.DisabledAt = e.CreatedAt.UTC(), utcPtr(e.DisabledAt)
		return s.completeIdempotentInTx(r.Context(), tx, r, http.StatusOK, e, w.Header())
	})
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}

func (s *Server) listNotificationEndpoints(w http.ResponseWriter, r *http.Request) {
	rows, err := s.pool.Query(r.Context(), `SELECT id, merchant_id, url, created_at, disabled_at FROM notification_endpoints
		WHERE merchant_id = $1 ORDER BY created_at, id`, chi.URLParam(r, "merchant_id"))
	if err != nil {
		s.problem(w, r, err)
		return
	}
	// A receiver's URL often carries its credential (a token in its path or
	// query): only the merchant's own key sees it whole; auditors,
	// operators and admins see scheme://host (found by review).
	whole := principalFrom(r.Context()).Role == RoleMerchant
	eps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (notificationEndpointJSON, error) {
		var e notificationEndpointJSON
		err := row.Scan(&e.ID, &e.MerchantID, &e.URL, &e.CreatedAt, &e.DisabledAt)
		if !whole {
			e.URL = redactURL(e.URL)
		}
		e.CreatedAt = e.CreatedAt.UTC()
		e.DisabledAt = utcPtr(e.DisabledAt)
		return e, err
	})
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, pageOf(eps, ""))
}
