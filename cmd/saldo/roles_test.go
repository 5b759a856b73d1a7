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
// the ledger around its functions' checks (decision 0003).
func TestMigrateGrantsTheServingRoleNoWriteOnTheLedger(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	ctx := context.Background()
	adminURL, err := testdb.ServerURL()
	require.NoError(t, err)
	admin, err := pgx.Connect(ctx, adminURL)
	require.NoError(t, err)
	defer admin.Close(ctx)

	b := make([]byte, 5)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	owner, app, db := "saldo_owner_"+suffix, "saldo_app_"+suffix, "saldo_roles_"+suffix
	for _, q := range []string{
		"CREATE ROLE " + owner + " LOGIN PASSWORD 'o'",
		"CREATE ROLE " + app + " LOGIN PASSWORD 'a'",
		"CREATE DATABASE " + db + " OWNER " + owner,
	} {
		_, err := admin.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
		_, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+app)
		_, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+owner)
	})
	as := func(role, password string) string {
		u, err := url.Parse(adminURL)
		require.NoError(t, err)
		u.User = url.UserPassword(role, password)
		u.Path = "/" + db
		return u.String()
	}
	ownerURL, appURL := as(owner, "o"), as(app, "a")

	migrate := func(role string) (string, error) {
		cmd := exec.Command(bin, "migrate", "--app-role", role)
		cmd.Env = append(os.Environ(), "SALDO_DATABASE_URL="+ownerURL, "SALDO_APP_ROLE=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := migrate(app)
	require.NoError(t, err, out)
	require.Contains(t, out, "granted "+app)
	out, err = migrate(app) // again, as after an upgrade
	require.NoError(t, err, out)
	for role, want := range map[string]string{
		"saldo_nobody_" + suffix: "does not exist",
		owner:                    "owns the ledger's tables",
	} {
		out, err := migrate(role)
		require.Error(t, err, role)
		require.Contains(t, out, want, role)
	}
	var super string
	require.NoError(t, admin.QueryRow(ctx, "SELECT current_user").Scan(&super))
	out, err = migrate(super)
	require.Error(t, err)
	require.Contains(t, out, "is a superuser")

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
