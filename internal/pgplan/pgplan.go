// Package pgplan says how saldo sends the statements that reach a batch of
// rows by key ("id = ANY ($1)") in tables that grow: attempts, payouts,
// charges.
//
// pgx's default sends every statement as a named prepared statement. After
// five executions PostgreSQL may switch a prepared statement to a generic
// plan, made once for any arguments from the table's size at that moment,
// and it keeps that plan until the table is analyzed, vacuumed or altered.
// While a table holds a few hundred rows, the generic plan of
// "id = ANY ($1)" is a sequential scan, and PostgreSQL prefers it to custom
// plans for batches of 20 or more keys. On a fresh database without
// autovacuum (every test and bench database here), or before autovacuum
// reaches the table, the scan then stays as the table grows: under saldo
// bench payouts the final-payouts statement read the whole payouts table
// on about half its calls (docs/pitfalls.md).
//
// PerCall, passed as such a statement's first argument (pgx reads a
// QueryExecMode there), sends it as the unnamed statement with the cached
// description: still one round trip, and planned for its own arguments and
// the table's size on every call. Planning a batch statement costs a
// fraction of a millisecond, shared by the batch's rows; a sequential scan
// costs the table.
package pgplan

import "github.com/jackc/pgx/v5"

// PerCall is the first argument of a statement that must be planned on
// every call: tx.Query(ctx, sql, pgplan.PerCall, args...).
const PerCall = pgx.QueryExecModeCacheDescribe
