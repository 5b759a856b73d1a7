package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers/sim"
)

// The deployment of docs/runbook.md, "Two database roles": `saldo migrate
// --app-role` run as the tables' owner grants the serving role everything
// but a write on the ledger's tables; it refuses a role privileges would
// not bind (missing, a superuser, the owner). `saldo serve` as that role
// starts quietly and pays; as the owner it warns that its role may write
// the ledger around its functions' checks (decision 0003). The read-only
// role reads every table but provider_identities.fingerprint_key (R16).
func TestMigrateGrantsTheServingRoleNoWriteOnTheLedger(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	ctx := context.Background()
	d := newTestDeployment(t, "saldo_roles", "app", "reader", "nobody")
	admin := d.admin
	owner, app, reader, nobody := d.roles["owner"], d.roles["app"], d.roles["reader"], d.roles["nobody"]
	ownerURL, appURL := d.url(t, "owner"), d.url(t, "app")

	migrate := func(flag, role string) (string, error) {
		cmd := exec.Command(bin, "migrate", flag, role)
		cmd.Env = append(os.Environ(), "SALDO_DATABASE_URL="+ownerURL, "SALDO_APP_ROLE=", "SALDO_READ_ONLY_ROLE=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := migrate("--app-role", app)
	require.NoError(t, err, out)
	require.Contains(t, out, "granted "+app)
	out, err = migrate("--read-only-role", reader)
	require.NoError(t, err, out)
	require.Contains(t, out, "granted "+reader)
	out, err = migrate("--app-role", app) // again, as after an upgrade
	require.NoError(t, err, out)
	var super string
	require.NoError(t, admin.QueryRow(ctx, "SELECT current_user").Scan(&super))
	for _, flag := range []string{"--app-role", "--read-only-role"} {
		for role, want := range map[string]string{
			d.db + "_missing": "does not exist",
			owner:             "owns the ledger's tables",
			super:             "is a superuser",
		} {
			out, err := migrate(flag, role)
			require.Error(t, err, role)
			require.Contains(t, out, want, role)
		}
	}

	// The serving role: no direct write on the ledger; writes through it.
	conn, err := pgx.Connect(ctx, appURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	funding, err := ledger.EnsureAccount(ctx, conn, ledger.PlatformFunding(money.BRL))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `UPDATE ledger_accounts SET balance = 100 WHERE id = $1`, funding.ID)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, pgerrcode.InsufficientPrivilege, pgErr.Code)

	_, err = ledger.Post(ctx, conn, ledger.TransactionInput{IdempotencyKey: "t1", CauseKind: "test", CauseID: "t1",
		Postings: []ledger.PostingInput{
			{AccountCode: funding.Code, Amount: decimal.RequireFromString("-1"), Currency: money.BRL},
			{AccountCode: funding.Code, Amount: decimal.RequireFromString("1"), Currency: money.BRL}}})
	require.NoError(t, err)

	// A role granted nothing may not move money through the write
	// functions (they are not PUBLIC's); the read-only role reads every
	// table, audits, and may neither write nor call them.
	callPost := `SELECT outcome FROM ledger_post('x1', 'test', 'x', '', NULL, NULL, NULL,
		ARRAY[$1, $1]::bigint[], ARRAY['', '']::text[], ARRAY[-1, 1]::numeric[], ARRAY['BRL', 'BRL'])`
	for _, c := range []struct{ role, label string }{{nobody, "nobody"}, {reader, "reader"}} {
		rc, err := pgx.Connect(ctx, d.url(t, c.label))
		require.NoError(t, err)
		for _, q := range []string{callPost, `SELECT ledger_lock_accounts(ARRAY[$1]::bigint[], NULL)`} {
			var s string
			err = rc.QueryRow(ctx, q, funding.ID).Scan(&s)
			require.ErrorAs(t, err, &pgErr, "%s: %s", c.role, q)
			require.Equal(t, pgerrcode.InsufficientPrivilege, pgErr.Code, "%s: %s", c.role, q)
		}
		var n int
		err = rc.QueryRow(ctx, `SELECT count(*) FROM ledger_postings`).Scan(&n)
		if c.role == reader {
			require.NoError(t, err)
			require.Equal(t, 2, n)
			_, err = rc.Exec(ctx, `DELETE FROM payouts`)
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, pgerrcode.InsufficientPrivilege, pgErr.Code)
		} else {
			require.ErrorAs(t, err, &pgErr)
		}
		require.NoError(t, rc.Close(ctx))
	}
	// R16: the read-only role reads provider_identities but not the key of
	// the HMAC hashed into its fingerprints, also after a re-grant (the
	// grant on all tables gives the whole table back) and a re-grant of the
	// application role; the application role reads it.
	_, err = conn.Exec(ctx, `INSERT INTO provider_identities VALUES ('sim', 'acct', repeat('a', 64), decode(repeat('00', 32), 'hex'), now(), now(), now())`)
	require.NoError(t, err)
	requireNoKey := func() {
		t.Helper()
		rc, err := pgx.Connect(ctx, d.url(t, "reader"))
		require.NoError(t, err)
		defer rc.Close(ctx)
		for _, q := range []string{`SELECT fingerprint_key FROM provider_identities`, `SELECT * FROM provider_identities`} {
			rows, err := rc.Query(ctx, q)
			if err == nil {
				rows.Close()
				err = rows.Err()
			}
			require.ErrorAs(t, err, &pgErr, q)
			require.Equal(t, pgerrcode.InsufficientPrivilege, pgErr.Code, q)
		}
		var name, account, fp string
		var at1, at2, at3 time.Time
		require.NoError(t, rc.QueryRow(ctx, `SELECT name, account, fingerprint, recorded_at, confirmed_at, fingerprint_at
			FROM provider_identities`).Scan(&name, &account, &fp, &at1, &at2, &at3))
		require.Equal(t, []string{"sim", "acct"}, []string{name, account})
	}
	requireNoKey()
	for _, flag := range []string{"--read-only-role", "--app-role"} {
		role := map[string]string{"--read-only-role": reader, "--app-role": app}[flag]
		out, err := migrate(flag, role)
		require.NoError(t, err, out)
		requireNoKey()
	}
	var key []byte
	require.NoError(t, conn.QueryRow(ctx, `SELECT fingerprint_key FROM provider_identities`).Scan(&key))
	require.Len(t, key, 32)
	audit := exec.Command(bin, "audit", "verify")
	audit.Env = append(os.Environ(), "SALDO_DATABASE_URL="+d.url(t, "reader"))
	auditOut, err := audit.CombinedOutput()
	require.NoError(t, err, "saldo audit verify as the read-only role: %s", auditOut)
	_, err = conn.Exec(ctx, `DELETE FROM provider_identities`) // serve below records its own
	require.NoError(t, err)

	srv := sim.NewServer(sim.Config{}).Start()
	defer srv.Close()
	const warning = "may write the ledger's tables directly"
	for _, c := range []struct {
		url  string
		warn bool
	}{{appURL, false}, {ownerURL, true}} {
		p := startServe(t, bin, c.url, srv.URL(), "whsec", "api,workers")
		// The check runs before the API listens, and startServe returned on
		// the "api listening" line, read after it.
		p.mu.Lock()
		logs := p.logs.String()
		p.mu.Unlock()
		require.Equal(t, c.warn, strings.Contains(logs, warning), logs)
		// River's daily REINDEX is the owner's: off for the serving role.
		require.Equal(t, !c.warn, strings.Contains(logs, "River's daily reindex is left to the owner"), logs)
		if c.warn {
			require.Contains(t, logs, owner)
		}
		require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Fatal("saldo serve did not stop")
		}
	}
}

