package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/saldo/saldo/ledger"
)

// auditSeal is the "seal" line of `saldo audit verify --seal FILE`:
// ledger.VerifySeal against the seal read from r. A file that is not a
// whole, unedited seal is an error (the audit could not run), never a
// clean line.
func auditSeal(r io.Reader) func(ctx context.Context, pool *pgxpool.Pool) (string, []violation, error) {
	return func(ctx context.Context, pool *pgxpool.Pool) (string, []violation, error) {
		sum, rep, err := ledger.VerifySeal(ctx, pool, r)
		if err != nil {
			return "", nil, err
		}
		summary := fmt.Sprintf("%d accounts sealed at %s (digest %s)", sum.Accounts, sum.TakenAt.Format(time.RFC3339), sum.Digest)
		return summary, ledgerViolations(rep), nil
	}
}

// runAuditSeal is `saldo audit seal`: the ledger's chain heads, written to
// --out (or standard output) for an auditor to keep outside the database;
// the digest goes to standard error. A file is written whole or not at
// all: it is written beside its name and renamed into place once complete.
func runAuditSeal(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("audit seal", flag.ContinueOnError)
	dbURL := databaseURL(fs)
	out := fs.String("out", "", "write the seal to this file (default: standard output); an existing file is never overwritten")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	u, err := dbURL()
	if err != nil {
		return err
	}
	pool, err := newPool(ctx, u)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	w := io.Writer(os.Stdout)
	var tmp *os.File
	if *out != "" {
		if _, err := os.Stat(*out); err == nil {
			return fmt.Errorf("%s exists: a seal is never overwritten (choose another name)", *out)
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if tmp, err = os.CreateTemp(filepath.Dir(*out), "."+filepath.Base(*out)+".*"); err != nil {
			return err
		}
		defer os.Remove(tmp.Name()) // gone once renamed; removes a partial file otherwise
		defer tmp.Close()
		w = tmp
	}
	sum, err := ledger.WriteSeal(ctx, pool, w, time.Now())
	if err != nil {
		return err
	}
	if tmp != nil {
		if err := tmp.Sync(); err != nil {
			return err
		}
		if err := tmp.Close(); err != nil {
			return err
		}
		// Link, not rename: it refuses a file created at that name
		// meanwhile instead of replacing it.
		if err := os.Link(tmp.Name(), *out); err != nil {
			return fmt.Errorf("seal written but not placed at %s: %w", *out, err)
		}
	}
	fmt.Fprintf(os.Stderr, "saldo audit seal: %d accounts, taken at %s, digest %s\n", sum.Accounts,
		sum.TakenAt.Format(time.RFC3339), sum.Digest)
	return nil
}
