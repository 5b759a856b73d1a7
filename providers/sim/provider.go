package sim

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/saldo/saldo/providers"
)

// Provider is the client adapter for a sim server: a providers.Provider.
type Provider struct {
	name      string
	baseURL   string
	client    *providers.Client
	settings  providers.HTTPSettings
	caps      providers.Capabilities
	secret    string
	tolerance time.Duration
}

var _ providers.Provider = (*Provider)(nil)

// Option configures a Provider.
type Option func(*Provider)

// WithName sets the provider name stored on attempts (default "sim"), so a
// test can run two sims side by side.
func WithName(name string) Option { return func(p *Provider) { p.name = name } }

// WithHTTPSettings sets the HTTP client settings (timeouts, TLS).
func WithHTTPSettings(s providers.HTTPSettings) Option {
	return func(p *Provider) { p.settings = s }
}

// WithConfig declares the capabilities of a server built from cfg (and takes
// its webhook secret). Use it whenever the server is not the default.
func WithConfig(cfg Config) Option {
	return func(p *Provider) {
		p.caps = capabilitiesOf(cfg)
		if cfg.WebhookSecret != "" {
			p.secret = cfg.WebhookSecret
		}
	}
}

// WithCapabilities declares capabilities directly (for example those read
// with FetchCapabilities from a separate `saldo sim-provider`).
func WithCapabilities(c providers.Capabilities) Option { return func(p *Provider) { p.caps = c } }

// WithWebhookSecret sets the secret webhooks are verified with.
func WithWebhookSecret(secret string) Option { return func(p *Provider) { p.secret = secret } }

// WithWebhookTolerance sets how far a webhook timestamp may be from now
// (default 5 minutes).
func WithWebhookTolerance(d time.Duration) Option { return func(p *Provider) { p.tolerance = d } }

// NewProvider builds the adapter for the sim at baseURL. Without WithConfig
// or WithCapabilities it assumes a default server (idempotency keys with a
// 24h lifetime, no lag, no webhooks).
func NewProvider(baseURL string, opts ...Option) *Provider {
	p := &Provider{
		name:      "sim",
		baseURL:   strings.TrimRight(baseURL, "/"),
		caps:      capabilitiesOf(Config{}),
		tolerance: DefaultSignatureTolerance,
	}
	for _, o := range opts {
		o(p)
	}
	p.client = providers.NewClient(p.settings)
	return p
}

// NewProvider builds an adapter for this started server whose capabilities
// and webhook secret match its configuration. opts come after and may
// override them.
func (s *Server) NewProvider(opts ...Option) *Provider {
	return NewProvider(s.URL(), append([]Option{WithConfig(s.cfg)}, opts...)...)
}

// FetchCapabilities asks a running sim what it is configured to do
// (GET /v1/capabilities).
func FetchCapabilities(ctx context.Context, baseURL string, settings providers.HTTPSettings) (providers.Capabilities, error) {
	ex := providers.NewClient(settings).Do(ctx, http.MethodGet, strings.TrimRight(baseURL, "/")+"/v1/capabilities", nil, nil)
	if ex.Err != nil {
		return providers.Capabilities{}, fmt.Errorf("sim: capabilities: %w", ex.Err)
	}
	if ex.StatusCode != http.StatusOK {
		return providers.Capabilities{}, fmt.Errorf("sim: capabilities: status %d", ex.StatusCode)
	}
	var wc wireCapabilities
	if err := json.Unmarshal(ex.Body, &wc); err != nil {
		return providers.Capabilities{}, fmt.Errorf("sim: capabilities: %w", err)
	}
	return providers.Capabilities{
		IdempotencyKeys:   wc.IdempotencyKeys,
		KeyLifetime:       time.Duration(wc.KeyLifetimeSeconds) * time.Second,
		LookupByReference: wc.LookupByReference,
		ConsistencyWindow: time.Duration(wc.ConsistencyWindowSeconds * float64(time.Second)),
		Webhooks:          wc.Webhooks,
		Statements:        wc.Statements,
		Operations:        wc.Operations,
		Destinations:      Destinations(), // fixed by the sim's code, not its configuration
	}, nil
}

