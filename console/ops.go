package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/keyset"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
)

// home sends each role where it works: merchants to their balances,
// operators to the review queue, auditors and admins to the overview.
func (c *Console) home(w http.ResponseWriter, r *http.Request, s *Session) {
	switch s.Role {
	case RoleMerchant:
		http.Redirect(w, r, Prefix+"/merchants/"+s.MerchantID, http.StatusSeeOther)
		return
	case RoleOperator:
		http.Redirect(w, r, Prefix+"/review", http.StatusSeeOther)
		return
	}
	queue, nextRQ, nextUQ, err := c.queue(r.Context(), "", "", c.cfg.QueuePageSize)
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	size := strconv.Itoa(len(queue))
	if nextRQ != queueEnd || nextUQ != queueEnd {
		size += "+"
	}
	last, err := c.lastAudit(r.Context())
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "home", view{S: s, Title: "Overview", Data: map[string]any{
		"Queue": size, "Audit": last}})
}

// queueRow is one line of the review queue.
type queueRow struct {
	A        attempts.Attempt
	Amount   string
	Since    time.Time
	Why      string
	Flagged  bool
	Subject  string // console link to the subject, "" when none
	Merchant string
}

// queueEnd is the cursor of a part of the queue that has no more pages.
const queueEnd = "end"

// errBadCursor: a queue cursor that does not parse.
var errBadCursor = errors.New("console: malformed cursor")

// queue is one page of the review queue: attempts flagged for review (and
// divergences), as attempts.ReviewQueue lists them (cursor rq), plus
// unknown attempts older than Config.UnknownAfter that are not flagged
// (cursor uq, keyset over (unknown since, id)); each part oldest first, the
// page merged oldest first. It returns the cursors of the next page of
// each part (queueEnd when a part has no more).
func (c *Console) queue(ctx context.Context, rq, uq string, limit int) ([]queueRow, string, string, error) {
	var rows []queueRow
	nextRQ, nextUQ := queueEnd, queueEnd
	var flagged []attempts.Attempt
	if rq != queueEnd {
		var err error
		flagged, nextRQ, err = c.att.ReviewQueue(ctx, c.pool, attempts.ReviewQueueParams{After: rq, Limit: limit})
		if errors.Is(err, attempts.ErrInvalid) {
			return nil, "", "", errBadCursor
		}
		if err != nil {
			return nil, "", "", err
		}
		if nextRQ == "" {
			nextRQ = queueEnd
		}
	}
	for _, a := range flagged {
		why := a.ReviewReason
		if a.DivergedAt != nil {
			why = "divergence: " + a.Divergence
		}
		since := a.CreatedAt
		if a.ReviewAt != nil {
			since = *a.ReviewAt
		}
		rows = append(rows, queueRow{A: a, Since: since, Why: why, Flagged: true})
	}
	var ids []uuid.UUID
	if uq != queueEnd {
		afterAt, afterID := time.Time{}, uuid.Nil
		if uq != "" {
			t, id, err := keyset.Decode(uq)
			if err != nil {
				return nil, "", "", errBadCursor
			}
			if afterID, err = uuid.Parse(id); err != nil {
				return nil, "", "", errBadCursor
			}
			afterAt = t
		}
		cut := c.clock.Now().Add(-c.cfg.UnknownAfter)
		idRows, err := c.pool.Query(ctx, `SELECT id, coalesce(unknown_at, created_at) FROM attempts
			WHERE status = 'unknown' AND NOT review AND coalesce(unknown_at, created_at) < $1
			  AND (coalesce(unknown_at, created_at), id) > ($2, $3)
			ORDER BY coalesce(unknown_at, created_at), id LIMIT $4`, cut, afterAt, afterID, limit+1)
		if err != nil {
			return nil, "", "", err
		}
		type idAt struct {
			id uuid.UUID
			at time.Time
		}
		found, err := pgx.CollectRows(idRows, func(row pgx.CollectableRow) (idAt, error) {
			var x idAt
			return x, row.Scan(&x.id, &x.at)
		})
		if err != nil {
			return nil, "", "", err
		}
		page, next := keyset.Trim(found, limit, func(x idAt) (time.Time, string) { return x.at, x.id.String() })
		if next != "" {
			nextUQ = next
		}
		for _, x := range page {
			ids = append(ids, x.id)
		}
	}
	for _, id := range ids {
		a, err := c.att.Get(ctx, c.pool, id)
		if err != nil {
			return nil, "", "", err
		}
		since := a.CreatedAt
		if a.UnknownAt != nil {
			since = *a.UnknownAt
		}
		why := "unknown for longer than " + fmtDuration(c.cfg.UnknownAfter) + "; " +
			plural(a.LookupCount, "lookup", "lookups") + " so far"
		if a.LookupsUnanswered > 0 {
			why += " (" + strconv.Itoa(a.LookupsUnanswered) + " unanswered)"
		}
		if a.NextLookupAt != nil {
			why += ", next lookup at " + a.NextLookupAt.UTC().Format("15:04:05")
		}
		if a.LastError != "" {
			why += "; last error: " + limitText(a.LastError, 120)
		}
		rows = append(rows, queueRow{A: a, Since: since, Why: why})
	}
	for i := range rows {
		rows[i].Amount = c.amountOf(ctx, rows[i].A)
		rows[i].Subject, rows[i].Merchant = c.subjectLink(ctx, rows[i].A)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Since.Before(rows[j].Since) })
	return rows, nextRQ, nextUQ, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// amountOf is the amount of the attempt's subject, as its owner reports it
