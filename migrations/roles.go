package migrations

import (
	"context"
	"fmt"
	"strings"

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
// write through ledger_post (and ledger_post_general, which it calls),
// ledger_post_batch and ledger_lock_accounts (they run as the owner), and
// open accounts in (their identity columns only); read, not write, the
// migration tables. Run it connected as the
// tables' owner (the role that ran Up), after every Up: it grants on the
// tables that exist when it runs. It is idempotent.
//
// The role must exist, must not own the tables and must not be a
// superuser (privileges do not bind either). Roles belong to the cluster,
// not the database: whoever runs the cluster creates it (docs/runbook.md).
func GrantApplicationRole(ctx context.Context, databaseURL, role string) error {
	ledger := strings.Join(ledgerTables, ", ")
	return grant(ctx, databaseURL, role, "application", func(s, r string) []string {
		return []string{
			fmt.Sprintf(`GRANT USAGE ON SCHEMA %s TO %s`, s, r),
			fmt.Sprintf(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %s TO %s`, s, r),
			fmt.Sprintf(`GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %s TO %s`, s, r),
			// The ledger's writers are not PUBLIC's (00101).
			fmt.Sprintf(`GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %s TO %s`, s, r),
			// Revoking a table privilege revokes the column privileges too,
			// so the column grant below is the only INSERT left.
			fmt.Sprintf(`REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON %s FROM %s`, ledger, r),
			fmt.Sprintf(`GRANT INSERT (%s) ON ledger_accounts TO %s`, accountIdentityColumns, r),
			fmt.Sprintf(`REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON goose_db_version, river_migration FROM %s`, r),
			fmt.Sprintf(`REVOKE CREATE ON SCHEMA %s FROM %s`, s, r),
		}
	})
}

// secretColumns are the columns a role that only reads must not read, by
// table: provider_identities.fingerprint_key (00105) is the HMAC key of
// the provider secret hashed into that row's fingerprint; with both, a
// reader could test guessed weak secrets offline (R16). Only the
// application role, which records identities, reads it.
var secretColumns = map[string][]string{
	"provider_identities": {"fingerprint_key"},
}

// GrantReadOnlyRole gives role SELECT on every table of the schema and
// nothing else: no write anywhere, no call of the ledger's write
// functions (they are not PUBLIC's, 00101), and no read of secretColumns
// (SELECT on those tables' other columns only, re-established on every
// run, since the grant on all tables gives the whole table back). For
// auditors and reporting (`saldo audit verify` needs no more), on the
// primary or a replica. Run it as the tables' owner, after every Up; the
// same refusals as GrantApplicationRole, and it refuses a role that may
// still read a secret column (through PUBLIC or a role it belongs to).
func GrantReadOnlyRole(ctx context.Context, databaseURL, role string) error {
	return grant(ctx, databaseURL, role, "read-only", func(s, r string) []string {
		return []string{
			fmt.Sprintf(`GRANT USAGE ON SCHEMA %s TO %s`, s, r),
			fmt.Sprintf(`GRANT SELECT ON ALL TABLES IN SCHEMA %s TO %s`, s, r),
			fmt.Sprintf(`REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON ALL TABLES IN SCHEMA %s FROM %s`, s, r),
			fmt.Sprintf(`REVOKE USAGE, UPDATE ON ALL SEQUENCES IN SCHEMA %s FROM %s`, s, r),
			fmt.Sprintf(`REVOKE EXECUTE ON FUNCTION ledger_post, ledger_post_general, ledger_post_batch, ledger_lock_accounts FROM %s`, r),
			fmt.Sprintf(`REVOKE CREATE ON SCHEMA %s FROM %s`, s, r),
		}
	})
}

// grant checks that role exists and that privileges bind it, then runs
// stmts(schema, role) in one transaction; for the read-only role, it then
// narrows SELECT on the tables of secretColumns to their other columns.
func grant(ctx context.Context, databaseURL, role, what string, stmts func(schema, role string) []string) error {
	if role == "" {
		return fmt.Errorf("migrations: %s role: empty name", what)
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
		return fmt.Errorf("migrations: %s role %q: %w", what, role, err)
	}
	switch {
	case !exists:
		return fmt.Errorf("migrations: %s role %q does not exist: create it first (CREATE ROLE %s LOGIN PASSWORD '...'; see docs/runbook.md)",
			what, role, pgx.Identifier{role}.Sanitize())
	case super:
		return fmt.Errorf("migrations: %s role %q is a superuser: privileges do not bind it; use an ordinary role", what, role)
	case owner:
		return fmt.Errorf("migrations: %s role %q owns the ledger's tables (or is a member of their owner): privileges do not bind it; migrate as the owner and connect as another role", what, role)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrations: %s role: %w", what, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	// Behind Up's lock and each other's: concurrent GRANTs on one object
	// fail ("tuple concurrently updated"), and every instance of a
	// deployment may run migrate --app-role at start.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", advisoryLockKey); err != nil {
		return fmt.Errorf("migrations: %s role: lock: %w", what, err)
	}
	for _, q := range stmts(pgx.Identifier{schema}.Sanitize(), pgx.Identifier{role}.Sanitize()) {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("migrations: %s role %q: %s: %w", what, role, q, err)
		}
	}
	if what == "read-only" {
		if err := hideSecretColumns(ctx, tx, schema, role); err != nil {
			return fmt.Errorf("migrations: %s role %q: %w", what, role, err)
		}
	}
	// A role that may create objects in the schema can plant an operator
	// or function there with an exact argument-type match (numeric =
	// integer has none in pg_catalog), which the ledger's SECURITY DEFINER
	// functions (their search path pinned to this schema) and the audit's
	// queries would then resolve and run: an unbalanced posting, run as
	// the tables' owner. Revoked from the role above; it may still come
	// from PUBLIC (PostgreSQL 14 and older granted CREATE on public to
	// PUBLIC, and pg_upgrade keeps it) or from a role it belongs to.
	var create bool
	if err := tx.QueryRow(ctx, `SELECT has_schema_privilege($1, $2, 'CREATE')`, role, schema).Scan(&create); err != nil {
		return fmt.Errorf("migrations: %s role %q: %w", what, role, err)
	}
	if create {
		return fmt.Errorf("migrations: %s role %q may create objects in schema %s (through PUBLIC, as PostgreSQL 14 and "+
			"older granted on public, or a role it belongs to): an operator or function it created there would run inside "+
			"the ledger's functions as their owner; revoke it, e.g. REVOKE CREATE ON SCHEMA %s FROM PUBLIC (see docs/runbook.md)",
			what, role, schema, pgx.Identifier{schema}.Sanitize())
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrations: %s role %q: commit: %w", what, role, err)
	}
	return nil
}

// hideSecretColumns replaces role's SELECT on each table of secretColumns
// (given back whole by GRANT SELECT ON ALL TABLES) with SELECT on its
// other columns, then checks that no secret column is left readable to
// role by another way (PUBLIC, a role it belongs to): R16.
func hideSecretColumns(ctx context.Context, tx pgx.Tx, schema, role string) error {
	r := pgx.Identifier{role}.Sanitize()
	for table, secret := range secretColumns {
		t := pgx.Identifier{schema, table}.Sanitize()
		var cols *string
		if err := tx.QueryRow(ctx, `SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute
			WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped AND attname <> ALL($2)`,
			t, secret).Scan(&cols); err != nil {
			return fmt.Errorf("columns of %s: %w", table, err)
		}
		if cols == nil { // not (yet) in this schema
			continue
		}
		// Revoking the table's SELECT revokes its column SELECTs too.
		for _, q := range []string{
			fmt.Sprintf(`REVOKE SELECT ON %s FROM %s`, t, r),
			fmt.Sprintf(`GRANT SELECT (%s) ON %s TO %s`, *cols, t, r),
		} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		for _, c := range secret {
			var readable bool
			if err := tx.QueryRow(ctx, `SELECT has_column_privilege($1, to_regclass($2), $3, 'SELECT')`,
				role, t, c).Scan(&readable); err != nil {
				return fmt.Errorf("privilege on %s.%s: %w", table, c, err)
			}
			if readable {
				return fmt.Errorf("it may still read %s.%s (through PUBLIC or a role it belongs to), the key of a "+
					"provider secret's HMAC: revoke it, e.g. REVOKE SELECT ON %s FROM PUBLIC (see docs/runbook.md)",
					table, c, t)
			}
		}
	}
	return nil
}

// Privileges are what the role connected to a database may do that saldo
// serve cares about at start.
type Privileges struct {
	Role string
	// LedgerWritable: it may write the ledger's postings or transactions
	// directly, around the write functions' checks (it owns them, is a
	// superuser, or was granted the right), or subvert those functions by
	// creating objects in their schema: saldo serve warns.
	LedgerWritable bool
	// OwnsRiver: it may reindex River's job indexes (River's daily
	// reindexer is turned off otherwise).
	OwnsRiver bool
}

// CallerPrivileges reads the connected role's Privileges in one query.
func CallerPrivileges(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (Privileges, error) {
	var p Privileges
	err := db.QueryRow(ctx, `SELECT current_user,
		has_table_privilege('ledger_postings', 'INSERT') OR has_table_privilege('ledger_transactions', 'INSERT')
		OR has_table_privilege('ledger_postings', 'UPDATE') OR has_table_privilege('ledger_accounts', 'UPDATE')
		OR coalesce(pg_has_role((SELECT tableowner FROM pg_tables WHERE tablename = 'ledger_postings'
		                         AND schemaname = current_schema()), 'USAGE'), false)
		OR has_schema_privilege((SELECT relnamespace FROM pg_class WHERE oid = 'ledger_postings'::regclass), 'CREATE'),
		coalesce(pg_has_role((SELECT tableowner FROM pg_tables WHERE tablename = 'river_job'
		                      AND schemaname = current_schema()), 'USAGE'), false)`).Scan(&p.Role, &p.LedgerWritable, &p.OwnsRiver)
	if err != nil {
		return Privileges{}, fmt.Errorf("migrations: privileges: %w", err)
	}
	return p, nil
}
