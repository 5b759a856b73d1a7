package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/saldo/saldo/ledger"
)

func init() {
	register(command{
		Name:    "audit",
		Summary: "audit verify: replay the ledger and check every invariant (exit 1 on any violation); audit seal: write the ledger's chain heads for an auditor to keep",
		Run:     runAudit,
	})
}

// violation is one broken invariant found by an audit check.
type violation struct {
	Kind   string // e.g. balance_mismatch
	Where  string // account code, transaction, attempt, ...
	Detail string
}

// auditCheck is one named group of invariants `saldo audit verify` runs.
// Run returns a one-line summary of what it examined and every violation it
// found. Packages add their checks by appending to auditChecks from an init
// function in their own file.
type auditCheck struct {
	Name string
	Run  func(ctx context.Context, pool *pgxpool.Pool) (summary string, violations []violation, err error)
}

var auditChecks = []auditCheck{
	{Name: "ledger", Run: auditLedger},
}

// auditLedger is ledger.Verify: balances replayed from postings, zero-sum
// transactions, no forbidden negative in history, gap-free sequences,
// balance_after consistency and per-account hash chains.
func auditLedger(ctx context.Context, pool *pgxpool.Pool) (string, []violation, error) {
	rep, err := ledger.Verify(ctx, pool)
	if err != nil {
		return "", nil, err
	}
	summary := fmt.Sprintf("%d accounts, %d transactions, %d postings", rep.Accounts, rep.Transactions, rep.Postings)
	return summary, ledgerViolations(rep), nil
}

// ledgerViolations are a ledger report's violations as the audit prints
// them (Verify's and VerifySeal's), with a line for those not listed.
func ledgerViolations(rep ledger.Report) []violation {
	var out []violation
	for _, v := range rep.Violations {
		where := v.AccountCode
		if v.Seq != 0 {
			where += fmt.Sprintf(" seq %d", v.Seq)
		}
		if v.TransactionID != 0 {
			if where != "" {
				where += " "
			}
			where += fmt.Sprintf("tx %d", v.TransactionID)
		}
		out = append(out, violation{Kind: string(v.Kind), Where: where, Detail: v.Detail})
	}
	if hidden := rep.Total() - int64(len(rep.Violations)); hidden > 0 {
		out = append(out, violation{Kind: "more", Detail: fmt.Sprintf("%d further violations not listed", hidden)})
	}
	return out
}

// maxListedViolations keeps the report on one screen per check.
const maxListedViolations = 30

func runAudit(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "seal" {
		return runAuditSeal(ctx, args[1:])
	}
	if len(args) == 0 || args[0] != "verify" {
		fmt.Fprintln(os.Stderr, "usage: saldo audit verify [--database-url URL] [--seal FILE]\n       saldo audit seal [--database-url URL] [--out FILE]")
		return flag.ErrHelp
	}
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	dbURL := databaseURL(fs)
	sealPath := fs.String("seal", "", "also check the ledger against a seal taken earlier by `saldo audit seal` (kept outside the database): history up to each sealed head must be unchanged")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		// Flag parsing stops at the first argument that is not a flag:
		// the flags after it would be ignored without a word.
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	// Exit 1 is "violations found", and nothing else: a monitor keyed on
	// it must not page for an audit that could not run (exit 2).
	couldNotRun := func(err error) error {
		fmt.Fprintf(os.Stderr, "saldo audit verify: could not run: %v\n", err)
		return exitError{Code: 2}
	}
	u, err := dbURL()
	if err != nil {
		return couldNotRun(err)
	}
	pool, err := newPool(ctx, u)
	if err != nil {
		return couldNotRun(fmt.Errorf("connect: %w", err))
	}
	defer pool.Close()
	checks := auditChecks
	if *sealPath != "" {
		// The file is opened before anything runs: a seal that cannot be
		// read is "could not run", not a report without it.
		f, err := os.Open(*sealPath)
		if err != nil {
			return couldNotRun(fmt.Errorf("seal: %w", err))
		}
		defer f.Close()
		checks = append(append([]auditCheck(nil), auditChecks...), auditCheck{Name: "seal", Run: auditSeal(f)})
	}
	ok, err := runAuditChecks(ctx, pool, os.Stdout, checks)
	switch {
	case !ok && err == nil:
		return exitError{Code: 1}
	case err != nil:
		return couldNotRun(err)
	}
	return nil
}

// auditVerify runs every check, prints the report to w and reports whether
// everything held. An error means a check could not run (not a violation).
func auditVerify(ctx context.Context, pool *pgxpool.Pool, w io.Writer) (bool, error) {
	return runAuditChecks(ctx, pool, w, auditChecks)
}

// runAuditChecks is auditVerify over checks.
func runAuditChecks(ctx context.Context, pool *pgxpool.Pool, w io.Writer, checks []auditCheck) (bool, error) {
	allOK := true
	var errs []error
	for _, c := range checks {
		start := time.Now()
		summary, vs, err := c.Run(ctx, pool)
		took := time.Since(start).Round(time.Millisecond)
		if err != nil {
			fmt.Fprintf(w, "%-10s ERROR   %v\n", c.Name, err)
			errs = append(errs, fmt.Errorf("%s: %w", c.Name, err))
			if len(vs) == 0 {
				continue
			}
			// Part of the line's checks ran (an area whose checks come
			// from two places) and found violations: they are reported.
			summary = "partly checked"
		}
		if len(vs) == 0 {
			fmt.Fprintf(w, "%-10s OK      %s (%s)\n", c.Name, summary, took)
			continue
		}
		allOK = false
		fmt.Fprintf(w, "%-10s FAILED  %s (%s): %d violations\n", c.Name, summary, took, len(vs))
		counts := map[string]int{}
		for _, v := range vs {
			counts[v.Kind]++
		}
		kinds := make([]string, 0, len(counts))
		for k := range counts {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		for _, k := range kinds {
			fmt.Fprintf(w, "           %5d  %s\n", counts[k], k)
		}
		for i, v := range vs {
			if i == maxListedViolations {
				fmt.Fprintf(w, "           ... %d more\n", len(vs)-i)
				break
			}
			line := "  - " + v.Kind
			if v.Where != "" {
				line += " [" + v.Where + "]"
			}
			if v.Detail != "" {
				line += ": " + v.Detail
			}
			fmt.Fprintln(w, "         "+line)
		}
	}
	if err := errors.Join(errs...); err != nil {
		if !allOK {
			// Violations found by the checks that ran: that is what the
			// exit code says; the errors are printed above.
			fmt.Fprintln(w, "audit verify: VIOLATIONS FOUND (and some checks could not run)")
			return false, nil
		}
		return false, err
	}
	if allOK {
		fmt.Fprintln(w, "audit verify: all invariants hold")
	} else {
		fmt.Fprintln(w, "audit verify: VIOLATIONS FOUND")
	}
	return allOK, nil
}
