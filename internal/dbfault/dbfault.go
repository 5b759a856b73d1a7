// Package dbfault tells a database outage from a database answer: the API
// answers an outage 503 with Retry-After (never 500), and `saldo serve`
// waits for the database at start-up instead of exiting.
package dbfault

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unavailable reports whether err says the database could not be reached
// or the connection was lost (an outage, a restart, a cut connection), not
// that a statement was wrong. Work that met such an error may have
// committed (a lost COMMIT answer): whoever redoes it must look first.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var ce *pgconn.ConnectError
	var pgErr *pgconn.PgError
	var ne net.Error
	switch {
	case errors.As(err, &ce), errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, net.ErrClosed), errors.As(err, &ne):
		return true
	case errors.As(err, &pgErr):
		// Class 08: connection exception; 57P01-57P03: the server is
		// shutting down, crashed or starting; 53300: too many connections.
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" ||
			pgErr.Code == "57P03" || pgErr.Code == "53300"
	}
	return false
}

// Deadlock reports whether err is PostgreSQL's deadlock_detected (40P01):
// the transaction was aborted as a deadlock's victim and nothing of it
// committed, so running it again is safe.
func Deadlock(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40P01"
}
