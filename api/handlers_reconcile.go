package api

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/reconcile"
)

// Reconciliation divergences (issue 16, R19): listed and exported for
// operators, auditors and admins, resolved by operators with a reason (the
// key id is the operator id recorded).

type divergenceJSON struct {
	ID               string          `json:"id"`
	Provider         string          `json:"provider"`
	Day              string          `json:"day"`
	Kind             string          `json:"kind"`
	Severity         string          `json:"severity"`
	Status           string          `json:"status"`
	Reference        string          `json:"reference,omitempty"`
	ProviderID       string          `json:"provider_id,omitempty"`
	AttemptID        string          `json:"attempt_id,omitempty"`
	SubjectID        string          `json:"subject_id,omitempty"`
	Currency         string          `json:"currency,omitempty"`
	Detail           string          `json:"detail"`
	ProviderSide     json.RawMessage `json:"provider_side"`
	OurSide          json.RawMessage `json:"our_side"`
	FirstRunID       string          `json:"first_run_id"`
	LastRunID        string          `json:"last_run_id"`
	SeenCount        int             `json:"seen_count"`
	CreatedAt        time.Time       `json:"created_at"`
	LastSeenAt       time.Time       `json:"last_seen_at"`
	ResolvedAt       *time.Time      `json:"resolved_at,omitempty"`
	ResolvedBy       string          `json:"resolved_by,omitempty"`
	ResolutionReason string          `json:"resolution_reason,omitempty"`
}

func divergenceJSONOf(d reconcile.Divergence) divergenceJSON {
	out := divergenceJSON{ID: d.ID, Provider: d.Provider, Day: d.Day.Format(time.DateOnly), Kind: string(d.Kind),
		Severity: string(d.Severity), Status: d.Status, Reference: d.Reference, ProviderID: d.ProviderID,
		SubjectID: d.SubjectID, Currency: d.Currency, Detail: d.Detail, ProviderSide: d.ProviderSide,
		OurSide: d.OurSide, FirstRunID: d.FirstRunID, LastRunID: d.LastRunID, SeenCount: d.SeenCount,
		CreatedAt: d.CreatedAt.UTC(), LastSeenAt: d.LastSeenAt.UTC(), ResolvedAt: utcPtr(d.ResolvedAt),
		ResolvedBy: d.ResolvedBy, ResolutionReason: d.ResolutionReason}
	if d.AttemptID != nil {
		out.AttemptID = d.AttemptID.String()
	}
	return out
}

// divergenceFilter reads ?provider, ?day (YYYY-MM-DD), ?kind, ?status and
// ?severity.
func divergenceFilter(r *http.Request) (reconcile.Filter, error) {
	q := r.URL.Query()
	f := reconcile.Filter{Provider: q.Get("provider"), Kind: reconcile.Kind(q.Get("kind")), Status: q.Get("status"),
		Severity: reconcile.Severity(q.Get("severity"))}
	if v := q.Get("day"); v != "" {
		d, err := time.Parse(time.DateOnly, v)
		if err != nil {
			return f, invalidField("day", "a date, YYYY-MM-DD")
		}
		f.Day = &d
	}
	if f.Kind != "" && !f.Kind.Valid() {
		return f, invalidField("kind", "one of the divergence kinds")
	}
	if f.Status != "" && f.Status != "open" && f.Status != "resolved" {
		return f, invalidField("status", "open or resolved")
	}
	if err := f.Validate(); err != nil {
		return f, invalidField("severity", "critical, high, medium or info")
	}
	return f, nil
}

// reconcileProblem maps reconcile's errors to problems.
func reconcileProblem(err error) error {
	switch {
	case errors.Is(err, reconcile.ErrNotFound):
		return errNotFound
	case errors.Is(err, reconcile.ErrInvalid):
		return badRequest(trimReconcile(err.Error()))
	}
	return err
}

