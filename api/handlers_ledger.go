package api

import (
	"context"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/ledger"
)

func orderParam(r *http.Request) (ledger.Order, error) {
	switch r.URL.Query().Get("order") {
	case "", "asc":
		return ledger.Ascending, nil
	case "desc":
		return ledger.Descending, nil
	}
	return 0, invalidField("order", "asc or desc")
}

func (s *Server) listTransactions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := limitParam(r, ledger.MaxPageSize)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	order, err := orderParam(r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	pg, err := ledger.ListTransactions(r.Context(), s.db(r),
		ledger.TransactionFilter{CauseKind: q.Get("cause_kind"), CauseID: q.Get("cause_id")},
		ledger.PageRequest{Cursor: q.Get("cursor"), Limit: limit, Order: order})
	if err != nil {
		s.problem(w, r, err)
		return
	}
	out := make([]transactionJSON, 0, len(pg.Transactions))
	for _, t := range pg.Transactions {
		out = append(out, transactionJSONOf(t))
	}
	writeJSON(w, http.StatusOK, pageOf(out, pg.NextCursor))
}

func (s *Server) getTransaction(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(chi.URLParam(r, "transaction_id"), 10, 64)
	if err != nil || id <= 0 {
		s.problem(w, r, errNotFound)
		return
	}
	t, err := ledger.TransactionByID(r.Context(), s.db(r), id)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, transactionJSONOf(t))
}

func accountParam(r *http.Request) (string, error) {
	code := r.URL.Query().Get("account")
	if code == "" {
		return "", invalidField("account", "required: an account code such as merchant/m_42/available/BRL")
	}
	if _, err := ledger.ParseCode(code); err != nil {
		return "", invalidField("account", "not an account code (owner_kind/owner_id/purpose/CURRENCY)")
	}
	return code, nil
}

