package ledgerbench

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/migrations"
)

// ThrowawayDatabase creates a database named <prefix>_<random> on the server
// that serverURL points to (any database on it; the role needs CREATEDB),
// migrates it with migrations.Up and returns its URL and a function that
// drops it.
func ThrowawayDatabase(ctx context.Context, serverURL, prefix string, logger *slog.Logger) (string, func(context.Context) error, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", nil, fmt.Errorf("ledgerbench: server URL: %w", err)
	}
	name := fmt.Sprintf("%s_%08x", prefix, rand.Uint32())
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", nil, fmt.Errorf("ledgerbench: connect to %s: %w", u.Redacted(), err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("ledgerbench: create database %s: %w", name, err)
	}
	drop := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, serverURL)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		return err
	}
	db := *u
	db.Path = "/" + name
	if _, err := migrations.Up(ctx, db.String(), logger); err != nil {
		_ = drop(ctx)
		return "", nil, fmt.Errorf("ledgerbench: migrate %s: %w", name, err)
	}
	return db.String(), drop, nil
}
