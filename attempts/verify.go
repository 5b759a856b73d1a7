package attempts

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Violation is one broken invariant found by Verify.
type Violation struct {
	// Code names the invariant: two_succeeded, two_open, final_changed,
	// broken_history, status_mismatch, unresolved_orphan, diverged.
	Code      string
	AttemptID string
	SubjectID string
	Detail    string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s attempt=%s subject=%s: %s", v.Code, v.AttemptID, v.SubjectID, v.Detail)
}

// Verify checks the attempts invariants (for `saldo audit verify`):
//   - at most one succeeded attempt per subject;
//   - at most one open (pending or unknown) attempt per subject (R8);
//   - the transition events of every attempt form a valid chain from
//     pending (R9): no transition out of a final status, each from equals
//     the previous to, and the last to equals the current status;
//   - every attempt awaiting resolution has a live resolver job or a review
//     flag;
//   - no provider reported succeeded for an attempt resolved failed
//     (diverged: the reserve went back while money may have left; issue 13
//     finding 5). Reported until a human settles it.
func Verify(ctx context.Context, db DB) ([]Violation, error) {
	var out []Violation
	checks := []struct{ code, sql string }{
		{"two_succeeded", `SELECT min(id::text), subject_id, count(*)::text || ' succeeded attempts for ' || direction
			FROM attempts WHERE status = 'succeeded' GROUP BY direction, subject_id HAVING count(*) > 1`},
		{"two_open", `SELECT min(id::text), subject_id, count(*)::text || ' open attempts for ' || direction
			FROM attempts WHERE status IN ('pending', 'unknown') GROUP BY direction, subject_id HAVING count(*) > 1`},
		{"final_changed", `SELECT e.attempt_id::text, a.subject_id, 'event ' || e.id || ': ' || e.from_status || ' -> ' || e.to_status
			FROM attempt_events e JOIN attempts a ON a.id = e.attempt_id
			WHERE e.type = 'transition' AND e.from_status IN ('succeeded', 'failed')`},
		{"broken_history", `SELECT t.attempt_id::text, a.subject_id, 'event ' || t.id || ': from ' || t.from_status ||
				' but previous status was ' || t.prev || ' (or the move is not allowed)'
			FROM (SELECT e.*, coalesce(lag(e.to_status) OVER (PARTITION BY e.attempt_id ORDER BY e.id), 'pending') AS prev
				FROM attempt_events e WHERE e.type = 'transition') t JOIN attempts a ON a.id = t.attempt_id
			WHERE t.from_status IS DISTINCT FROM t.prev OR NOT (
				(t.from_status = 'pending' AND t.to_status IN ('succeeded', 'failed', 'unknown'))
				OR (t.from_status = 'unknown' AND t.to_status IN ('succeeded', 'failed')))`},
		{"status_mismatch", `SELECT a.id::text, a.subject_id, 'status ' || a.status || ' but history ends at ' ||
				coalesce(l.to_status, 'pending')
			FROM attempts a LEFT JOIN LATERAL (SELECT to_status FROM attempt_events e
				WHERE e.attempt_id = a.id AND e.type = 'transition' ORDER BY e.id DESC LIMIT 1) l ON true
			WHERE a.status <> coalesce(l.to_status, 'pending')`},
		{"unresolved_orphan", `SELECT a.id::text, a.subject_id, a.status || ' attempt with neither a live resolver job nor a review flag'
			FROM attempts a WHERE NOT a.review
			AND (a.status = 'unknown' OR (a.status = 'pending' AND a.provider_state = 'processing' AND a.call_count = a.calls_recorded))
			AND NOT EXISTS (SELECT 1 FROM river_job j WHERE j.kind = '` + ResolveAttemptKind + `'
				AND j.state IN ('available', 'pending', 'running', 'retryable', 'scheduled')
				AND j.args->>'attempt_id' = a.id::text)`},
		{"diverged", `SELECT a.id::text, a.subject_id, 'resolved ' || a.status || ' by ' || coalesce(a.resolved_by, '?') ||
				', then at ' || a.diverged_at || ' ' || a.divergence
			FROM attempts a WHERE a.diverged_at IS NOT NULL AND a.divergence_settled_at IS NULL`},
	}
	for _, c := range checks {
		rows, err := db.Query(ctx, c.sql)
		if err != nil {
			return nil, fmt.Errorf("attempts: verify %s: %w", c.code, err)
		}
		vs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Violation, error) {
			v := Violation{Code: c.code}
			return v, r.Scan(&v.AttemptID, &v.SubjectID, &v.Detail)
		})
		if err != nil {
			return nil, fmt.Errorf("attempts: verify %s: %w", c.code, err)
		}
		out = append(out, vs...)
	}
	return out, nil
}
