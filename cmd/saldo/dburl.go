package main

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"
)

// errDatabaseURL is what saldo says of a connection string pgx cannot
// parse. pgx's own message quotes the string, and its redaction of the
// password is best effort: it misses libpq's "password = secret" (spaces
// around '='), which then reached stderr and the logs. The text is never
// shown.
var errDatabaseURL = errors.New("not a valid PostgreSQL connection string (a postgres:// URL or libpq key=value pairs); " +
	"it is not shown here: it may hold a password")

// parseDatabaseURL parses a connection string without ever echoing it.
func parseDatabaseURL(u string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return nil, errDatabaseURL
	}
	return cfg, nil
}

// newPool opens a pool on the connection string u (parseDatabaseURL).
func newPool(ctx context.Context, u string) (*pgxpool.Pool, error) {
	cfg, err := parseDatabaseURL(u)
	if err != nil {
		return nil, err
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}
