package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/saldo/saldo/migrations"
)

func init() {
	register(command{
		Name:    "migrate",
		Summary: "apply River's and saldo's database migrations (idempotent, safe to run concurrently)",
		Run:     runMigrate,
	})
}

func runMigrate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	dbURL := databaseURL(fs)
	appRole := fs.String("app-role", os.Getenv("SALDO_APP_ROLE"),
		"after migrating, grant this existing role what 'saldo serve' needs and no write on the ledger's tables "+
			"(it writes them only through the ledger's functions); run migrate as the tables' owner and serve as this role "+
			"(default $SALDO_APP_ROLE; see docs/runbook.md)")
	readRole := fs.String("read-only-role", os.Getenv("SALDO_READ_ONLY_ROLE"),
		"after migrating, grant this existing role SELECT on every table and nothing else, for auditors and reporting "+
			"(saldo audit verify needs no more) (default $SALDO_READ_ONLY_ROLE)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		// Flag parsing stops at the first argument that is not a flag:
		// the flags after it would be ignored without a word.
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	u, err := dbURL()
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	res, err := migrations.Up(ctx, u, logger)
	if err != nil {
		return err
	}
	fmt.Printf("migrations: river applied %d, saldo applied %d (schema %s)\n",
		len(res.RiverApplied), len(res.SaldoApplied), migrations.Hash())
	for _, f := range res.SaldoApplied {
		fmt.Println("  applied", f)
	}
	if *appRole != "" {
		if err := migrations.GrantApplicationRole(ctx, u, *appRole); err != nil {
			return err
		}
		fmt.Printf("granted %s: the ledger's tables read-only, written through its functions\n", *appRole)
	}
	if *readRole != "" {
		if err := migrations.GrantReadOnlyRole(ctx, u, *readRole); err != nil {
			return err
		}
		fmt.Printf("granted %s: every table read-only, no ledger function that writes\n", *readRole)
	}
	return nil
}