// Name is the provider name ("sim" unless WithName).
func (p *Provider) Name() string { return p.name }

// StatementDating is how the sim dates its statement's lines (R19,
// providers.StatementDater): every operation on the day it reached its
// final state, as saldo records it, so a day either side for each. Fixed
// by the sim's code, not its configuration.
func (p *Provider) StatementDating() map[providers.Operation]providers.StatementDating {
	out := map[providers.Operation]providers.StatementDating{}
	for _, op := range []providers.Operation{providers.OpPixTransfer, providers.OpBankPayout, providers.OpRefund,
		providers.OpCardCharge, providers.OpPixCharge} {
		out[op] = providers.DefaultStatementDating
	}
	return out
}

// Capabilities as declared by WithConfig / WithCapabilities.
func (p *Provider) Capabilities() providers.Capabilities { return p.caps }

// Client is the adapter's HTTP client (tests use CloseIdle).
func (p *Provider) Client() *providers.Client { return p.client }

// EncodePayload builds the JSON body of POST /v1/operations. The bytes are a
// pure function of in and reference (struct field order, sorted metadata
// keys). It refuses input the sim would refuse for structural reasons;
// amounts and currencies are checked here too so nothing doomed is stored.
func (p *Provider) EncodePayload(in providers.OperationInput, reference string) ([]byte, error) {
	if !in.Operation.Valid() {
		return nil, fmt.Errorf("%w: operation %q", providers.ErrUnsupported, in.Operation)
	}
	if !p.caps.Supports(in.Operation) {
		return nil, fmt.Errorf("%w: %s", providers.ErrUnsupported, in.Operation)
	}
	w := wireRequest{
		Operation:   in.Operation,
		Reference:   reference,
		Amount:      in.Amount,
		Currency:    in.Currency,
		Destination: in.Destination,
		CardToken:   in.CardToken,
		Description: in.Description,
		Metadata:    in.Metadata,
	}
	if in.ChargeProviderID != "" || in.ChargeReference != "" {
		w.Charge = &wireChargeRef{ID: in.ChargeProviderID, Reference: in.ChargeReference}
	}
	if in.Operation == providers.OpPixCharge {
		if in.ExpiresIn < 0 {
			return nil, fmt.Errorf("%w: negative cob expiry", providers.ErrInvalidInput)
		}
		w.ExpiresInSeconds = int64((in.ExpiresIn + time.Second - 1) / time.Second)
		if in.PayerName != "" || in.PayerTaxID != "" {
			w.Payer = &wirePayer{Name: in.PayerName, TaxID: in.PayerTaxID}
		}
	} else if in.ExpiresIn != 0 || in.PayerName != "" || in.PayerTaxID != "" {
		return nil, fmt.Errorf("%w: expiry and payer only apply to pix_charge", providers.ErrInvalidInput)
	}
	if _, aerr := validate(w); aerr != nil {
		if aerr.Param != "" {
			return nil, fmt.Errorf("%w: %s: %s", providers.ErrInvalidInput, aerr.Param, aerr.Message)
		}
		return nil, fmt.Errorf("%w: %s", providers.ErrInvalidInput, aerr.Message)
	}
	return json.Marshal(w)
}

