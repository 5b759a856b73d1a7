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
	if err := fs.Parse(args); err != nil {
		return err
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
	return nil
}