// to the attempts core (payouts.AttemptAmount, charges.AttemptAmount).
func (c *Console) amountOf(ctx context.Context, a attempts.Attempt) string {
	var owner attempts.AmountOwner = c.pay
	if a.Kind == attempts.KindCardCharge || a.Kind == attempts.KindPixCharge {
		if c.ch == nil {
			return ""
		}
		owner = c.ch
	}
	d, code, err := owner.AttemptAmount(ctx, c.pool, a)
	if err != nil {
		c.log.WarnContext(ctx, "console: amount of attempt", "attempt_id", a.ID, "error", err)
		return ""
	}
	cur, err := money.LookupCurrency(code)
	if err != nil {
		return d.String() + " " + code
	}
	return d.StringFixed(cur.MinorUnits()) + " " + code
}

// subjectLink is the console page of an attempt's subject (a payout or a
// charge) and its merchant.
func (c *Console) subjectLink(ctx context.Context, a attempts.Attempt) (string, string) {
	table, page := "payouts", "payouts"
	if a.Kind == attempts.KindCardCharge || a.Kind == attempts.KindPixCharge {
		table, page = "charges", "charges"
	}
	var mid string
	if err := c.pool.QueryRow(ctx, `SELECT merchant_id FROM `+table+` WHERE id = $1`, a.SubjectID).Scan(&mid); err != nil {
		return "", ""
	}
	return Prefix + "/merchants/" + mid + "/" + page + "/" + a.SubjectID, mid
}

func (c *Console) reviewQueue(w http.ResponseWriter, r *http.Request, s *Session) {
	q := r.URL.Query()
	rows, nextRQ, nextUQ, err := c.queue(r.Context(), q.Get("rq"), q.Get("uq"), c.cfg.QueuePageSize)
	if errors.Is(err, errBadCursor) {
		c.renderError(w, r, s, http.StatusBadRequest, "That page cursor is not valid.")
		return
	}
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	more := nextRQ != queueEnd || nextUQ != queueEnd
	c.render(w, r, http.StatusOK, "review", view{S: s, Title: "Review queue", Nav: "review", Data: map[string]any{
		"Rows": rows, "UnknownAfter": fmtDuration(c.cfg.UnknownAfter), "More": more, "RQ": nextRQ, "UQ": nextUQ,
		"Paged": q.Get("rq") != "" || q.Get("uq") != ""}})
}

// ---- the attempt page ----

type attemptView struct {
	A        attempts.Attempt
	Events   []attempts.Event
	Amount   string
	Subject  string
	Merchant string
	Txs      []ledger.Transaction
	// Form: the resolve form's values when it is shown again.
	Status, Reason, Evidence string
	CanResolve               bool
	// CanSettle: an operator, and the attempt has an unsettled divergence
	// (the settle form; SettleReason its value when shown again).
	CanSettle    bool
	SettleReason string
}

