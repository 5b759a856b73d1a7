package console

import (
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/reconcile"
)

// Reconciliation (issue 16, package reconcile): the runs against the
// providers' daily statements and the divergences they found, with an
// operator's resolution of a divergence (reconcile.Resolve, as
// POST /v1/reconcile/divergences/{id}/resolution calls it). Roles as the
// API's: operators, auditors and admins read; operators resolve.

type reconcileData struct {
	Runs        []reconcile.Run
	Divergences []reconcile.Divergence
	Next        string
	Filter      reconcile.Filter
	Kinds       []reconcile.Kind
	FilterError string
}

func (c *Console) reconcilePage(w http.ResponseWriter, r *http.Request, s *Session) {
	ctx := r.Context()
	q := r.URL.Query()
	d := reconcileData{Kinds: reconcile.Kinds, Filter: reconcile.Filter{Provider: q.Get("provider"),
		Kind: reconcile.Kind(q.Get("kind")), Status: q.Get("status"), Severity: reconcile.Severity(q.Get("severity"))}}
	if q.Get("status") == "" && !q.Has("status") {
		d.Filter.Status = "open"
	}
	if day := q.Get("day"); day != "" {
		t, err := time.Parse("2006-01-02", day)
		if err != nil {
			d.FilterError = "The day must look like 2026-12-02."
		} else {
			d.Filter.Day = &t
		}
	}
	rows, err := c.pool.Query(ctx, `SELECT id FROM reconcile_runs ORDER BY started_at DESC, id DESC LIMIT 20`)
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	for _, id := range ids {
		run, err := reconcile.GetRun(ctx, c.pool, id)
		if err != nil {
			c.internal(w, r, s, err)
			return
		}
		d.Runs = append(d.Runs, run)
	}
	if d.FilterError == "" {
		d.Divergences, d.Next, err = reconcile.List(ctx, c.pool, d.Filter, q.Get("cursor"), 100)
		if errors.Is(err, reconcile.ErrInvalid) {
			d.FilterError = strings.TrimPrefix(err.Error(), "reconcile: ")
		} else if err != nil {
			c.internal(w, r, s, err)
			return
		}
	}
	status := http.StatusOK
	if d.FilterError != "" {
		status = http.StatusBadRequest
	}
	c.render(w, r, status, "reconcile", view{S: s, Title: "Reconciliation", Nav: "reconcile", Error: d.FilterError, Data: d})
}

type divergenceData struct {
	D          reconcile.Divergence
	Run        *reconcile.Run
	Reason     string
	CanResolve bool
}

func (c *Console) divergencePage(w http.ResponseWriter, r *http.Request, s *Session) {
	c.showDivergence(w, r, s, http.StatusOK, "", "", "")
}

func (c *Console) showDivergence(w http.ResponseWriter, r *http.Request, s *Session, status int, msg, flash, reason string) {
	ctx := r.Context()
	dv, err := reconcile.Get(ctx, c.pool, r.PathValue("id"))
	if errors.Is(err, reconcile.ErrNotFound) {
		c.notFound(w, r, s)
		return
	}
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	d := divergenceData{D: dv, Reason: reason, CanResolve: dv.Open() && s.Can(RoleOperator)}
	if run, err := reconcile.GetRun(ctx, c.pool, dv.LastRunID); err == nil {
		d.Run = &run
	}
	if flash == "" && r.URL.Query().Get("done") != "" {
		flash = "Recorded: the divergence is resolved."
	}
	c.render(w, r, status, "divergence", view{S: s, Title: "Divergence " + dv.ID, Nav: "reconcile", Error: msg, Flash: flash, Data: d})
}

func (c *Console) resolveDivergence(w http.ResponseWriter, r *http.Request, s *Session) {
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if reason == "" || utf8.RuneCountInString(reason) > maxReason {
		c.showDivergence(w, r, s, http.StatusUnprocessableEntity, "A reason is required (up to 2000 characters).", "", reason)
		return
	}
	d, changed, err := reconcile.Resolve(r.Context(), c.pool, r.PathValue("id"), s.KeyID, reason, c.clock.Now())
	switch {
	case errors.Is(err, reconcile.ErrNotFound):
		c.notFound(w, r, s)
		return
	case errors.Is(err, reconcile.ErrInvalid):
		c.showDivergence(w, r, s, http.StatusUnprocessableEntity, "Refused: "+strings.TrimPrefix(err.Error(), "reconcile: "), "", reason)
		return
	case err != nil:
		c.internal(w, r, s, err)
		return
	}
	c.log.InfoContext(r.Context(), "console: divergence resolved", "divergence_id", d.ID, "kind", d.Kind, "operator", s.KeyID, "changed", changed)
	if !changed {
		c.showDivergence(w, r, s, http.StatusConflict, "It was already resolved (by "+d.ResolvedBy+"); nothing changed.", "", "")
		return
	}
	http.Redirect(w, r, Prefix+"/reconcile/divergences/"+d.ID+"?done=1", http.StatusSeeOther)
}