// Submit sends req.Payload once (POST /v1/operations), with the
// Idempotency-Key header when the provider honours keys.
func (p *Provider) Submit(ctx context.Context, req providers.SubmitRequest) providers.SubmitResult {
	h := http.Header{}
	if p.caps.IdempotencyKeys && req.IdempotencyKey != "" {
		h.Set("Idempotency-Key", req.IdempotencyKey)
	}
	ex := p.client.Do(ctx, http.MethodPost, p.baseURL+"/v1/operations", h, req.Payload)
	res := providers.SubmitResult{Exchange: ex}
	if ex.StatusCode == 0 || ex.Err != nil {
		if ex.StatusCode == http.StatusTooManyRequests {
			res.Refinement = providers.RefineRateLimited
		}
		return res
	}
	if ex.StatusCode >= 200 && ex.StatusCode < 300 {
		var op Operation
		if err := json.Unmarshal(ex.Body, &op); err != nil || op.ID == "" {
			return res // unreadable 2xx: no state, the classifier calls it unknown
		}
		res.ProviderID, res.State = op.ID, op.State
		res.FailureCode, res.FailureReason = op.FailureCode, op.FailureReason
		if op.Operation == providers.OpPixCharge && op.State == providers.StateProcessing && op.Cob != nil &&
			op.Cob.Status == CobActive {
			res.State = providers.StateSucceeded // the cob was created (contract of Submit for pix_charge)
		}
		res.Data = operationData(op)
		return res
	}
	var eb errorBody
	if err := json.Unmarshal(ex.Body, &eb); err == nil && eb.Error != nil {
		res.FailureCode, res.FailureReason = eb.Error.Code, eb.Error.Message
		if eb.Error.DeclineCode != "" {
			res.FailureCode = eb.Error.DeclineCode
		}
		if eb.Operation != nil {
			res.ProviderID = eb.Operation.ID
			res.State = eb.Operation.State
		}
		res.Refinement = refine(ex.StatusCode, eb.Error)
	} else if ex.StatusCode == http.StatusTooManyRequests {
		res.Refinement = providers.RefineRateLimited
	}
	return res
}

func refine(status int, e *apiError) providers.Refinement {
	switch {
	case status == http.StatusTooManyRequests || e.Type == errTypeRateLimit:
		return providers.RefineRateLimited
	case e.Type == errTypeIdempotency && e.Code == codeKeyInUse:
		return providers.RefineInFlight
	case e.Type == errTypeIdempotency:
		return providers.RefineKeyMisuse
	case status == http.StatusConflict && e.Code == codeDuplicate:
		return providers.RefineDuplicate
	case e.Type == errTypeCard || e.Type == errTypeDecline:
		return providers.RefineDeclined
	}
	return providers.RefineNone
}

