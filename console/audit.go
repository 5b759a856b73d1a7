package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/audit"
)

// auditRun is one verification run from the console (console_audit_runs).
type auditRun struct {
	ID                               int64
	RunBy                            string
	StartedAt, FinishedAt            time.Time
	OK                               bool
	Accounts, Transactions, Postings int64
	Violations                       []audit.Violation
	ViolationCount                   int
	Error                            string
}

// maxStoredViolations bounds the violations kept per run.
const maxStoredViolations = 200

const auditColumns = `id, run_by, started_at, finished_at, ok, accounts, transactions, postings, violations, violation_count, error`

func scanAuditRun(row pgx.Row) (auditRun, error) {
	var a auditRun
	var vs []byte
	err := row.Scan(&a.ID, &a.RunBy, &a.StartedAt, &a.FinishedAt, &a.OK, &a.Accounts, &a.Transactions, &a.Postings,
		&vs, &a.ViolationCount, &a.Error)
	if err == nil {
		err = json.Unmarshal(vs, &a.Violations)
	}
	return a, err
}

// lastAudit is the newest verification run from the console, nil if none.
func (c *Console) lastAudit(ctx context.Context) (*auditRun, error) {
	a, err := scanAuditRun(c.pool.QueryRow(ctx, `SELECT `+auditColumns+` FROM console_audit_runs ORDER BY finished_at DESC, id DESC LIMIT 1`))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &a, nil
}

func (c *Console) auditPage(w http.ResponseWriter, r *http.Request, s *Session) {
	rows, err := c.pool.Query(r.Context(), `SELECT `+auditColumns+` FROM console_audit_runs ORDER BY finished_at DESC, id DESC LIMIT 20`)
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (auditRun, error) { return scanAuditRun(row) })
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	var last *auditRun
	if len(runs) > 0 {
		last = &runs[0]
	}
	flash := ""
	if r.URL.Query().Get("ran") != "" && last != nil {
		flash = "Verification finished."
	}
	c.render(w, r, http.StatusOK, "audit", view{S: s, Title: "Audit verification", Nav: "audit", Flash: flash,
		Data: map[string]any{"Last": last, "Runs": runs}})
}

// runAudit runs audit.Run, exactly what `saldo audit verify` runs, and
// records its result. Auditors may run it: it reads the books and writes
// nothing but its own result row (console_audit_runs). docs/console.md.
func (c *Console) runAudit(w http.ResponseWriter, r *http.Request, s *Session) {
	ctx := r.Context()
	started := c.clock.Now()
	res, runErr := audit.Run(ctx, c.pool)
	finished := c.clock.Now()
	if finished.Before(started) {
		finished = started
	}
	vs := res.Violations
	if len(vs) > maxStoredViolations {
		vs = vs[:maxStoredViolations]
	}
	if vs == nil {
		vs = []audit.Violation{}
	}
	js, err := json.Marshal(vs)
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	errText := ""
	if runErr != nil {
		errText = runErr.Error()
	}
	_, err = c.pool.Exec(ctx, `INSERT INTO console_audit_runs (run_by, started_at, finished_at, ok, accounts, transactions,
		postings, violations, violation_count, error) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		s.KeyID, started, finished, runErr == nil && res.OK(), res.Ledger.Accounts, res.Ledger.Transactions,
		res.Ledger.Postings, js, len(res.Violations), errText)
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	c.log.InfoContext(ctx, "console: audit verification", "by", s.KeyID, "ok", runErr == nil && res.OK(),
		"violations", len(res.Violations), "error", errText)
	http.Redirect(w, r, Prefix+"/audit?ran=1", http.StatusSeeOther)
}
