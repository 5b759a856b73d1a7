package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
)

// A handler that panics is answered 500 by the recoverer outside the
// idempotency layer; the layer releases its claim first, as after any 5xx,
// so the client's retry with the same Idempotency-Key runs again instead of
// being refused "request in progress" until the lease passes.
func TestPanicReleasesTheIdempotencyClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	_, err := pool.Exec(ctx, `INSERT INTO api_keys (id, prefix, secret_sha256, role, created_at)
		VALUES ('key_0000000000000001', 'sk_', sha256('s'::bytea), 'admin', now())`)
	require.NoError(t, err)
	s := &Server{pool: pool, clock: systemClock{}, log: slog.New(slog.DiscardHandler),
		cfg: Config{IdempotencyLease: time.Minute, MaxBodyBytes: 1 << 20}}
	calls := 0
	h := s.idempotent(true)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			panic("boom")
		}
		w.WriteHeader(http.StatusCreated)
	}))
	send := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/things", strings.NewReader(`{}`))
		r.Header.Set(IdempotencyHeader, "k-panic")
		r = r.WithContext(context.WithValue(r.Context(), principalKey{}, Principal{KeyID: "key_0000000000000001", Role: RoleAdmin}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	require.PanicsWithValue(t, "boom", func() { send() })
	var running int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM idempotent_requests WHERE idem_key = 'k-panic'`).Scan(&running))
	require.Zero(t, running, "the panicking request's claim is released")
	require.Equal(t, http.StatusCreated, send().Code, "the retry runs")
	require.Equal(t, 2, calls)
}
