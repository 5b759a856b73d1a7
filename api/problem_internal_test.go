package api

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// A database that cannot be reached, restarts or cuts the connection is an
// outage the client can wait out, not a defect: 503 with Retry-After, and a
// detail that says the request may have taken effect (a lost COMMIT answer)
// so the client asks again with its key. Issue 17's chaos run saw these as
// 500s. Client mistakes keep their 4xx.
func TestDatabaseOutageIs503WithRetryAfter(t *testing.T) {
	t.Parallel()
	s := &Server{log: slog.New(slog.DiscardHandler)}
	for name, err := range map[string]error{
		"cut mid-answer":    fmt.Errorf("ledger: batch of 1: %w", io.ErrUnexpectedEOF),
		"closed connection": fmt.Errorf("payouts: %w", pgconn.ErrConnClosed),
		"starting up":       &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"},
		"admin shutdown":    &pgconn.PgError{Code: "57P01"},
		"connection class":  &pgconn.PgError{Code: "08006"},
	} {
		w := httptest.NewRecorder()
		s.problem(w, httptest.NewRequest(http.MethodPost, "/v1/merchants/m1/payouts", nil), err)
		require.Equal(t, http.StatusServiceUnavailable, w.Code, name)
		require.Equal(t, "1", w.Header().Get("Retry-After"), name)
		require.Contains(t, w.Body.String(), "database_unavailable", name)
		require.Contains(t, w.Body.String(), "same Idempotency-Key", name)
	}
	// Not an outage: a constraint violation stays a 500 (a defect), a
	// truncated JSON body a 400.
	require.Equal(t, http.StatusInternalServerError, problemFor(&pgconn.PgError{Code: "23505"}).Status)
	require.Equal(t, http.StatusBadRequest, problemFor(decodeStrict([]byte(`{"amount":`), &struct {
		Amount string `json:"amount"`
	}{})).Status)
	require.False(t, databaseUnavailable(errors.New("something else")))
}
