// Package migrations holds saldo's SQL schema, embedded in the binary, and
// applies it together with River's own migrations.
//
// Migrations are forward-only goose files named NNNNN_name.sql. Each package
// owns a range of numbers: 00001-00009 foundation, 00010-00019 ledger (full
// since 00019: the ledger's next files take 00100-00109), 00020-00029
// attempts, 00030-00039 payouts, 00040-00049 charges, 00050-00059 api,
// 00060-00069 reconcile, 00070-00079 console, 00080-00089 later attempts and
// payouts files. From 00100 on, every package's next file takes the next
// free number (goose applies files in order: a lower number added after a
// higher one has run would be refused as missing). Up is idempotent and
// safe when several processes run it at once: it holds a PostgreSQL session
// advisory lock for the whole run.
package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed *.sql
var files embed.FS

// FS returns the embedded SQL files.
func FS() fs.FS { return files }

// advisoryLockKey serialises concurrent Up calls on one database. The value
// is arbitrary but fixed ("saldo-mg" in ASCII).
const advisoryLockKey int64 = 0x73616c646f2d6d67

// Hash identifies the schema the embedded migrations produce, together with
// River's migration set: a sha256 over every file name and content. The test
// database helper names its template database after it.
func Hash() string {
	h := sha256.New()
	names, _ := fs.Glob(files, "*.sql")
	sort.Strings(names)
	for _, n := range names {
		b, _ := files.ReadFile(n)
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	// River's migrations change only with its version, which go.mod pins;
	// include the count of River migrations so an upgrade changes the hash.
	if m, err := rivermigrate.New(riverpgxv5.New(nil), nil); err == nil {
		fmt.Fprintf(h, "river\x00%d", len(m.AllVersions()))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Result says what Up applied.
type Result struct {
	RiverApplied []int    // River migration versions applied by this run
	SaldoApplied []string // saldo migration files applied by this run
}

// lockPollEvery is how often a waiting Up asks for the advisory lock again.
const lockPollEvery = 200 * time.Millisecond

// lockPolling takes the session advisory lock on conn by asking for it
// (pg_try_advisory_lock) until it is free, never by waiting inside
// PostgreSQL: a session blocked in pg_advisory_lock holds a snapshot for as
// long as it waits, and CREATE INDEX CONCURRENTLY (00112) waits for every
// older snapshot to end while the lock's holder waits for its index. The
// lock is held by another connection of the migrating process than the
// one building the index, so PostgreSQL sees no cycle: concurrent Up calls
// hung for ever (seen with TestUpConcurrentAndIdempotent). Between two
// tries the waiting session holds no snapshot.
func lockPolling(ctx context.Context, conn *pgx.Conn) error {
	for {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", advisoryLockKey).Scan(&ok); err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(lockPollEvery):
		}
	}
}

// Up applies River's migrations and then saldo's, under a session advisory
// lock so concurrent runs queue instead of colliding. Already-applied
// migrations are skipped, so Up is idempotent.
func Up(ctx context.Context, databaseURL string, logger *slog.Logger) (Result, error) {
	var res Result
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	lockConn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return res, fmt.Errorf("migrations: connect: %w", err)
	}
	defer lockConn.Close(context.WithoutCancel(ctx))
	if err := lockPolling(ctx, lockConn); err != nil {
		return res, fmt.Errorf("migrations: advisory lock: %w", err)
	}
	defer lockConn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", advisoryLockKey) //nolint:errcheck

	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return res, fmt.Errorf("migrations: pool: %w", err)
	}
	defer pool.Close()

	rm, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return res, fmt.Errorf("migrations: river migrator: %w", err)
	}
	rres, err := rm.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return res, fmt.Errorf("migrations: river: %w", err)
	}
	for _, v := range rres.Versions {
		res.RiverApplied = append(res.RiverApplied, v.Version)
	}

	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	gp, err := goose.NewProvider(goose.DialectPostgres, db, files,
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(logger),
		// Files are numbered by owning package, so a later change to an
		// early package (00011 after 00051) applies out of order on
		// databases migrated before it existed.
		goose.WithAllowOutofOrder(true),
	)
	if err != nil {
		return res, fmt.Errorf("migrations: goose: %w", err)
	}
	results, err := gp.Up(ctx)
	if err != nil {
		return res, fmt.Errorf("migrations: saldo: %w", err)
	}
	for _, r := range results {
		res.SaldoApplied = append(res.SaldoApplied, r.Source.Path)
	}
	logger.Info("migrations applied", "river", res.RiverApplied, "saldo", res.SaldoApplied)
	return res, nil
}
