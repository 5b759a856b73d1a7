package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/keyset"
	"github.com/saldo/saldo/internal/sqlcols"
)

// Divergence is one stored divergence.
type Divergence struct {
	ID         string
	Provider   string
	Day        time.Time
	Kind       Kind
	Severity   Severity
	Reference  string
	ProviderID string
	AttemptID  *uuid.UUID
	SubjectID  string
	Currency   string
	Detail     string
	// ProviderSide is what the statement says; OurSide what saldo says.
	ProviderSide json.RawMessage
	OurSide      json.RawMessage
	Status       string // open or resolved
	FirstRunID   string
	LastRunID    string
	SeenCount    int
	CreatedAt    time.Time
	LastSeenAt   time.Time
	ResolvedAt   *time.Time
	// ResolvedBy is "reconciliation" or the operator's id.
	ResolvedBy       string
	ResolutionReason string
}

// Open reports whether the divergence still waits for someone.
func (d Divergence) Open() bool { return d.Status == "open" }

const divergenceColumns = `id, provider, day, kind, severity, coalesce(reference, ''), coalesce(provider_id, ''),
	attempt_id, coalesce(subject_id, ''), coalesce(currency, ''), detail, provider_side, our_side, status,
	first_run_id, last_run_id, seen_count, created_at, last_seen_at, resolved_at, coalesce(resolved_by, ''),
	coalesce(resolution_reason, '')`

func scanDivergence(row pgx.Row) (Divergence, error) {
	var d Divergence
	err := row.Scan(&d.ID, &d.Provider, &d.Day, &d.Kind, &d.Severity, &d.Reference, &d.ProviderID, &d.AttemptID,
		&d.SubjectID, &d.Currency, &d.Detail, &d.ProviderSide, &d.OurSide, &d.Status, &d.FirstRunID, &d.LastRunID,
		&d.SeenCount, &d.CreatedAt, &d.LastSeenAt, &d.ResolvedAt, &d.ResolvedBy, &d.ResolutionReason)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, ErrNotFound
	}
	return d, err
}

