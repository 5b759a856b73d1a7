package audit

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/saldo/saldo/ledger"
)

// maxListed bounds the violations one of this package's own checks lists,
// as ledger.Verify bounds its report: a damaged database of ten million
// postings must not make the audit build ten million strings. The total is
// still counted (count(*) OVER () costs nothing the query did not already
// compute) and said in one more violation.
const maxListed = ledger.MaxReportedViolations

// sqlCheck is one named check: a set-based statement whose rows are
// (detail, total offending rows), in report order, at most $1 of them.
type sqlCheck struct {
	name string
	sql  string
}

// collect runs checks in order and turns their rows into violations of
// area.
func collect(ctx context.Context, db *pgxpool.Pool, area string, checks []sqlCheck) ([]Violation, error) {
	var out []Violation
	for _, c := range checks {
		rows, err := db.Query(ctx, c.sql, maxListed)
		if err != nil {
			return out, fmt.Errorf("%s %s: %w", area, c.name, err)
		}
		var total, listed int64
		for rows.Next() {
			var detail string
			if err := rows.Scan(&detail, &total); err != nil {
				rows.Close()
				return out, fmt.Errorf("%s %s: %w", area, c.name, err)
			}
			out = append(out, Violation{Area: area, Check: c.name, Detail: detail})
			listed++
		}
		if err := rows.Err(); err != nil {
			return out, fmt.Errorf("%s %s: %w", area, c.name, err)
		}
		if total > listed {
			out = append(out, Violation{Area: area, Check: c.name,
				Detail: fmt.Sprintf("... and %d more not listed", total-listed)})
		}
	}
	return out, nil
}
