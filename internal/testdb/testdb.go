// Package testdb gives every test its own fully migrated PostgreSQL database.
//
// The server is found once per test process, in this order:
//
//  1. TEST_DATABASE_URL, if set (a superuser or a role that can CREATE DATABASE);
//  2. PostgreSQL on 127.0.0.1:5432 as user postgres (trust auth);
//  3. a throwaway cluster started from the local PostgreSQL binaries (as the
//     postgres user when running as root), kept in $TMPDIR/saldo-testpg-<uid>
//     and reused by later test processes;
//  4. testcontainers-go's postgres module, when a Docker engine answers.
//
// If none works the test fails with a message saying what to install: a
// database test is never skipped silently.
//
// The first test migrates a template database (named after migrations.Hash,
// so a changed migration builds a new one); each test then gets a clone of it
// (CREATE DATABASE ... TEMPLATE), which takes milliseconds, so tests run in
// parallel. pgtestdb does the template bookkeeping, safely across processes.
package testdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for pgtestdb
	"github.com/peterldowns/pgtestdb"

	"github.com/saldo/saldo/internal/pgcluster"
	"github.com/saldo/saldo/migrations"
)

var (
	serverOnce sync.Once
	serverURL  string
	serverErr  error
)

// ServerURL returns the admin URL of the PostgreSQL server tests use, finding
// or starting one on first call.
func ServerURL() (string, error) {
	serverOnce.Do(func() { serverURL, serverErr = findServer(context.Background()) })
	return serverURL, serverErr
}

func findServer(ctx context.Context) (string, error) {
	var tried []string
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		if err := ping(ctx, u); err != nil {
			return "", fmt.Errorf("testdb: TEST_DATABASE_URL is set but unusable: %w", err)
		}
		return u, nil
	}
	const local = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	if err := ping(ctx, local); err == nil {
		return local, nil
	} else {
		tried = append(tried, "127.0.0.1:5432: "+err.Error())
	}
	if u, err := localCluster(ctx); err == nil {
		return u, nil
	} else {
		tried = append(tried, "local binaries: "+err.Error())
	}
	if u, err := container(ctx); err == nil {
		return u, nil
	} else {
		tried = append(tried, "testcontainers: "+err.Error())
	}
	msg := "testdb: no PostgreSQL available for tests. Set TEST_DATABASE_URL, run PostgreSQL on 127.0.0.1:5432 " +
		"(user postgres, trust auth), install the PostgreSQL server binaries (apt-get install postgresql), or start Docker. Tried:"
	for _, t := range tried {
		msg += "\n  - " + t
	}
	return "", errors.New(msg)
}

func ping(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// localCluster starts (or reuses) a cluster shared by every test process of
// this user, serialised by a file lock.
func localCluster(ctx context.Context) (string, error) {
	if _, err := pgcluster.FindBinaries(); err != nil {
		return "", err
	}
	dir := filepath.Join(os.TempDir(), "saldo-testpg-"+strconv.Itoa(os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Reuse: true})
	if err != nil {
		return "", err
	}
	return c.URL("postgres"), nil
}

func container(ctx context.Context) (string, error) {
	// The container lives as long as the test process; testcontainers'
	// reaper removes it afterwards.
	u, _, err := pgcluster.StartContainer(ctx)
	return u, err
}

// AppRole is the role tests connect as: an ordinary role granted what
// `saldo serve` needs by migrations.GrantApplicationRole, as in a
// deployment with two roles (docs/runbook.md). It may read the ledger's
// tables but write them only through the ledger's functions, so the whole
// suite shows that saldo works with those privileges. The tables belong to
// pgtestdb's role, which migrated them; AdminURL gives a superuser.
const AppRole = "saldo_test_app"

const appRolePassword = "saldo_test_app"

var (
	appRoleOnce sync.Once
	appRoleErr  error
)

// ensureAppRole creates AppRole on the server once (roles belong to the
// cluster); concurrent test processes may race to create it.
func ensureAppRole(ctx context.Context) error {
	appRoleOnce.Do(func() {
		u, err := ServerURL()
		if err != nil {
			appRoleErr = err
			return
		}
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			appRoleErr = fmt.Errorf("testdb: connect to create %s: %w", AppRole, err)
			return
		}
		defer conn.Close(context.WithoutCancel(ctx))
		_, err = conn.Exec(ctx, fmt.Sprintf(`DO $$
			BEGIN
				CREATE ROLE %s LOGIN PASSWORD '%s' NOSUPERUSER NOCREATEDB NOCREATEROLE;
			EXCEPTION WHEN duplicate_object OR unique_violation THEN
				NULL;
			END $$`, AppRole, appRolePassword))
		if err != nil {
			appRoleErr = fmt.Errorf("testdb: create role %s: %w", AppRole, err)
		}
	})
	return appRoleErr
}

