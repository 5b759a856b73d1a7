// Package audit runs every invariant saldo keeps, across packages, in one
// place: the ledger's own checks (balances replayed from postings, zero-sum
// transactions, no forbidden negative in history, gap-free sequences, hash
// chains), the attempts core's (at most one succeeded and one open attempt
// per subject, finals never change, every unknown has a resolver or a
// review flag, no provider success reported after a failed resolution:
// attempts/diverged), payouts' (reserved balance equals open outgoing attempts,
// statuses match attempts, one ledger effect per final attempt) and
// charges' (every paid charge credited exactly once with the legs its fee
// and splits say, nothing credited for an unpaid charge, at most one
// succeeded attempt per charge, statuses match attempts), refunds' (a
// refund, its attempts and its ledger legs have its charge's merchant,
// currency and provider; R21), reconciliation's (no open divergence of the
// highest severity: money the provider moved that the ledger does not
// show, or moved twice; R19), holds' (every merchant's held balance is the
// sum of its open divergence holds, each hold within what its divergence
// put in doubt and released or booked when it is settled; R19, R22) and
// the ledger's reversals' (each the exact negation of its original, at
// most one per original).
//
// `saldo audit verify` prints it; tests run it after every concurrency,
// crash and chaos scenario.
package audit

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/holds"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/reconcile"
)

// Violation is one broken invariant.
type Violation struct {
	Area   string // ledger, attempts, payouts, charges, refunds, reconcile
	Check  string
	Detail string
}

func (v Violation) String() string { return v.Area + "/" + v.Check + ": " + v.Detail }

// Result of a full audit.
type Result struct {
	Ledger     ledger.Report
	Violations []Violation
}

// OK reports whether every invariant holds.
func (r Result) OK() bool { return len(r.Violations) == 0 }

// Summary is a one-line description.
func (r Result) Summary() string {
	if r.OK() {
		return fmt.Sprintf("audit OK: %d accounts, %d transactions, %d postings", r.Ledger.Accounts, r.Ledger.Transactions, r.Ledger.Postings)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "audit FAILED: %d violations", len(r.Violations))
	for i, v := range r.Violations {
		if i == 20 {
			fmt.Fprintf(&b, "\n  ... %d more", len(r.Violations)-20)
			break
		}
		b.WriteString("\n  " + v.String())
	}
	return b.String()
}

// Check is one area's invariants beyond the ledger's own.
type Check struct {
	Area string
	Run  func(ctx context.Context, db *pgxpool.Pool) ([]Violation, error)
}

// Checks are the per-area checks Run performs after ledger.Verify, in order.
// `saldo audit verify` runs the same list (a check of area "ledger",
// Reversals, is printed on ledger.Verify's line).
var Checks = []Check{
	{Area: "attempts", Run: func(ctx context.Context, db *pgxpool.Pool) ([]Violation, error) {
		vs, err := attempts.Verify(ctx, db)
		out := make([]Violation, 0, len(vs))
		for _, v := range vs {
			out = append(out, Violation{"attempts", v.Code, v.String()})
		}
		return out, err
	}},
	{Area: "payouts", Run: func(ctx context.Context, db *pgxpool.Pool) ([]Violation, error) {
		vs, err := payouts.Verify(ctx, db)
		out := make([]Violation, 0, len(vs))
		for _, v := range vs {
			out = append(out, Violation{"payouts", v.Check, v.Detail})
		}
		return out, err
	}},
	{Area: "charges", Run: func(ctx context.Context, db *pgxpool.Pool) ([]Violation, error) {
		vs, err := charges.Verify(ctx, db)
		out := make([]Violation, 0, len(vs))
		for _, v := range vs {
			out = append(out, Violation{"charges", v.Check, v.Detail})
		}
		return out, err
	}},
	Refunds,
	{Area: "holds", Run: func(ctx context.Context, db *pgxpool.Pool) ([]Violation, error) {
		vs, err := holds.Verify(ctx, db)
		out := make([]Violation, 0, len(vs))
		for _, v := range vs {
			out = append(out, Violation{"holds", v.Check, v.Detail})
		}
		return out, err
	}},
	{Area: "reconcile", Run: func(ctx context.Context, db *pgxpool.Pool) ([]Violation, error) {
		vs, err := reconcile.Verify(ctx, db)
		out := make([]Violation, 0, len(vs))
		for _, v := range vs {
			out = append(out, Violation{"reconcile", v.Check, v.Detail})
		}
		return out, err
	}},
	Reversals,
}

// Run runs ledger.Verify and every Check against db.
func Run(ctx context.Context, db *pgxpool.Pool) (Result, error) {
	var res Result
	rep, err := ledger.Verify(ctx, db)
	if err != nil {
		return res, err
	}
	res.Ledger = rep
	for _, v := range rep.Violations {
		res.Violations = append(res.Violations, Violation{"ledger", string(v.Kind), v.String()})
	}
	for _, c := range Checks {
		vs, err := c.Run(ctx, db)
		if err != nil {
			return res, fmt.Errorf("audit: %s: %w", c.Area, err)
		}
		res.Violations = append(res.Violations, vs...)
	}
	return res, nil
}