// store writes f once (the unique (provider, kind, fingerprint) key): a
// divergence seen again only has last_seen_at, last_run_id and seen_count
// moved, and while open its two sides and detail refreshed.
func (s *Service) store(ctx context.Context, st *runState, f finding) error {
	now := s.clock.Now()
	provSide, err := json.Marshal(f.provider)
	if err != nil {
		return err
	}
	ourSide, err := json.Marshal(f.our)
	if err != nil {
		return err
	}
	var attemptID *uuid.UUID
	var subject string
	if f.attempt != nil {
		id := f.attempt.ID
		attemptID, subject = &id, f.attempt.SubjectID
	}
	status := "open"
	var resolvedAt *time.Time
	var resolvedBy, reason *string
	if f.resolvedReason != "" {
		status, resolvedAt = "resolved", &now
		by := string(attempts.ActorReconciliation)
		resolvedBy, reason = &by, &f.resolvedReason
	}
	row := s.pool.QueryRow(ctx, `INSERT INTO reconcile_divergences AS d (id, provider, day, kind, severity, fingerprint,
			reference, provider_id, attempt_id, subject_id, currency, detail, provider_side, our_side, status,
			first_run_id, last_run_id, created_at, last_seen_at, resolved_at, resolved_by, resolution_reason)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $16, $17, $17, $18, $19, $20)
		ON CONFLICT (provider, kind, fingerprint) DO UPDATE SET
			last_seen_at = EXCLUDED.last_seen_at, last_run_id = EXCLUDED.last_run_id, seen_count = d.seen_count + 1,
			provider_side = CASE WHEN d.status = 'open' THEN EXCLUDED.provider_side ELSE d.provider_side END,
			our_side = CASE WHEN d.status = 'open' THEN EXCLUDED.our_side ELSE d.our_side END,
			detail = CASE WHEN d.status = 'open' THEN EXCLUDED.detail ELSE d.detail END
		RETURNING `+divergenceColumns+`, (xmax = 0)`,
		newID("dv_"), st.run.Provider, f.day, f.kind, f.kind.Severity(), fingerprintKey(f.fingerprint),
		sqlcols.Nullable(f.reference), sqlcols.Nullable(f.providerID), attemptID, sqlcols.Nullable(subject), sqlcols.Nullable(f.currency),
		storedText(f.detail, 2000), provSide, ourSide, status, st.run.ID, now, resolvedAt, resolvedBy, reason)
	var dv Divergence
	var inserted bool
	err = row.Scan(&dv.ID, &dv.Provider, &dv.Day, &dv.Kind, &dv.Severity, &dv.Reference, &dv.ProviderID, &dv.AttemptID,
		&dv.SubjectID, &dv.Currency, &dv.Detail, &dv.ProviderSide, &dv.OurSide, &dv.Status, &dv.FirstRunID, &dv.LastRunID,
		&dv.SeenCount, &dv.CreatedAt, &dv.LastSeenAt, &dv.ResolvedAt, &dv.ResolvedBy, &dv.ResolutionReason, &inserted)
	if err != nil {
		return fmt.Errorf("reconcile: store %s divergence: %w", f.kind, err)
	}
	st.run.Divergences++
	st.run.ByKind[f.kind]++
	if !inserted {
		return nil
	}
	st.run.NewDivergences++
	switch dv.Severity {
	case SeverityCritical:
		s.log.ErrorContext(ctx, "reconcile: divergence (critical): money moved that the ledger does not show, or moved twice",
			"divergence_id", dv.ID, "provider", dv.Provider, "day", dv.Day.Format(time.DateOnly), "kind", dv.Kind,
			"reference", dv.Reference, "provider_id", dv.ProviderID, "detail", dv.Detail)
		if s.cfg.OnAlert != nil {
			s.cfg.OnAlert(dv)
		}
	case SeverityInfo:
		s.log.InfoContext(ctx, "reconcile: "+string(dv.Kind), "divergence_id", dv.ID, "provider", dv.Provider,
			"reference", dv.Reference, "detail", dv.Detail)
	default:
		s.log.WarnContext(ctx, "reconcile: divergence", "divergence_id", dv.ID, "provider", dv.Provider,
			"day", dv.Day.Format(time.DateOnly), "kind", dv.Kind, "severity", dv.Severity, "reference", dv.Reference,
			"detail", dv.Detail)
	}
	return nil
}

// autoResolve closes what the run shows is over: age reports whose attempt
// is final now, and ledger totals of the run's day that agree now.
func (s *Service) autoResolve(ctx context.Context, st *runState) error {
	now := s.clock.Now()
	_, err := s.pool.Exec(ctx, `UPDATE reconcile_divergences d SET status = 'resolved', resolved_at = $2,
			resolved_by = 'reconciliation', resolution_reason = 'the attempt is ' || a.status || ' now (run ' || $3 || ')'
		FROM attempts a WHERE d.provider = $1 AND d.kind = 'stale_open' AND d.status = 'open' AND a.id = d.attempt_id
			AND a.status IN ('succeeded', 'failed')`, st.run.Provider, now, st.run.ID)
	if err != nil {
		return fmt.Errorf("reconcile: close age reports: %w", err)
	}
	var agree []string
	for _, t := range st.run.Totals {
		if t.Statement == t.Ledger {
			agree = append(agree, st.run.Day.Format(time.DateOnly)+":"+t.Currency+":"+t.Direction)
		}
	}
	prefix := st.run.Day.Format(time.DateOnly) + ":"
	_, err = s.pool.Exec(ctx, `UPDATE reconcile_divergences SET status = 'resolved', resolved_at = $2,
			resolved_by = 'reconciliation', resolution_reason = 'the ledger and the statement agree now (run ' || $3 || ')'
		WHERE provider = $1 AND kind = 'ledger_totals' AND status = 'open' AND starts_with(fingerprint, $4)
			AND (fingerprint = ANY ($5) OR NOT EXISTS (SELECT 1 FROM unnest($6::text[]) k WHERE k = fingerprint))`,
		st.run.Provider, now, st.run.ID, prefix, agree, st.totalsKeys())
	if err != nil {
		return fmt.Errorf("reconcile: close ledger totals: %w", err)
	}
	return nil
}

