package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ledgerTables are written only by the ledger's functions (migration
// 00100): the application role reads them and calls the functions.
var ledgerTables = []string{"ledger_transactions", "ledger_postings", "ledger_accounts"}

// accountIdentityColumns are the ledger_accounts columns an application
// may give when it opens an account; balance, sequence and hash chain are
// the write functions' alone.
const accountIdentityColumns = "code, owner_kind, owner_id, purpose, currency, allow_negative"

// GrantApplicationRole gives role what `saldo serve` needs on the database
// at databaseURL, migrated by Up, and no more on the ledger: read and write
// every table of the schema except the ledger's, which it may only read,
// write through ledger_post, ledger_post_batch and ledger_lock_accounts
// (they run as the owner), and open accounts in (their identity columns
// only); read, not write, the migration tables. Run it connected as the
// tables' owner (the role that ran Up), after every Up: it grants on the
// tables that exist when it runs. It is idempotent.
//
// The role must exist, must not own the tables and must not be a
// superuser (privileges do not bind either). Roles belong to the cluster,
// not the database: whoever runs the cluster creates it (docs/runbook.md).
func GrantApplicationRole(ctx context.Context, databaseURL, role string) error {
	if role == "" {
		return fmt.Errorf("migrations: application role: empty name")
	}
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("migrations: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	var exists, super, owner bool
	var schema string
	if err := conn.QueryRow(ctx, `
		SELECT r.rolname IS NOT NULL, coalesce(r.rolsuper, false),
		       coalesce(pg_has_role(r.rolname, t.tableowner, 'USAGE'), false), current_schema()
		FROM (SELECT 1) one
		LEFT JOIN pg_roles r ON r.rolname = $1
		LEFT JOIN pg_tables t ON t.tablename = 'ledger_postings' AND t.schemaname = current_schema()`,
		role).Scan(&exists, &super, &owner, &schema); err != nil {
		return fmt.Errorf("migrations: application role %q: %w", role, err)
	}
	switch {
	case !exists:
		return fmt.Errorf("migrations: application role %q does not exist: create it first (CREATE ROLE %s LOGIN PASSWORD '...'; see docs/runbook.md)",
			role, pgx.Identifier{role}.Sanitize())
	case super:
		return fmt.Errorf("migrations: application role %q is a superuser: privileges do not bind it; serve as an ordinary role", role)
	case owner:
		return fmt.Errorf("migrations: application role %q owns the ledger's tables (or is a member of their owner): privileges do not bind it; migrate as the owner and serve as another role", role)
	}

	r := pgx.Identifier{role}.Sanitize()
	s := pgx.Identifier{schema}.Sanitize()
	ledger := ""
	for i, t := range ledgerTables {
		if i > 0 {
			ledger += ", "
		}
		ledger += pgx.Identifier{t}.Sanitize()
	}
	stmts := []string{
		fmt.Sprintf(`GRANT USAGE ON SCHEMA %s TO %s`, s, r),
		fmt.Sprintf(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %s TO %s`, s, r),
		fmt.Sprintf(`GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %s TO %s`, s, r),
		fmt.Sprintf(`GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %s TO %s`, s, r),
		// Revoking a table privilege revokes the column privileges too,
		// so the column grant below is the only INSERT left.
		fmt.Sprintf(`REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON %s FROM %s`, ledger, r),
		fmt.Sprintf(`GRANT INSERT (%s) ON ledger_accounts TO %s`, accountIdentityColumns, r),
		fmt.Sprintf(`REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON goose_db_version, river_migration FROM %s`, r),
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrations: application role: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	for _, q := range stmts {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("migrations: application role %q: %s: %w", role, q, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrations: application role %q: commit: %w", role, err)
	}
	return nil
}

// LedgerWritableByCaller says whether the role connected at db may write
// the ledger's postings or transactions directly, bypassing the write
// functions' checks (it owns them, is a superuser, or was granted the
// right): `saldo serve` warns at start when it may.
func LedgerWritableByCaller(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (bool, string, error) {
	var writable bool
	var role string
	err := db.QueryRow(ctx, `SELECT current_user,
		has_table_privilege('ledger_postings', 'INSERT') OR has_table_privilege('ledger_transactions', 'INSERT')
		OR has_table_privilege('ledger_postings', 'UPDATE') OR has_table_privilege('ledger_accounts', 'UPDATE')
		OR pg_has_role((SELECT tableowner FROM pg_tables WHERE tablename = 'ledger_postings'
		                AND schemaname = current_schema()), 'USAGE')`).Scan(&role, &writable)
	if err != nil {
		return false, "", fmt.Errorf("migrations: ledger privileges: %w", err)
	}
	return writable, role, nil
}