func (s *Server) listPostings(w http.ResponseWriter, r *http.Request) {
	code, err := accountParam(r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	limit, err := limitParam(r, ledger.MaxPageSize)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	order, err := orderParam(r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	pg, err := ledger.ListPostings(r.Context(), s.db(r), code, ledger.PageRequest{Cursor: r.URL.Query().Get("cursor"), Limit: limit, Order: order})
	if err != nil {
		s.problem(w, r, err)
		return
	}
	out := make([]postingJSON, 0, len(pg.Postings))
	for _, p := range pg.Postings {
		out = append(out, postingJSONOf(p))
	}
	writeJSON(w, http.StatusOK, pageOf(out, pg.NextCursor))
}

func (s *Server) balanceAt(w http.ResponseWriter, r *http.Request) {
	code, err := accountParam(r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	at, ok, err := timeParam(r, "at")
	if err != nil {
		s.problem(w, r, err)
		return
	}
	if !ok {
		at = s.clock.Now()
	}
	b, err := ledger.BalanceAt(r.Context(), s.db(r), code, at)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"account": code, "at": at.UTC().Format(time.RFC3339Nano),
		"balance": b.Format(), "currency": b.Currency().Code()})
}

// exportCSV streams postings as CSV, one row per posting: every posting of
// one account (?account=CODE) in sequence order (exportAccountCSV), or of
// the whole ledger in transaction order. Optional from/to bound posted_at
// (from inclusive, to exclusive).
func (s *Server) exportCSV(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	from, hasFrom, err := timeParam(r, "from")
	if err != nil {
		s.problem(w, r, err)
		return
	}
	to, hasTo, err := timeParam(r, "to")
	if err != nil {
		s.problem(w, r, err)
		return
	}
	code := q.Get("account")
	if code != "" {
		if code, err = accountParam(r); err != nil {
			s.problem(w, r, err)
			return
		}
		s.exportAccountCSV(w, r, s.db(r), code, from, to)
		return
	}
	// The bounds are rounded as every ledger range is
	// (ledger.CeilMicrosecond), so this filter and the account export's
	// agree on a bound finer than posted_at's microseconds.
	from, to = ledger.CeilMicrosecond(from), ledger.CeilMicrosecond(to)
	keep := func(p ledger.Posting) bool {
		return (!hasFrom || !p.PostedAt.Before(from)) && (!hasTo || p.PostedAt.Before(to))
	}
	// The status goes out with the first page read: until then an error is
	// a problem answer (on a replica, dropped for the primary's); after it,
	// the connection is aborted so a client cannot take a cut export for a
	// whole one (as exportAccountCSV).
	cw := csv.NewWriter(w)
	started := false
	start := func() {
		started = true
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.Header().Set("Content-Disposition", `attachment; filename="saldo-ledger.csv"`)
		w.WriteHeader(http.StatusOK)
		_ = cw.Write([]string{"transaction_id", "leg", "account_code", "seq", "amount", "currency", "balance_after",
			"posted_at", "cause_kind", "cause_id", "hash"})
	}
	row := func(p ledger.Posting, causeKind, causeID string) {
		m := p.Currency.MinorUnits()
		_ = cw.Write([]string{strconv.FormatInt(p.TransactionID, 10), strconv.Itoa(p.Leg), p.AccountCode,
			strconv.FormatInt(p.Seq, 10), p.Amount.StringFixed(m), p.Currency.Code(), p.BalanceAfter.StringFixed(m),
			p.PostedAt.UTC().Format(time.RFC3339Nano), causeKind, causeID, hex.EncodeToString(p.Hash)})
	}
	// Every page is read in one snapshot (ledger.WalkTransactions): paging
	// in separate statements would leave out a transaction whose id was
	// drawn before a listed one and which committed after the walk passed it.
	var clientGone error
	err = ledger.WalkTransactions(r.Context(), s.db(r), ledger.TransactionFilter{}, ledger.MaxPageSize, func(pg ledger.TransactionsPage) error {
		if !started {
			start()
		}
		for _, t := range pg.Transactions {
			for _, p := range t.Postings {
				if keep(p) {
					row(p, t.CauseKind, t.CauseID)
				}
			}
		}
		cw.Flush()
		clientGone = cw.Error()
		return clientGone
	})
	switch {
	case err == nil || clientGone != nil: // whole, or the client went away
	case !started:
		s.problem(w, r, err)
	default:
		s.log.ErrorContext(r.Context(), "api: csv export aborted", "error", err)
		panic(http.ErrAbortHandler)
	}
}

// ---- attempts, review queue, manual resolution ----

func attemptIDParam(r *http.Request) (uuid.UUID, error) {
	id, err := uuid.Parse(chi.URLParam(r, "attempt_id"))
	if err != nil {
		return uuid.Nil, errNotFound
	}
	return id, nil
}

func (s *Server) getAttempt(w http.ResponseWriter, r *http.Request) {
	id, err := attemptIDParam(r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	a, err := s.att.Get(r.Context(), s.pool, id)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	aj, err := s.attemptWithEvents(r.Context(), s.pool, a)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, aj)
}

func (s *Server) reviewQueue(w http.ResponseWriter, r *http.Request) {
	limit, err := limitParam(r, 500)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	list, next, err := s.att.ReviewQueue(r.Context(), s.pool, attempts.ReviewQueueParams{After: r.URL.Query().Get("cursor"), Limit: limit})
	if errors.Is(err, attempts.ErrInvalid) {
		s.problem(w, r, invalidField("cursor", "malformed cursor"))
		return
	}
	if err != nil {
		s.problem(w, r, err)
		return
	}
	out := make([]attemptJSON, 0, len(list))
	for _, a := range list {
		out = append(out, attemptJSONOf(a, nil))
	}
	writeJSON(w, http.StatusOK, pageOf(out, next))
}

type resolutionRequest struct {
	Status   string          `json:"status"`
	Reason   string          `json:"reason"`
	Evidence json.RawMessage `json:"evidence"`
}

type resolutionJSON struct {
	Attempt      attemptJSON `json:"attempt"`
	Transitioned bool        `json:"transitioned"`
}

// resolveAttempt is an operator's decision: the operator id recorded is the
// key id, with the reason and evidence, in the attempt's transition event.
func (s *Server) resolveAttempt(w http.ResponseWriter, r *http.Request) {
	id, err := attemptIDParam(r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	var req resolutionRequest
	if err := s.decode(w, r, &req); err != nil {
		s.problem(w, r, err)
		return
	}
	st := attempts.Status(req.Status)
	if !st.Final() {
		s.problem(w, r, invalidField("status", "succeeded or failed"))
		return
	}
	if err := checkOperatorReason(req.Reason); err != nil {
		s.problem(w, r, err)
		return
	}
	if string(req.Evidence) == "null" {
		req.Evidence = nil
	}
	p := principalFrom(r.Context())
	// The answer is made and, with an Idempotency-Key, stored in the
	// decision's transaction (completeIdempotentInTx): a decision has no
	// client key of its own below the API, so a retry after a lost COMMIT
	// answer replays it (not transitioned: false, or a 409 for the other
	// status), and a request a retry took over decides nothing (R4, R5).
	var out resolutionJSON
	res, err := s.att.ResolveManuallyWith(r.Context(), id, st, p.KeyID, req.Reason, req.Evidence,
		func(ctx context.Context, tx pgx.Tx, res attempts.ResolveResult) error {
			aj, err := s.attemptWithEvents(ctx, tx, res.Attempt)
			if err != nil {
				return err
			}
			out = resolutionJSON{Attempt: aj, Transitioned: res.Transitioned}
			return s.completeIdempotentInTx(ctx, tx, r, http.StatusOK, out, w.Header())
		})
	if err != nil {
		s.problem(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "api: manual resolution", "attempt_id", id, "reference", res.Attempt.Reference,
		"provider", res.Attempt.Provider, "status", st, "operator", p.KeyID, "transitioned", res.Transitioned)
	writeJSON(w, http.StatusOK, out)
}

// attemptWithEvents is the attempt as the API shows it, with its events
// (read from db: the pool, or the transaction that changed it).
func (s *Server) attemptWithEvents(ctx context.Context, db attempts.DB, a attempts.Attempt) (attemptJSON, error) {
	evs, err := s.att.Events(ctx, db, a.ID)
	if err != nil {
		return attemptJSON{}, err
	}
	aj := attemptJSONOf(a, evs)
	if aj.Events == nil {
		aj.Events = []eventJSON{}
	}
	return aj, nil
}

// checkOperatorReason: an operator's decision needs a reason, counted in
// characters as the database counts them.
func checkOperatorReason(reason string) error {
	if reason := strings.TrimSpace(reason); reason == "" || utf8.RuneCountInString(reason) > 2000 {
		return invalidField("reason", "required, up to 2000 characters")
	}
	return nil
}

type settlementRequest struct {
	Reason string `json:"reason"`
	// Hold is what becomes of the merchant's money the divergence holds:
	// "release" (back to available) or "book" (gone); required while it
	// holds any (package holds).
	Hold string `json:"hold"`
}

// settleDivergence records an operator's settlement of an attempt's
// divergence (a provider success after it was resolved failed, a reversal,
// a dispute, a second operation): the evidence stays, the audit and the
// review queue let it go, and the money its hold still holds is released
// or booked as the body's "hold" says (a 422 naming the amount when it is
// missing; nothing changes).
func (s *Server) settleDivergence(w http.ResponseWriter, r *http.Request) {
	id, err := attemptIDParam(r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	var req settlementRequest
	if err := s.decode(w, r, &req); err != nil {
		s.problem(w, r, err)
		return
	}
	if err := checkOperatorReason(req.Reason); err != nil {
		s.problem(w, r, err)
		return
	}
	hold := attempts.HoldDecision(req.Hold)
	if !hold.Valid() {
		s.problem(w, r, invalidField("hold", `"release" or "book"`))
		return
	}
	p := principalFrom(r.Context())
	// The answer is made and, with an Idempotency-Key, stored in the
	// settlement's transaction (completeIdempotentInTx): a settlement has
	// no client key of its own below the API, so a retry after a lost
	// COMMIT answer replays it (not a 409 not_diverged), and a request a
	// retry took over settles nothing (R4, R5).
	var out attemptJSON
	_, err = s.att.SettleDivergenceWith(r.Context(), id, p.KeyID, req.Reason, hold,
		func(ctx context.Context, tx pgx.Tx, a attempts.Attempt) error {
			var err error
			if out, err = s.attemptWithEvents(ctx, tx, a); err != nil {
				return err
			}
			return s.completeIdempotentInTx(ctx, tx, r, http.StatusOK, out, w.Header())
		})
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