// operationData keeps what is worth keeping beyond id and state: for a cob,
// its txid, status, expiry, location and copy-and-paste payload; for a
// refund, the charge it returned.
func operationData(op Operation) []byte {
	var v any
	switch {
	case op.Cob != nil:
		v = op.Cob
	case op.ChargeID != "":
		v = map[string]string{"charge_id": op.ChargeID, "charge_reference": op.ChargeReference}
	default:
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

// Lookup queries GET /v1/operations?reference=R&operation=OP once. Found is
// false when the sim answered 200 with nothing visible (not proof of absence
// before the consistency window, R16); any other answer (a proxy's 404, a
// 204, a 5xx) sets Exchange.Err: it proves nothing about the operation. With
// several operations for one reference (a duplicate), the one that moved
// money is reported, the earliest first.
func (p *Provider) Lookup(ctx context.Context, op providers.Operation, reference string) (providers.LookupResult, error) {
	q := url.Values{"reference": {reference}}
	if op != "" {
		q.Set("operation", string(op))
	}
	ex := p.client.Do(ctx, http.MethodGet, p.baseURL+"/v1/operations?"+q.Encode(), nil, nil)
	res := providers.LookupResult{Exchange: ex}
	if ex.Err != nil {
		return res, nil
	}
	if ex.StatusCode != http.StatusOK {
		res.Exchange.Err = fmt.Errorf("sim: lookup answered %d: no proof of absence", ex.StatusCode)
		return res, nil
	}
	var list struct {
		Data []Operation `json:"data"`
	}
	if err := json.Unmarshal(ex.Body, &list); err != nil {
		res.Exchange.Err = fmt.Errorf("sim: unreadable lookup body: %w", err)
		return res, nil
	}
	if len(list.Data) == 0 {
		return res, nil
	}
	best := list.Data[0]
	rank := func(o Operation) int {
		switch o.State {
		case providers.StateSucceeded:
			return 0
		case providers.StateProcessing:
			return 1
		}
		return 2
	}
	for _, o := range list.Data[1:] {
		if rank(o) < rank(best) {
			best = o
		}
	}
	res.Found = true
	res.ProviderID, res.State = best.ID, best.State
	res.Amount, res.Currency = best.Amount, best.Currency
	res.FailureCode, res.FailureReason = best.FailureCode, best.FailureReason
	res.Data = operationData(best)
	return res, nil
}

// ParseWebhook verifies SignatureHeader (HMAC-SHA256 over "t.body" with the
// webhook secret), then the timestamp against now within the tolerance, then
// parses the event.
func (p *Provider) ParseWebhook(header http.Header, body []byte, now time.Time) (providers.WebhookEvent, error) {
	if p.secret == "" {
		return providers.WebhookEvent{}, fmt.Errorf("%w: no webhook secret configured", providers.ErrBadSignature)
	}
	ts, sigs, ok := parseSignature(header.Get(SignatureHeader))
	if !ok {
		return providers.WebhookEvent{}, fmt.Errorf("%w: missing or malformed %s header", providers.ErrBadSignature, SignatureHeader)
	}
	want := []byte(signature(p.secret, ts, body))
	valid := false
	for _, s := range sigs {
		if hmac.Equal([]byte(s), want) {
			valid = true
		}
	}
	if !valid {
		return providers.WebhookEvent{}, providers.ErrBadSignature
	}
	if d := now.Sub(time.Unix(ts, 0)); d > p.tolerance || d < -p.tolerance {
		return providers.WebhookEvent{}, fmt.Errorf("%w: signed at %s, now %s", providers.ErrStaleWebhook,
			time.Unix(ts, 0).UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	var ev event
	if err := json.Unmarshal(body, &ev); err != nil {
		return providers.WebhookEvent{}, fmt.Errorf("%w: %v", providers.ErrMalformedWebhook, err)
	}
	if ev.ID == "" || ev.Data.Reference == "" || !ev.Data.Operation.Valid() {
		return providers.WebhookEvent{}, fmt.Errorf("%w: event without id, reference or operation", providers.ErrMalformedWebhook)
	}
	switch ev.Data.State {
	case providers.StateSucceeded, providers.StateProcessing, providers.StateFailed:
	default:
		return providers.WebhookEvent{}, fmt.Errorf("%w: unknown state %q", providers.ErrMalformedWebhook, ev.Data.State)
	}
	return providers.WebhookEvent{
		ID:            ev.ID,
		Type:          ev.Type,
		Operation:     ev.Data.Operation,
		Reference:     ev.Data.Reference,
		ProviderID:    ev.Data.ID,
		State:         ev.Data.State,
		FailureCode:   ev.Data.FailureCode,
		FailureReason: ev.Data.FailureReason,
		Amount:        ev.Data.Amount,
		Currency:      ev.Data.Currency,
		OccurredAt:    ev.CreatedAt,
		Data:          operationData(ev.Data),
	}, nil
}

// ErrStatement is returned (wrapped) when a statement could not be fetched.
var ErrStatement = errors.New("sim: statement unavailable")

// Statement fetches GET /v1/statements?date=YYYY-MM-DD for the UTC day that
// contains day: operations that reached a final state that day.
func (p *Provider) Statement(ctx context.Context, day time.Time) ([]providers.StatementEntry, error) {
	date := day.UTC().Format(time.DateOnly)
	ex := p.client.Do(ctx, http.MethodGet, p.baseURL+"/v1/statements?date="+date, nil, nil)
	if ex.Err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrStatement, date, ex.Err)
	}
	if ex.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s: status %d", ErrStatement, date, ex.StatusCode)
	}
	var list struct {
		Data []Operation `json:"data"`
	}
	if err := json.Unmarshal(ex.Body, &list); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrStatement, date, err)
	}
	out := make([]providers.StatementEntry, 0, len(list.Data))
	for _, o := range list.Data {
		out = append(out, providers.StatementEntry{Operation: o.Operation, Reference: o.Reference, ProviderID: o.ID,
			State: o.State, Amount: o.Amount, Currency: o.Currency, At: o.FinalAt})
	}
	return out, nil
}
