package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/saldo/saldo/api"
)

func init() {
	register(command{
		Name:    "keys",
		Summary: "manage API keys: keys create --role ROLE [--merchant ID] [--name NAME]; keys revoke ID",
		Run:     runKeys,
	})
}

func runKeys(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: saldo keys create --role merchant|auditor|operator|admin [--merchant ID] [--name NAME] | saldo keys revoke KEY_ID")
	}
	switch args[0] {
	case "create":
		return runKeysCreate(ctx, args[1:])
	case "revoke":
		return runKeysRevoke(ctx, args[1:])
	}
	return fmt.Errorf("unknown keys subcommand %q (create, revoke)", args[0])
}

func runKeysCreate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("keys create", flag.ContinueOnError)
	dbURL := databaseURL(fs)
	role := fs.String("role", "", "merchant, auditor, operator or admin (required)")
	merchant := fs.String("merchant", "", "the merchant id (merchant keys only)")
	name := fs.String("name", "", "a label for humans")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	u, err := dbURL()
	if err != nil {
		return err
	}
	pool, err := newPool(ctx, u)
	if err != nil {
		return err
	}
	defer pool.Close()
	k, secret, err := api.CreateKey(ctx, pool, api.Role(*role), *merchant, *name, time.Now())
	if err != nil {
		return err
	}
	fmt.Printf("id:     %s\nrole:   %s\n", k.ID, k.Role)
	if k.MerchantID != "" {
		fmt.Printf("merchant: %s\n", k.MerchantID)
	}
	fmt.Printf("secret: %s\n\nThe secret is shown only now; saldo keeps only its sha256. Use it as: Authorization: Bearer <secret>\n", secret)
	return nil
}

func runKeysRevoke(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("keys revoke", flag.ContinueOnError)
	dbURL := databaseURL(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: saldo keys revoke [--database-url URL] KEY_ID")
	}
	u, err := dbURL()
	if err != nil {
		return err
	}
	pool, err := newPool(ctx, u)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := api.RevokeKey(ctx, pool, fs.Arg(0), time.Now()); err != nil {
		return err
	}
	fmt.Printf("revoked %s\n", fs.Arg(0))
	return nil
}
