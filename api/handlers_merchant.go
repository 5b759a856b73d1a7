package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
)

// ---- keys (admin) ----

type createKeyRequest struct {
	Role       Role   `json:"role"`
	MerchantID string `json:"merchant_id"`
	Name       string `json:"name"`
}

type createdKeyJSON struct {
	Key
	// Secret is shown here once and never again (a replay of the request
	// answers the key without it).
	Secret string `json:"secret,omitempty"`
}

// createKey creates an API key and shows its secret once. The key has no
// client key of its own, so with an Idempotency-Key the answer (without the
// secret) is stored in the key's own transaction (completeIdempotentInTx):
// a retry after a lost COMMIT answer replays it instead of making a second
// key.
func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
	var req createKeyRequest
	if err := s.decode(w, r, &req); err != nil {
		s.problem(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	var k Key
	var secret string
	err := pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
		var err error
		if k, secret, err = CreateKey(r.Context(), tx, req.Role, req.MerchantID, req.Name, s.clock.Now()); err != nil {
			return err
		}
		return s.completeIdempotentInTx(r.Context(), tx, r, http.StatusCreated, createdKeyJSON{Key: k}, w.Header())
	})
	if errors.Is(err, ErrInvalidKey) {
		err = invalidField("role", strings.TrimPrefix(err.Error(), "api: invalid key request: "))
	}
	if err != nil {
		s.problem(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "api: key created", "key_id", k.ID, "role", k.Role, "merchant_id", k.MerchantID,
		"by", principalFrom(r.Context()).KeyID)
	writeJSON(w, http.StatusCreated, createdKeyJSON{Key: k, Secret: secret})
}

// ---- merchants ----

type createMerchantRequest struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// createMerchant creates a merchant. With an Idempotency-Key its answer is
// stored in the merchant's own transaction (completeIdempotentInTx): a
// retry after a lost COMMIT answer replays the 201, not 409 already_exists.
func (s *Server) createMerchant(w http.ResponseWriter, r *http.Request) {
	var req createMerchantRequest
	if err := s.decode(w, r, &req); err != nil {
		s.problem(w, r, err)
		return
	}
	var m merchants.Merchant
	err := pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
		var err error
		if m, err = merchants.Create(r.Context(), tx, req.ID, req.Name); err != nil {
			return err
		}
		return s.completeIdempotentInTx(r.Context(), tx, r, http.StatusCreated, m, w.Header())
	})
	if errors.Is(err, merchants.ErrInvalid) {
		field := "id"
		if strings.Contains(err.Error(), "name must") {
			field = "name"
		}
		err = invalidField(field, trimPkg(strings.TrimPrefix(err.Error(), merchants.ErrInvalid.Error()+": ")))
	}
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, m)
}

func (s *Server) listMerchants(w http.ResponseWriter, r *http.Request) {
	limit, err := limitParam(r, 100)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	if limit == 0 {
		limit = 100
	}
	after := r.URL.Query().Get("cursor")
	ms, err := merchants.List(r.Context(), s.pool, after, limit+1)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	next := ""
	if len(ms) > limit {
		ms = ms[:limit]
		next = ms[len(ms)-1].ID
	}
	writeJSON(w, http.StatusOK, pageOf(ms, next))
}