// testDeployment is a database owned by a role of its own, with other login
// roles, made for one test on the shared server; the database and the roles
// (which belong to the cluster) are dropped when the test ends.
type testDeployment struct {
	adminURL string
	admin    *pgx.Conn
	db       string
	roles    map[string]string // label -> role name; "owner" owns db
}

// newTestDeployment makes the roles "owner" and labels (each with the
// label's first letter as its password) and a database owned by "owner".
func newTestDeployment(t *testing.T, prefix string, labels ...string) *testDeployment {
	t.Helper()
	ctx := context.Background()
	adminURL, err := testdb.ServerURL()
	require.NoError(t, err)
	admin, err := pgx.Connect(ctx, adminURL)
	require.NoError(t, err)
	// Closed after the cleanup below has dropped what the test made
	// (cleanups run last registered first; a defer would close it before).
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	d := &testDeployment{adminURL: adminURL, admin: admin, db: prefix + "_" + suffix, roles: map[string]string{}}
	labels = append([]string{"owner"}, labels...)
	for _, l := range labels {
		d.roles[l] = prefix + "_" + l + "_" + suffix
		_, err := admin.Exec(ctx, "CREATE ROLE "+d.roles[l]+" LOGIN PASSWORD '"+l[:1]+"'")
		require.NoError(t, err)
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+d.db+" OWNER "+d.roles["owner"])
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+d.db+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", d.db, err)
		}
		for i := len(labels) - 1; i >= 0; i-- {
			if _, err := admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+d.roles[labels[i]]); err != nil {
				t.Errorf("drop role %s: %v", d.roles[labels[i]], err)
			}
		}
	})
	return d
}

// url is the database's URL as the role of label.
func (d *testDeployment) url(t *testing.T, label string) string {
	t.Helper()
	u, err := url.Parse(d.adminURL)
	require.NoError(t, err)
	u.User = url.UserPassword(d.roles[label], label[:1])
	u.Path = "/" + d.db
	return u.String()
}
