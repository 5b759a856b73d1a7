package ledger_test

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger/ledgerbench"
)

// exampleDatabase gives a runnable example a freshly migrated database on
// the test server (TEST_DATABASE_URL or 127.0.0.1:5432, see internal/testdb)
// and a function that drops it. Examples have no *testing.T, so they cannot
// use testdb.New.
func exampleDatabase() (*pgxpool.Pool, func()) {
	ctx := context.Background()
	server, err := testdb.ServerURL()
	if err != nil {
		panic(err)
	}
	url, drop, err := ledgerbench.ThrowawayDatabase(ctx, server, "saldo_example", nil)
	if err != nil {
		panic(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	return pool, func() {
		pool.Close()
		_ = drop(ctx)
	}
}