func (s *Server) getMerchant(w http.ResponseWriter, r *http.Request) {
	m, err := merchants.Get(r.Context(), s.pool, chi.URLParam(r, "merchant_id"))
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

type balanceJSON struct {
	Currency  string `json:"currency"`
	Available string `json:"available"`
	Reserved  string `json:"reserved"`
	Pending   string `json:"pending"`
	// Held is held while a divergence against the merchant is open; it
	// cannot be paid out (package holds).
	Held string `json:"held"`
}

func (s *Server) balances(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "merchant_id")
	bs, err := ledger.MerchantBalances(r.Context(), s.db(r), id)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	out := []balanceJSON{}
	for _, b := range bs {
		m := b.Currency.MinorUnits()
		out = append(out, balanceJSON{Currency: b.Currency.Code(), Available: b.Available.StringFixed(m),
			Reserved: b.Reserved.StringFixed(m), Pending: b.Pending.StringFixed(m),
			Held: b.Held.StringFixed(m)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"merchant_id": id, "balances": out})
}

// ---- funding adjustments (admin) ----

type fundingRequest struct {
	Amount   string `json:"amount"`
	Currency string `json:"currency"`
	Reason   string `json:"reason"`
}

func (s *Server) createFunding(w http.ResponseWriter, r *http.Request) {
	var req fundingRequest
	if err := s.decode(w, r, &req); err != nil {
		s.problem(w, r, err)
		return
	}
	amt, err := parseAmount(req.Amount, req.Currency)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	if amt.IsZero() {
		s.problem(w, r, invalidField("amount", "must not be zero (negative takes money out)"))
		return
	}
	if strings.TrimSpace(req.Reason) == "" || utf8.RuneCountInString(req.Reason) > 1000 {
		s.problem(w, r, invalidField("reason", "required, up to 1000 characters"))
		return
	}
	p := principalFrom(r.Context())
	// The ledger key is the request's intent (R4): the merchant, the API key
	// and its Idempotency-Key, hashed when it would exceed the ledger's 255
	// characters (merchants.ClientFundingKey).
	merchantID := chi.URLParam(r, "merchant_id")
	tx, err := merchants.Fund(r.Context(), s.pool, merchants.Funding{MerchantID: merchantID,
		Amount: amt, Key: merchants.ClientFundingKey(merchantID, p.KeyID, r.Header.Get(IdempotencyHeader)),
		Reason: req.Reason, Actor: p.KeyID, Log: s.log})
	if err != nil {
		s.problem(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "api: funding adjustment", "merchant_id", chi.URLParam(r, "merchant_id"),
		"transaction_id", tx.ID, "by", p.KeyID)
	writeJSON(w, http.StatusCreated, transactionJSONOf(tx))
}

// ---- payouts ----

type createPayoutRequest struct {
	Operation   string                 `json:"operation"`
	Amount      string                 `json:"amount"`
	Currency    string                 `json:"currency"`
	Destination *providers.Destination `json:"destination"`
	Description string                 `json:"description"`
	Metadata    map[string]string      `json:"metadata"`
}

type createPixTransferRequest struct {
	Amount      string                 `json:"amount"`
	Currency    string                 `json:"currency"`
	Destination *providers.Destination `json:"destination"`
	Description string                 `json:"description"`
	Metadata    map[string]string      `json:"metadata"`
}

func (s *Server) createPayout(w http.ResponseWriter, r *http.Request) {
	var req createPayoutRequest
	if err := s.decode(w, r, &req); err != nil {
		s.problem(w, r, err)
		return
	}
	op := providers.Operation(req.Operation)
	if op != providers.OpBankPayout && op != providers.OpPixTransfer && op != providers.OpAccountTransfer {
		s.problem(w, r, invalidField("operation", "must be bank_payout, pix_transfer or account_transfer"))
		return
	}
	s.doCreatePayout(w, r, op, req.Amount, req.Currency, req.Destination, req.Description, req.Metadata)
}

func (s *Server) createPixTransfer(w http.ResponseWriter, r *http.Request) {
	var req createPixTransferRequest
	if err := s.decode(w, r, &req); err != nil {
		s.problem(w, r, err)
		return
	}
	s.doCreatePayout(w, r, providers.OpPixTransfer, req.Amount, req.Currency, req.Destination, req.Description, req.Metadata)
}

func (s *Server) doCreatePayout(w http.ResponseWriter, r *http.Request, op providers.Operation, amount, currency string,
	dest *providers.Destination, description string, metadata map[string]string) {
	amt, err := parsePositive(amount, currency, "amount")
	if err != nil {
		s.problem(w, r, err)
		return
	}
	p, err := s.payouts.CreatePayout(r.Context(), payouts.PayoutRequest{MerchantID: chi.URLParam(r, "merchant_id"),
		ClientKey: r.Header.Get(IdempotencyHeader), Operation: op, Amount: amt, Destination: dest,
		Description: description, Metadata: metadata})
	if err != nil {
		s.problem(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/merchants/"+p.MerchantID+"/payouts/"+p.ID)
	writeJSON(w, http.StatusCreated, payoutJSON(p))
}

func (s *Server) getPayout(w http.ResponseWriter, r *http.Request) {
	v, err := s.payouts.Get(r.Context(), chi.URLParam(r, "merchant_id"), chi.URLParam(r, "payout_id"))
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, payoutViewJSONOf(v))
}

func (s *Server) listPayouts(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := limitParam(r, 100)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	st := payouts.Status(q.Get("status"))
	switch st {
	case "", payouts.StatusProcessing, payouts.StatusSucceeded, payouts.StatusFailed:
	default:
		s.problem(w, r, invalidField("status", "processing, succeeded or failed"))
		return
	}
	kind := q.Get("kind")
	switch kind {
	case "", "payout", "pix_transfer", "split_leg", "refund":
	default:
		s.problem(w, r, invalidField("kind", "payout, pix_transfer, split_leg or refund"))
		return
	}
	ps, next, err := s.payouts.List(r.Context(), payouts.ListParams{MerchantID: chi.URLParam(r, "merchant_id"),
		Status: st, Kind: payouts.Kind(kind), SplitID: q.Get("split_id"), Cursor: q.Get("cursor"), Limit: limit})
	if err != nil {
		s.problem(w, r, err)
		return
	}
	out := make([]PayoutJSON, 0, len(ps))
	for _, p := range ps {
		out = append(out, payoutJSON(p))
	}
	writeJSON(w, http.StatusOK, pageOf(out, next))
}

// retryPayout takes no body; one that is sent must be an empty JSON object
// (judged on what was read, whatever Content-Length said).
func (s *Server) retryPayout(w http.ResponseWriter, r *http.Request) {
	var empty struct{}
	if _, err := s.decodeOptional(w, r, &empty); err != nil {
		s.problem(w, r, err)
		return
	}
	// With an Idempotency-Key the answer is stored in the retry's own
	// transaction (completeIdempotentInTx): a retry of a payout has no
	// client key of its own below the API, so a request a retry of the
	// request took over (its lease passed) opens no attempt, and after a
	// lost COMMIT answer the row is done with the retry's answer (R4, R5).
	// The answer is the one stored, also when Retry found out after an
	// error from the COMMIT that it committed.
	var out PayoutJSON
	_, err := s.payouts.RetryWith(r.Context(), chi.URLParam(r, "merchant_id"), chi.URLParam(r, "payout_id"),
		func(ctx context.Context, tx pgx.Tx, p payouts.Payout) error {
			out = payoutJSON(p)
			return s.completeIdempotentInTx(ctx, tx, r, http.StatusOK, out, w.Header())
		})
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// ---- splits ----

type splitLegRequest struct {
	Operation   string                 `json:"operation"`
	Amount      string                 `json:"amount"`
	Destination *providers.Destination `json:"destination"`
	Description string                 `json:"description"`
}

type createSplitRequest struct {
	Currency    string            `json:"currency"`
	Legs        []splitLegRequest `json:"legs"`
	Description string            `json:"description"`
	Metadata    map[string]string `json:"metadata"`
}

func (s *Server) createSplit(w http.ResponseWriter, r *http.Request) {
	var req createSplitRequest
	if err := s.decode(w, r, &req); err != nil {
		s.problem(w, r, err)
		return
	}
	if len(req.Legs) == 0 || len(req.Legs) > payouts.MaxSplitLegs {
		s.problem(w, r, invalidField("legs", fmt.Sprintf("1 to %d legs", payouts.MaxSplitLegs)))
		return
	}
	legs := make([]payouts.SplitLeg, 0, len(req.Legs))
	for i, l := range req.Legs {
		amt, err := parsePositive(l.Amount, req.Currency, fmt.Sprintf("legs[%d].amount", i))
		if err != nil {
			s.problem(w, r, err)
			return
		}
		legs = append(legs, payouts.SplitLeg{Operation: providers.Operation(l.Operation), Amount: amt,
			Destination: l.Destination, Description: l.Description})
	}
	sp, err := s.payouts.CreateSplit(r.Context(), payouts.SplitRequest{MerchantID: chi.URLParam(r, "merchant_id"),
		ClientKey: r.Header.Get(IdempotencyHeader), Legs: legs, Description: req.Description, Metadata: req.Metadata})
	if err != nil {
		s.problem(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/merchants/"+sp.MerchantID+"/splits/"+sp.ID)
	writeJSON(w, http.StatusCreated, splitJSONOf(sp))
}

func (s *Server) getSplit(w http.ResponseWriter, r *http.Request) {
	sp, err := s.payouts.GetSplit(r.Context(), chi.URLParam(r, "merchant_id"), chi.URLParam(r, "split_id"))
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, splitJSONOf(sp))
}

// ---- helpers ----

// parseAmount reads an amount string in a currency with package money's
// strict rules (no floats, no more decimals than the currency has).
func parseAmount(amount, currency string) (money.Amount, error) {
	if currency == "" {
		return money.Amount{}, invalidField("currency", "required (ISO 4217, e.g. BRL)")
	}
	if amount == "" {
		return money.Amount{}, invalidField("amount", `required, a decimal string such as "10.50"`)
	}
	return money.Parse(amount, currency)
}

func parsePositive(amount, currency, field string) (money.Amount, error) {
	// parseAmount names the top-level fields; field may be a leg's.
	if amount == "" && currency != "" {
		return money.Amount{}, invalidField(field, `required, a decimal string such as "10.50"`)
	}
	a, err := parseAmount(amount, currency)
	var pe *money.ParseError
	if errors.As(err, &pe) && !errors.Is(err, money.ErrUnknownCurrency) {
		return a, invalidField(field, pe.Error())
	}
	if err != nil {
		return a, err
	}
	if !a.IsPositive() {
		return a, invalidField(field, "must be greater than zero")
	}
	return a, nil
}

func limitParam(r *http.Request, max int) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return 0, nil // the listing's own default
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, invalidField("limit", fmt.Sprintf("an integer from 1 to %d", max))
	}
	return n, nil
}

func timeParam(r *http.Request, name string) (time.Time, bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return time.Time{}, false, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	// In UTC too it must be a date-time an answer can echo (RFC 3339 has
	// years 0000-9999; "0000-01-01T00:00:00+23:59" is year -1 in UTC).
	if err != nil || t.UTC().Year() < 1 || t.UTC().Year() > 9999 {
		return time.Time{}, false, invalidField(name, "an RFC 3339 timestamp between years 0001 and 9999 in UTC, e.g. 2026-12-02T12:00:00Z")
	}
	return t, true, nil
}