func (c *Console) loadAttempt(ctx context.Context, s *Session, id uuid.UUID) (attemptView, error) {
	a, err := c.att.Get(ctx, c.pool, id)
	if err != nil {
		return attemptView{}, err
	}
	evs, err := c.att.Events(ctx, c.pool, id)
	if err != nil {
		return attemptView{}, err
	}
	v := attemptView{A: a, Events: evs, Amount: c.amountOf(ctx, a)}
	v.Subject, v.Merchant = c.subjectLink(ctx, a)
	v.CanResolve = s.Can(RoleOperator) && a.Status.Open()
	v.CanSettle = s.Can(RoleOperator) && a.DivergedAt != nil && a.DivergenceSettledAt == nil
	if s.Can(RoleAuditor, RoleAdmin) {
		if v.Txs, err = c.attemptTransactions(ctx, a); err != nil {
			return v, err
		}
	}
	return v, nil
}

// attemptTransactions: the ledger transactions an attempt caused (a
// payout's reserve, settle and release name the attempt as their cause).
func (c *Console) attemptTransactions(ctx context.Context, a attempts.Attempt) ([]ledger.Transaction, error) {
	var out []ledger.Transaction
	for _, kind := range []string{payouts.CauseReserve, payouts.CauseSettle, payouts.CauseRelease} {
		pg, err := ledger.ListTransactions(ctx, c.pool, ledger.TransactionFilter{CauseKind: kind, CauseID: a.ID.String()},
			ledger.PageRequest{Limit: 10})
		if err != nil {
			return nil, err
		}
		out = append(out, pg.Transactions...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (c *Console) attemptPage(w http.ResponseWriter, r *http.Request, s *Session) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		c.notFound(w, r, s)
		return
	}
	v, ok := c.attemptOrProblem(w, r, s, id)
	if !ok {
		return
	}
	flash := ""
	switch r.URL.Query().Get("done") {
	case "transitioned":
		flash = "Recorded: the attempt is now " + string(v.A.Status) + "."
	case "unchanged":
		flash = "The attempt was already " + string(v.A.Status) + "; nothing changed."
	case "settled":
		flash = "Recorded: the divergence is settled."
	}
	c.render(w, r, http.StatusOK, "attempt", view{S: s, Title: "Attempt " + v.A.Reference, Nav: "review", Flash: flash, Data: v})
}

// maxReason is the API's bound on a resolution reason.
const maxReason = 2000

// resolve is an operator's manual resolution: attempts.ResolveManually,
// as POST /v1/attempts/{id}/resolution calls it, with the operator's key
// id recorded. Whatever the core refuses is shown on the attempt page.
func (c *Console) resolve(w http.ResponseWriter, r *http.Request, s *Session) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		c.notFound(w, r, s)
		return
	}
	st := attempts.Status(r.PostForm.Get("status"))
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	evidence := strings.TrimSpace(r.PostForm.Get("evidence"))
	again := func(status int, msg string) {
		c.attemptAgain(w, r, s, id, status, msg, func(v *attemptView) {
			v.Status, v.Reason, v.Evidence = string(st), reason, evidence
		})
	}
	if !st.Final() {
		again(http.StatusUnprocessableEntity, "Choose succeeded or failed.")
		return
	}
	if reason == "" || utf8.RuneCountInString(reason) > maxReason {
		again(http.StatusUnprocessableEntity, "A reason is required (up to 2000 characters): it is kept with the decision.")
		return
	}
	var ev json.RawMessage
	if evidence == "null" {
		evidence = "" // as the API reads it: no evidence
	}
	if evidence != "" {
		if !json.Valid([]byte(evidence)) {
			again(http.StatusUnprocessableEntity, "Evidence must be JSON (or left empty).")
			return
		}
		ev = json.RawMessage(evidence)
	}
	res, err := c.att.ResolveManually(r.Context(), id, st, s.KeyID, reason, ev)
	var refused *attempts.ManualFailRefusedError
	switch {
	case err == nil:
	case errors.Is(err, attempts.ErrNotFound):
		c.notFound(w, r, s)
		return
	case errors.As(err, &refused):
		again(http.StatusConflict, "Refused: "+refused.Reason)
		return
	case errors.Is(err, attempts.ErrTransition):
		again(http.StatusConflict, "Refused: the attempt is already final ("+err.Error()+"); a final status never changes (R9).")
		return
	case errors.Is(err, attempts.ErrInvalid):
		again(http.StatusUnprocessableEntity, "Refused: "+err.Error())
		return
	default:
		// The error (a database's, say) is logged, never shown: it is
		// nothing the operator can act on and may name internals.
		c.log.ErrorContext(r.Context(), "console: manual resolution failed", "attempt_id", id, "error", err)
		again(http.StatusInternalServerError, "The resolution could not be recorded: an internal error, logged for the administrators. Reload the attempt to see whether it changed before trying again.")
		return
	}
	c.log.InfoContext(r.Context(), "console: manual resolution", "attempt_id", id, "reference", res.Attempt.Reference,
		"provider", res.Attempt.Provider, "status", st, "operator", s.KeyID, "transitioned", res.Transitioned)
	done := "unchanged"
	if res.Transitioned {
		done = "transitioned"
	}
	http.Redirect(w, r, Prefix+"/attempts/"+id.String()+"?done="+done, http.StatusSeeOther)
}

