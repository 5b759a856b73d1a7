package main

import (
	"context"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/saldo/saldo/audit"
)

// The checks beyond ledger.Verify (attempts, payouts, charges, refunds,
// reconcile, the ledger's reversals) come from package audit, the same list
// tests run after every scenario. A check of an area already listed (the
// reversals, area "ledger") runs after it and reports on its line: one
// line per area.
func init() {
	for _, c := range audit.Checks {
		run := func(ctx context.Context, pool *pgxpool.Pool) (string, []violation, error) {
			vs, err := c.Run(ctx, pool)
			out := make([]violation, 0, len(vs))
			for _, v := range vs {
				out = append(out, violation{Kind: v.Check, Detail: v.Detail})
			}
			return "invariants checked", out, err
		}
		if i := slices.IndexFunc(auditChecks, func(a auditCheck) bool { return a.Name == c.Area }); i >= 0 {
			auditChecks[i].Run = alsoRun(auditChecks[i].Run, run)
			continue
		}
		auditChecks = append(auditChecks, auditCheck{Name: c.Area, Run: run})
	}
}

// alsoRun runs first, then then (even if first failed: what then finds
// is still reported), and reports both's violations under first's
// summary, with both's errors.
func alsoRun(first, then func(context.Context, *pgxpool.Pool) (string, []violation, error)) func(context.Context, *pgxpool.Pool) (string, []violation, error) {
	return func(ctx context.Context, pool *pgxpool.Pool) (string, []violation, error) {
		summary, vs, err1 := first(ctx, pool)
		_, more, err2 := then(ctx, pool)
		return summary, append(vs, more...), errors.Join(err1, err2)
	}
}