// migrator builds the template with migrations.Up, then grants AppRole.
type migrator struct{}

// Hash names the template: the schema's hash, and this helper's grants.
func (migrator) Hash() (string, error) { return migrations.Hash() + "-app3", nil }

func (migrator) Migrate(ctx context.Context, _ *sql.DB, conf pgtestdb.Config) error {
	if _, err := migrations.Up(ctx, conf.URL(), nil); err != nil {
		return err
	}
	if err := ensureAppRole(ctx); err != nil {
		return err
	}
	// Exactly saldo serve's rights: no CREATE on the schema either (tests
	// make their own tables with CreateTables).
	return migrations.GrantApplicationRole(ctx, conf.URL(), AppRole)
}

// CreateTables runs ddl, which creates tables of a test's own (fixtures,
// probes), as the server's admin in pool's database, then makes pool's
// role the owner of each named table. The application role may not create
// objects in the ledger's schema (migrations.GrantApplicationRole), so
// tests connected as it make their tables this way.
func CreateTables(t testing.TB, pool *pgxpool.Pool, ddl string, tables ...string) {
	t.Helper()
	ctx := context.Background()
	var role string
	if err := pool.QueryRow(ctx, `SELECT current_user`).Scan(&role); err != nil {
		t.Fatalf("testdb: create tables: %v", err)
	}
	c, err := pgx.Connect(ctx, AdminURL(t, pool))
	if err != nil {
		t.Fatalf("testdb: create tables: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, ddl); err != nil {
		t.Fatalf("testdb: create tables: %v", err)
	}
	for _, table := range tables {
		if _, err := c.Exec(ctx, `ALTER TABLE `+pgx.Identifier{table}.Sanitize()+` OWNER TO `+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Fatalf("testdb: create tables: %s: %v", table, err)
		}
	}
}

func config(t testing.TB) pgtestdb.Config {
	t.Helper()
	u, err := ServerURL()
	if err != nil {
		t.Fatalf("%v", err)
	}
	pc, err := pgx.ParseConfig(u)
	if err != nil {
		t.Fatalf("testdb: parse server URL: %v", err)
	}
	opts := url.Values{}
	opts.Set("sslmode", "disable")
	return pgtestdb.Config{
		DriverName:                "pgx",
		Host:                      pc.Host,
		Port:                      strconv.Itoa(int(pc.Port)),
		User:                      pc.User,
		Password:                  pc.Password,
		Database:                  pc.Database,
		Options:                   opts.Encode(),
		ForceTerminateConnections: true,
	}
}

// NewURL creates a fresh migrated database for t and returns its URL. It is
// dropped when t ends (kept if t failed, so it can be inspected). The role is
// AppRole, like the one saldo serves as in production: not the tables'
// owner, and with no write on the ledger's tables.
func NewURL(t testing.TB) string {
	t.Helper()
	c := pgtestdb.Custom(t, config(t), migrator{})
	c.User, c.Password = AppRole, appRolePassword
	return c.URL()
}

// OwnerURL returns a URL to the same database as pool as the role that
// owns its tables (and ran its migrations): what `saldo migrate` connects
// as in a deployment with two roles.
func OwnerURL(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	c := config(t)
	role := pgtestdb.DefaultRole()
	u := url.URL{Scheme: "postgres", Host: c.Host + ":" + c.Port, Path: "/" + pool.Config().ConnConfig.Database,
		RawQuery: c.Options, User: url.UserPassword(role.Username, role.Password)}
	return u.String()
}

// AppURL returns databaseURL with AppRole as its user (created on the
// server if missing): for tests that migrate a database of their own and
// grant AppRole on it (migrations.GrantApplicationRole) themselves.
func AppURL(t testing.TB, databaseURL string) string {
	t.Helper()
	if err := ensureAppRole(context.Background()); err != nil {
		t.Fatalf("%v", err)
	}
	u, err := url.Parse(databaseURL)
	if err != nil {
		t.Fatalf("testdb: parse %q: %v", databaseURL, err)
	}
	u.User = url.UserPassword(AppRole, appRolePassword)
	return u.String()
}

// New creates a fresh migrated database for t and returns a pool on it,
// closed when t ends.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), NewURL(t))
	if err != nil {
		t.Fatalf("testdb: connect: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// AdminURL returns a superuser URL to the same database as pool, for tests
// that must break things on purpose (disable triggers, tamper with rows).
func AdminURL(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	c := config(t)
	db := pool.Config().ConnConfig.Database
	u := url.URL{Scheme: "postgres", Host: c.Host + ":" + c.Port, Path: "/" + db, RawQuery: c.Options}
	if c.Password != "" {
		u.User = url.UserPassword(c.User, c.Password)
	} else {
		u.User = url.User(c.User)
	}
	return u.String()
}
