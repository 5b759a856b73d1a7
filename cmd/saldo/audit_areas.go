package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/saldo/saldo/audit"
)

// The checks beyond the ledger's (attempts, payouts, charges) come from
// package audit, the same list tests run after every scenario.
func init() {
	for _, c := range audit.Checks {
		auditChecks = append(auditChecks, auditCheck{Name: c.Area,
			Run: func(ctx context.Context, pool *pgxpool.Pool) (string, []violation, error) {
				vs, err := c.Run(ctx, pool)
				out := make([]violation, 0, len(vs))
				for _, v := range vs {
					out = append(out, violation{Kind: v.Check, Detail: v.Detail})
				}
				return "invariants checked", out, err
			}})
	}
}
