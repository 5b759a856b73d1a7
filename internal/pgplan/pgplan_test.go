package pgplan_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/internal/pgplan"
	"github.com/saldo/saldo/internal/testdb"
)

// A batch statement by key runs a few times while its table is small (200
// rows of about 180 bytes, as payouts are early in a fresh database), then
// once the table has grown to 20,000. As a named prepared statement (pgx's
// default) the generic plan cached while the table was small still scans
// the whole table; sent with PerCall it is planned for the table as it is
// and reaches its 30 rows by the primary key.
func TestPerCallPlansForTheTableAsItIsNow(t *testing.T) {
	ctx := context.Background()
	pool := testdb.New(t)
	for i, tc := range []struct {
		name      string
		mode      []any
		wantScans bool
	}{
		{"named prepared statement (the pitfall)", nil, true},
		{"PerCall", []any{pgplan.PerCall}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := fmt.Sprintf("pgplan_probe_%d", i)
			fill := func(from, to int) {
				t.Helper()
				if _, err := pool.Exec(ctx, `INSERT INTO `+table+`
					SELECT 'po_' || md5(g::text), 0, repeat('x', 150) FROM generate_series($1::int, $2::int) g`, from, to); err != nil {
					t.Fatal(err)
				}
			}
			testdb.CreateTables(t, pool, `CREATE TABLE `+table+` (id text PRIMARY KEY, v int NOT NULL, filler text NOT NULL)`, table)
			fill(1, 200)
			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			update := `UPDATE ` + table + ` p SET v = p.v + 1 FROM unnest($1::text[]) AS u(id)
				WHERE p.id = ANY ($1::text[]) AND p.id = u.id`
			var keys []string // a batch of 30, as saldo's batches are
			if err := conn.QueryRow(ctx, `SELECT array_agg('po_' || md5(g::text)) FROM generate_series(1, 30) g`).Scan(&keys); err != nil {
				t.Fatal(err)
			}
			args := append(append([]any{}, tc.mode...), keys)
			for range 10 {
				if _, err := conn.Exec(ctx, update, args...); err != nil {
					t.Fatal(err)
				}
			}
			fill(201, 20000)
			// pg_stat_xact_user_tables holds this backend's counts not yet
			// reported, earlier transactions' included: compare before
			// and after, inside one transaction.
			scans := func(tx pgx.Tx) (n int64) {
				t.Helper()
				if err := tx.QueryRow(ctx, `SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = $1`, table).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				before := scans(tx)
				tag, err := tx.Exec(ctx, update, args...)
				if err != nil {
					return err
				}
				if tag.RowsAffected() != int64(len(keys)) {
					return fmt.Errorf("updated %d rows, want %d", tag.RowsAffected(), len(keys))
				}
				if n := scans(tx) - before; (n > 0) != tc.wantScans {
					return fmt.Errorf("%d sequential scans of %s (20,000 rows) by one call; want scans: %v", n, table, tc.wantScans)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
