package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers/sim"
)

// Secrets never reach logs, bad configuration included. A key/value
// connection string is what --database-url / SALDO_DATABASE_URL also take
// (pgx parses both forms), and libpq allows spaces around '='. When such a
// string fails to parse, saldo serve never shows pgx's parse error: it says
// "not a valid PostgreSQL connection string ...; it is not shown", so
// neither its error nor stderr (the process's log) holds the password.
// Before, saldo returned pgx's error verbatim ("cannot parse `host=...
// password = <THE PASSWORD> ...`"), whose redaction only knows
// "password=value" without spaces (found by review).
func TestBadDatabaseURLNeverEchoesItsPassword(t *testing.T) {
	const password = "db-PASSWORD-7731"
	srv := sim.NewServer(sim.Config{Seed: 3}).Start()
	defer srv.Close()
	for _, dsn := range []string{
		"host=127.0.0.1 user=saldo password = " + password + " port=notaport",
	} {
		var err error
		out := captureStderr(t, func() {
			err = runServe(context.Background(), []string{"--database-url", dsn, "--sim-url", srv.URL()})
		})
		require.Error(t, err)
		t.Logf("error: %v", err)
		assert.NotContains(t, out, password, "the database password reached stderr")
		assert.NotContains(t, err.Error(), password, "the database password is in the error saldo serve returns (printed by main)")
	}
}