// attemptOrProblem loads attempt id's view, or answers 404 (no such
// attempt) or 500 and reports false.
func (c *Console) attemptOrProblem(w http.ResponseWriter, r *http.Request, s *Session, id uuid.UUID) (attemptView, bool) {
	v, err := c.loadAttempt(r.Context(), s, id)
	if errors.Is(err, attempts.ErrNotFound) {
		c.notFound(w, r, s)
		return v, false
	}
	if err != nil {
		c.internal(w, r, s, err)
		return v, false
	}
	return v, true
}

// attemptAgain shows the attempt page again with status and msg after a
// refused form, the form's values put back by fill.
func (c *Console) attemptAgain(w http.ResponseWriter, r *http.Request, s *Session, id uuid.UUID, status int, msg string,
	fill func(*attemptView)) {
	v, ok := c.attemptOrProblem(w, r, s, id)
	if !ok {
		return
	}
	fill(&v)
	c.render(w, r, status, "attempt", view{S: s, Title: "Attempt " + v.A.Reference, Nav: "review", Error: msg, Data: v})
}

// settleDivergence is an operator recording that a divergence (the provider
// paid an attempt saldo resolved failed) is booked, with a reason, as the
// API's POST /v1/attempts/{id}/divergence-settlement does: the money its hold
// still holds is released or booked as the form's "hold" says; the
// review queue, the audit and needs_attention then leave it alone. A second
// submit is refused (already settled), never recorded twice.
func (c *Console) settleDivergence(w http.ResponseWriter, r *http.Request, s *Session) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		c.notFound(w, r, s)
		return
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	again := func(status int, msg string) {
		c.attemptAgain(w, r, s, id, status, msg, func(v *attemptView) { v.SettleReason = reason })
	}
	if reason == "" || utf8.RuneCountInString(reason) > maxReason {
		again(http.StatusUnprocessableEntity, "A reason is required (up to 2000 characters): it is kept with the settlement.")
		return
	}
	hold := attempts.HoldDecision(r.PostForm.Get("hold"))
	if !hold.Valid() {
		again(http.StatusUnprocessableEntity, "Refused: held money is released or booked.")
		return
	}
	a, err := c.att.SettleDivergence(r.Context(), id, s.KeyID, reason, hold)
	switch {
	case err == nil:
	case errors.Is(err, attempts.ErrNotFound):
		c.notFound(w, r, s)
		return
	case errors.Is(err, attempts.ErrNotDiverged):
		again(http.StatusConflict, "Refused: the attempt has no unsettled divergence (already settled, or none).")
		return
	case errors.Is(err, attempts.ErrInvalid):
		again(http.StatusUnprocessableEntity, "Refused: "+err.Error())
		return
	default:
		c.log.ErrorContext(r.Context(), "console: settling a divergence failed", "attempt_id", id, "error", err)
		again(http.StatusInternalServerError, "The settlement could not be recorded: an internal error, logged for the administrators. Reload the attempt to see whether it changed before trying again.")
		return
	}
	c.log.InfoContext(r.Context(), "console: divergence settled", "attempt_id", id, "reference", a.Reference,
		"provider", a.Provider, "operator", s.KeyID)
	http.Redirect(w, r, Prefix+"/attempts/"+id.String()+"?done=settled", http.StatusSeeOther)
}