// totalsKeys are the fingerprints of every (currency, direction) the run
// computed totals for.
func (st *runState) totalsKeys() []string {
	out := make([]string, 0, len(st.run.Totals))
	for _, t := range st.run.Totals {
		out = append(out, st.run.Day.Format(time.DateOnly)+":"+t.Currency+":"+t.Direction)
	}
	return out
}

// Filter selects divergences; zero fields select everything.
type Filter struct {
	Provider string
	Day      *time.Time
	Kind     Kind
	Status   string // open or resolved
	Severity Severity
}

// Validate checks the filter's values.
func (f Filter) Validate() error {
	if f.Kind != "" && !f.Kind.Valid() {
		return fmt.Errorf("%w: unknown kind %q", ErrInvalid, f.Kind)
	}
	if f.Status != "" && f.Status != "open" && f.Status != "resolved" {
		return fmt.Errorf("%w: status is open or resolved", ErrInvalid)
	}
	switch f.Severity {
	case "", SeverityCritical, SeverityHigh, SeverityMedium, SeverityInfo:
	default:
		return fmt.Errorf("%w: unknown severity %q", ErrInvalid, f.Severity)
	}
	return nil
}

// MaxPageSize is the largest page List returns.
const MaxPageSize = 500

// List returns one page of divergences, newest first (keyset over
// (created_at, id)), and the cursor of the next page ("" at the end).
func List(ctx context.Context, db attempts.DB, f Filter, cursor string, limit int) ([]Divergence, string, error) {
	if err := f.Validate(); err != nil {
		return nil, "", err
	}
	limit = keyset.Limit(limit, MaxPageSize)
	where := []string{"true"}
	args := []any{}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if f.Provider != "" {
		where = append(where, "provider = "+arg(f.Provider))
	}
	if f.Day != nil {
		where = append(where, "day = "+arg(Day(*f.Day)))
	}
	if f.Kind != "" {
		where = append(where, "kind = "+arg(string(f.Kind)))
	}
	if f.Status != "" {
		where = append(where, "status = "+arg(f.Status))
	}
	if f.Severity != "" {
		where = append(where, "severity = "+arg(string(f.Severity)))
	}
	if cursor != "" {
		t, id, err := keyset.Decode(cursor)
		if err != nil {
			return nil, "", fmt.Errorf("%w: malformed cursor", ErrInvalid)
		}
		where = append(where, fmt.Sprintf("(created_at, id) < (%s, %s)", arg(t), arg(id)))
	}
	rows, err := db.Query(ctx, `SELECT `+divergenceColumns+` FROM reconcile_divergences WHERE `+
		strings.Join(where, " AND ")+` ORDER BY created_at DESC, id DESC LIMIT `+arg(limit+1), args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	var out []Divergence
	for rows.Next() {
		d, err := scanDivergence(rows)
		if err != nil {
			return nil, "", err
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	page, next := keyset.Trim(out, limit, func(d Divergence) (time.Time, string) { return d.CreatedAt, d.ID })
	return page, next, nil
}

// Stream calls fn for every divergence f selects, in List's order, one page
// at a time: never the whole table in memory. It stops at fn's first error.
func Stream(ctx context.Context, db attempts.DB, f Filter, fn func(Divergence) error) error {
	cursor := ""
	for {
		page, next, err := List(ctx, db, f, cursor, MaxPageSize)
		if err != nil {
			return err
		}
		for _, d := range page {
			if err := fn(d); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		cursor = next
	}
}

// Get returns one divergence.
func Get(ctx context.Context, db attempts.DB, id string) (Divergence, error) {
	return scanDivergence(db.QueryRow(ctx, `SELECT `+divergenceColumns+` FROM reconcile_divergences WHERE id = $1`, id))
}

// Resolve is an operator's resolution of an open divergence, with the
// operator's id and a reason. It changes nothing in the ledger or the
// attempts: the operator settles the money by its own means (a manual
// resolution of the attempt, a funding adjustment) and records here why
// the divergence is closed. On a divergence already resolved it changes
// nothing and reports changed == false.
func Resolve(ctx context.Context, db attempts.DB, id, operatorID, reason string, now time.Time) (Divergence, bool, error) {
	if strings.TrimSpace(operatorID) == "" || strings.TrimSpace(reason) == "" || utf8.RuneCountInString(reason) > 2000 {
		return Divergence{}, false, fmt.Errorf("%w: an operator id and a reason (up to 2000 characters) are required", ErrInvalid)
	}
	d, err := scanDivergence(db.QueryRow(ctx, `UPDATE reconcile_divergences SET status = 'resolved', resolved_at = $2,
		resolved_by = $3, resolution_reason = $4 WHERE id = $1 AND status = 'open' RETURNING `+divergenceColumns,
		id, now, operatorID, reason))
	if err == nil {
		return d, true, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return d, false, err
	}
	d, err = Get(ctx, db, id)
	return d, false, err
}

const runColumns = `id, provider, day, status, triggered_by, started_at, finished_at, statement_lines,
	matched, resolved, divergences, new_divergences, deferred, totals, error`

func scanRun(row pgx.Row) (Run, error) {
	var r Run
	var totals []byte
	var errText *string
	err := row.Scan(&r.ID, &r.Provider, &r.Day, &r.Status, &r.TriggeredBy, &r.StartedAt, &r.FinishedAt, &r.StatementLines,
		&r.Matched, &r.Resolved, &r.Divergences, &r.NewDivergences, &r.Deferred, &totals, &errText)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, ErrNotFound
	}
	if err != nil {
		return r, err
	}
	if errText != nil {
		r.Error = *errText
	}
	_ = json.Unmarshal(totals, &r.Totals)
	return r, nil
}

// GetRun returns one run.
func GetRun(ctx context.Context, db attempts.DB, id string) (Run, error) {
	return scanRun(db.QueryRow(ctx, `SELECT `+runColumns+` FROM reconcile_runs WHERE id = $1`, id))
}

// ListRuns returns one page of runs, newest first (keyset over
// (started_at, id)), of one provider and one day when set, and the cursor
// of the next page ("" at the end). ByKind is not stored and stays empty.
func ListRuns(ctx context.Context, db attempts.DB, provider string, day *time.Time, cursor string, limit int) ([]Run, string, error) {
	limit = keyset.Limit(limit, MaxPageSize)
	where := []string{"true"}
	args := []any{}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if provider != "" {
		where = append(where, "provider = "+arg(provider))
	}
	if day != nil {
		where = append(where, "day = "+arg(Day(*day)))
	}
	if cursor != "" {
		t, id, err := keyset.Decode(cursor)
		if err != nil {
			return nil, "", fmt.Errorf("%w: malformed cursor", ErrInvalid)
		}
		where = append(where, fmt.Sprintf("(started_at, id) < (%s, %s)", arg(t), arg(id)))
	}
	rows, err := db.Query(ctx, `SELECT `+runColumns+` FROM reconcile_runs WHERE `+strings.Join(where, " AND ")+
		` ORDER BY started_at DESC, id DESC LIMIT `+arg(limit+1), args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	var out []Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, "", err
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	page, next := keyset.Trim(out, limit, func(r Run) (time.Time, string) { return r.StartedAt, r.ID })
	return page, next, nil
}

// Violation is an open critical divergence, for the audit.
type Violation struct {
	Check  string // the divergence kind
	Detail string
}

// Verify lists the open divergences of the highest severity (critical):
// `saldo audit verify` fails while any is open.
func Verify(ctx context.Context, db attempts.DB) ([]Violation, error) {
	var out []Violation
	err := Stream(ctx, db, Filter{Status: "open", Severity: SeverityCritical}, func(d Divergence) error {
		out = append(out, Violation{Check: string(d.Kind), Detail: fmt.Sprintf("divergence %s (%s, %s): %s", d.ID,
			d.Provider, d.Day.Format(time.DateOnly), d.Detail)})
		return nil
	})
	return out, err
}