func trimReconcile(s string) string {
	const p = "reconcile: invalid input: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

func (s *Server) listDivergences(w http.ResponseWriter, r *http.Request) {
	f, err := divergenceFilter(r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	limit, err := limitParam(r, reconcile.MaxPageSize)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	list, next, err := reconcile.List(r.Context(), s.pool, f, r.URL.Query().Get("cursor"), limit)
	if errors.Is(err, reconcile.ErrInvalid) {
		s.problem(w, r, invalidField("cursor", "malformed cursor"))
		return
	}
	if err != nil {
		s.problem(w, r, err)
		return
	}
	out := make([]divergenceJSON, 0, len(list))
	for _, d := range list {
		out = append(out, divergenceJSONOf(d))
	}
	writeJSON(w, http.StatusOK, pageOf(out, next))
}

func (s *Server) getDivergence(w http.ResponseWriter, r *http.Request) {
	d, err := reconcile.Get(r.Context(), s.pool, chi.URLParam(r, "divergence_id"))
	if err != nil {
		s.problem(w, r, reconcileProblem(err))
		return
	}
	writeJSON(w, http.StatusOK, divergenceJSONOf(d))
}

// exportDivergencesCSV streams the divergences the filters select as CSV,
// in the list's keyset order, one page at a time (never the whole table in
// memory).
func (s *Server) exportDivergencesCSV(w http.ResponseWriter, r *http.Request) {
	f, err := divergenceFilter(r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	cw := csv.NewWriter(w)
	started := false
	start := func() {
		started = true
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.Header().Set("Content-Disposition", `attachment; filename="saldo-divergences.csv"`)
		w.WriteHeader(http.StatusOK)
		_ = cw.Write([]string{"id", "provider", "day", "kind", "severity", "status", "reference", "provider_id",
			"attempt_id", "subject_id", "currency", "detail", "provider_side", "our_side", "seen_count", "created_at",
			"last_seen_at", "resolved_at", "resolved_by", "resolution_reason"})
	}
	n := 0
	var clientGone error
	err = reconcile.Stream(r.Context(), s.pool, f, func(d reconcile.Divergence) error {
		if !started {
			start()
		}
		j := divergenceJSONOf(d)
		resolved := ""
		if j.ResolvedAt != nil {
			resolved = j.ResolvedAt.Format(time.RFC3339Nano)
		}
		// The provider's statement (reference, provider id, what it said)
		// and operators (the reason) write these texts: csvText keeps a
		// spreadsheet from reading one as a formula.
		if err := cw.Write([]string{j.ID, j.Provider, j.Day, j.Kind, j.Severity, j.Status, csvText(j.Reference),
			csvText(j.ProviderID), j.AttemptID, csvText(j.SubjectID), csvText(j.Currency), csvText(j.Detail),
			csvText(string(j.ProviderSide)), csvText(string(j.OurSide)), strconv.Itoa(j.SeenCount),
			j.CreatedAt.Format(time.RFC3339Nano), j.LastSeenAt.Format(time.RFC3339Nano), resolved,
			csvText(j.ResolvedBy), csvText(j.ResolutionReason)}); err != nil {
			return err
		}
		if n++; n%reconcile.MaxPageSize == 0 {
			cw.Flush()
			clientGone = cw.Error()
			return clientGone
		}
		return nil
	})
	// Until the first row an error is a problem answer; after it the
	// connection is aborted, so that a client cannot take a cut export for
	// a whole one (as the ledger's exports do).
	switch {
	case err != nil && clientGone != nil: // the client went away
		return
	case err != nil && !started:
		s.problem(w, r, err)
		return
	case err != nil:
		s.log.ErrorContext(r.Context(), "api: divergences csv export aborted", "error", err, "rows", n)
		panic(http.ErrAbortHandler)
	}
	if !started {
		start()
	}
	cw.Flush()
	if cw.Error() != nil {
		panic(http.ErrAbortHandler)
	}
}

// csvText is s as a CSV cell no spreadsheet reads as a formula: a text
// starting with =, +, -, @, a tab or a carriage return gets a leading
// apostrophe (OWASP's advice for CSV injection). For text columns only:
// amounts keep their sign.
func csvText(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

type divergenceResolutionRequest struct {
	Reason string `json:"reason"`
}

type divergenceResolutionJSON struct {
	Divergence divergenceJSON `json:"divergence"`
	// Transitioned: this request resolved it (false: it was already).
	Transitioned bool `json:"transitioned"`
}

// resolveDivergence is an operator closing a divergence with a reason.
// It moves no money: the operator settles the money by the attempt's manual
// resolution or a funding adjustment, and records here why it is closed.
// With an Idempotency-Key the answer is stored in the resolution's own
// transaction (completeIdempotentInTx): a resolution has no client key of
// its own below the API, so a retry after a lost COMMIT answer replays it
// (not transitioned: false), and a request a retry took over resolves
// nothing (R4, R5).
func (s *Server) resolveDivergence(w http.ResponseWriter, r *http.Request) {
	var req divergenceResolutionRequest
	if err := s.decode(w, r, &req); err != nil {
		s.problem(w, r, err)
		return
	}
	if len(req.Reason) == 0 || utf8.RuneCountInString(req.Reason) > 2000 {
		s.problem(w, r, invalidField("reason", "required, up to 2000 characters"))
		return
	}
	p := principalFrom(r.Context())
	var d reconcile.Divergence
	var changed bool
	err := pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
		var err error
		d, changed, err = reconcile.Resolve(r.Context(), tx, chi.URLParam(r, "divergence_id"), p.KeyID, req.Reason, s.clock.Now())
		if err != nil {
			return err
		}
		return s.completeIdempotentInTx(r.Context(), tx, r, http.StatusOK,
			divergenceResolutionJSON{Divergence: divergenceJSONOf(d), Transitioned: changed}, w.Header())
	})
	if errors.Is(err, reconcile.ErrInvalid) {
		s.problem(w, r, invalidField("reason", "required, up to 2000 characters, not blank"))
		return
	}
	if err != nil {
		s.problem(w, r, reconcileProblem(err))
		return
	}
	s.log.InfoContext(r.Context(), "api: divergence resolved", "divergence_id", d.ID, "kind", d.Kind,
		"provider", d.Provider, "operator", p.KeyID, "transitioned", changed)
	writeJSON(w, http.StatusOK, divergenceResolutionJSON{Divergence: divergenceJSONOf(d), Transitioned: changed})
}

type runTotalsJSON struct {
	Currency  string `json:"currency"`
	Direction string `json:"direction"`
	Statement string `json:"statement"`
	Ledger    string `json:"ledger"`
	Lines     int    `json:"lines"`
}

type runJSON struct {
	ID             string          `json:"id"`
	Provider       string          `json:"provider"`
	Day            string          `json:"day"`
	Status         string          `json:"status"`
	TriggeredBy    string          `json:"triggered_by"`
	StartedAt      time.Time       `json:"started_at"`
	FinishedAt     *time.Time      `json:"finished_at,omitempty"`
	StatementLines int             `json:"statement_lines"`
	Matched        int             `json:"matched"`
	Resolved       int             `json:"resolved"`
	Divergences    int             `json:"divergences"`
	NewDivergences int             `json:"new_divergences"`
	Deferred       int             `json:"deferred"`
	Totals         []runTotalsJSON `json:"totals"`
	Error          string          `json:"error,omitempty"`
}

func runJSONOf(r reconcile.Run) runJSON {
	out := runJSON{ID: r.ID, Provider: r.Provider, Day: r.Day.Format(time.DateOnly), Status: r.Status,
		TriggeredBy: r.TriggeredBy, StartedAt: r.StartedAt.UTC(), FinishedAt: utcPtr(r.FinishedAt),
		StatementLines: r.StatementLines, Matched: r.Matched, Resolved: r.Resolved, Divergences: r.Divergences,
		NewDivergences: r.NewDivergences, Deferred: r.Deferred, Totals: []runTotalsJSON{}, Error: r.Error}
	for _, t := range r.Totals {
		out.Totals = append(out.Totals, runTotalsJSON(t))
	}
	return out
}

// listRuns lists reconciliation runs, newest first: each with its counts
// and the ledger side (per currency and direction, the statement's total
// against the ledger's).
func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var day *time.Time
	if v := q.Get("day"); v != "" {
		d, err := time.Parse(time.DateOnly, v)
		if err != nil {
			s.problem(w, r, invalidField("day", "a date, YYYY-MM-DD"))
			return
		}
		day = &d
	}
	limit, err := limitParam(r, reconcile.MaxPageSize)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	list, next, err := reconcile.ListRuns(r.Context(), s.pool, q.Get("provider"), day, q.Get("cursor"), limit)
	if errors.Is(err, reconcile.ErrInvalid) {
		s.problem(w, r, invalidField("cursor", "malformed cursor"))
		return
	}
	if err != nil {
		s.problem(w, r, err)
		return
	}
	out := make([]runJSON, 0, len(list))
	for _, run := range list {
		out = append(out, runJSONOf(run))
	}
	writeJSON(w, http.StatusOK, pageOf(out, next))
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request) {
	run, err := reconcile.GetRun(r.Context(), s.pool, chi.URLParam(r, "run_id"))
	if err != nil {
		s.problem(w, r, reconcileProblem(err))
		return
	}
	writeJSON(w, http.StatusOK, runJSONOf(run))
}
