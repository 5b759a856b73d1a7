package api_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/providers/sim"
)

func (e *env) payoutCount(merchant string) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM payouts WHERE merchant_id = $1`, merchant).Scan(&n))
	return n
}

// A retry with the same key and body gets the same status and body; the
// same key with another body is 422 and runs nothing; a POST that moves
// money without a key is 400 (R4, R5 at the API edge).
func TestIdempotencyReplayAndMismatch(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})

	r := e.post("/v1/merchants/m1/pix-transfers", e.m1, "", pixBody("10.00"))
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "idempotency_key_required", r.code(t))

	// A malformed request is not stored: fixed, the same key runs.
	r = e.post("/v1/merchants/m1/pix-transfers", e.m1, "k-1", pixBody("10.001"))
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "k-1", r.Header.Get("Idempotency-Key"))

	first := e.post("/v1/merchants/m1/pix-transfers", e.m1, "k-1", pixBody("10.00"))
	require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
	require.Equal(t, "k-1", first.Header.Get("Idempotency-Key"))
	require.Empty(t, first.Header.Get(api.ReplayedHeader))

	again := e.post("/v1/merchants/m1/pix-transfers", e.m1, "k-1", pixBody("10.00"))
	require.Equal(t, first.Status, again.Status)
	require.Equal(t, string(first.Body), string(again.Body), "a replay is byte for byte the first answer")
	require.Equal(t, "true", again.Header.Get(api.ReplayedHeader))
	require.NotEmpty(t, first.Header.Get("Location"))
	require.Equal(t, first.Header.Get("Location"), again.Header.Get("Location"))
	require.Equal(t, "k-1", again.Header.Get("Idempotency-Key"))

	mismatch := e.post("/v1/merchants/m1/pix-transfers", e.m1, "k-1", pixBody("11.00"))
	require.Equal(t, http.StatusUnprocessableEntity, mismatch.Status)
	require.Equal(t, "idempotency_key_reused", mismatch.code(t))
	// Same body on another path is another request too.
	other := e.post("/v1/merchants/m1/payouts", e.m1, "k-1", map[string]any{"operation": "pix_transfer",
		"amount": "10.00", "currency": "BRL", "destination": pixBody("1")["destination"]})
	require.Equal(t, http.StatusUnprocessableEntity, other.Status)

	require.Equal(t, 1, e.payoutCount("m1"))
	av, re := e.balances("m1", e.m1)
	require.Equal(t, []string{"990.00", "10.00"}, []string{av, re}, "reserved once (R22)")

	// Keys are per API key: the same Idempotency-Key from another key is
	// another request (and payouts' own client key, per merchant, refuses a
	// different body with the same key).
	r = e.post("/v1/merchants/m1/pix-transfers", e.admin, "k-1", pixBody("10.00"))
	require.Equal(t, http.StatusCreated, r.Status)
	require.Equal(t, first.json(t)["id"], r.json(t)["id"], "payouts' own key (per merchant) found the same payout")
	require.Equal(t, 1, e.payoutCount("m1"))

	// A domain refusal is an answer too, and replays as such.
	poor := e.post("/v1/merchants/m1/pix-transfers", e.m1, "k-poor", pixBody("5000.00"))
	require.Equal(t, http.StatusUnprocessableEntity, poor.Status)
	require.Equal(t, "insufficient_balance", poor.code(t))
	poor2 := e.post("/v1/merchants/m1/pix-transfers", e.m1, "k-poor", pixBody("5000.00"))
	require.Equal(t, string(poor.Body), string(poor2.Body))
	require.Equal(t, 1, e.payoutCount("m1"))

	// Cleanup keeps anything younger than 24h.
	n, err := e.api.CleanupIdempotency(e.ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	e.clock.Advance(24*time.Hour + time.Minute)
	n, err = e.api.CleanupIdempotency(e.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
}

// While the first request with a key is still running, a second one with
// the same key is 409 with Retry-After; once the first finished, retries
// replay it.
func TestIdempotencyConcurrent409(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	// Hold m1's payout serialisation point: the first request claims its
	// key (committed 'running' row) and then blocks on the merchant row.
	blocker, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	_, err = blocker.Exec(e.ctx, `SELECT 1 FROM merchants WHERE id = 'm1' FOR UPDATE`)
	require.NoError(t, err)
	_, err = blocker.Exec(e.ctx, `SELECT ledger_lock_accounts(ARRAY(SELECT id FROM ledger_accounts WHERE owner_kind = 'merchant' AND owner_id = 'm1'), NULL)`)
	require.NoError(t, err)

	done := make(chan resp, 1)
	go func() {
		r, err := e.exchange(req{method: http.MethodPost, path: "/v1/merchants/m1/pix-transfers", key: e.m1,
			body: pixBody("7.00"), header: map[string]string{"Idempotency-Key": "slow"}})
		if err != nil {
			r.Status = -1
			r.Body = []byte(err.Error())
		}
		done <- r
	}()
	// Wait until the first request holds its key.
	require.Eventually(t, func() bool {
		var state string
		err := e.pool.QueryRow(e.ctx, `SELECT state FROM idempotent_requests WHERE idem_key = 'slow'`).Scan(&state)
		return err == nil && state == "running"
	}, 30*time.Second, 5*time.Millisecond)
	time.Sleep(50 * time.Millisecond) // it is now blocked behind the locks

	second := e.post("/v1/merchants/m1/pix-transfers", e.m1, "slow", pixBody("7.00"))
	require.Equal(t, http.StatusConflict, second.Status, string(second.Body))
	require.Equal(t, "request_in_progress", second.code(t))
	require.Equal(t, "1", second.Header.Get("Retry-After"))
	require.Equal(t, "slow", second.Header.Get("Idempotency-Key"))

	require.NoError(t, blocker.Rollback(e.ctx))
	first := <-done
	require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
	third := e.post("/v1/merchants/m1/pix-transfers", e.m1, "slow", pixBody("7.00"))
	require.Equal(t, http.StatusCreated, third.Status)
	require.Equal(t, string(first.Body), string(third.Body))
	require.Equal(t, 1, e.payoutCount("m1"))
}

// Twenty identical POSTs at once create ONE payout and reserve once: every
// answer is the payout (201, same body) or 409 request_in_progress.
func TestIdempotencyTwentyConcurrentPOSTs(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	const n = 20
	var wg sync.WaitGroup
	results := make([]resp, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = e.exchange(req{method: http.MethodPost, path: "/v1/merchants/m1/pix-transfers", key: e.m1,
				body: pixBody("25.00"), header: map[string]string{"Idempotency-Key": "burst"}})
		}()
	}
	close(start)
	wg.Wait()
	created, conflicts := 0, 0
	var body string
	for i, r := range results {
		require.NoError(t, errs[i])
		switch r.Status {
		case http.StatusCreated:
			created++
			if body == "" {
				body = string(r.Body)
			}
			require.Equal(t, body, string(r.Body), "every 201 is the same payout")
		case http.StatusConflict:
			conflicts++
			require.Equal(t, "request_in_progress", r.code(t))
		default:
			t.Fatalf("unexpected %d: %s", r.Status, r.Body)
		}
	}
	require.GreaterOrEqual(t, created, 1)
	require.Equal(t, n, created+conflicts)
	require.Equal(t, 1, e.payoutCount("m1"), "exactly one payout")
	var attemptsN int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM attempts`).Scan(&attemptsN))
	require.Equal(t, 1, attemptsN)
	av, re := e.balances("m1", e.m1)
	require.Equal(t, []string{"975.00", "25.00"}, []string{av, re})
	t.Logf("20 concurrent identical POSTs: %d created (replays included), %d conflicts", created, conflicts)

	// And twenty DIFFERENT keys at once on a small balance never overdraw (R23).
	results = make([]resp, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = e.exchange(req{method: http.MethodPost, path: "/v1/merchants/m1/pix-transfers", key: e.m1,
				body: pixBody("100.00"), header: map[string]string{"Idempotency-Key": fmt.Sprintf("many-%d", i)}})
		}()
	}
	wg.Wait()
	ok, poor := 0, 0
	for i, r := range results {
		require.NoError(t, errs[i])
		switch r.Status {
		case http.StatusCreated:
			ok++
		case http.StatusUnprocessableEntity:
			poor++
			require.Equal(t, "insufficient_balance", r.code(t))
		default:
			t.Fatalf("unexpected %d: %s", r.Status, r.Body)
		}
	}
	require.Equal(t, 9, ok, "975.00 affords nine transfers of 100.00")
	require.Equal(t, 11, poor)
	av, re = e.balances("m1", e.m1)
	require.Equal(t, []string{"75.00", "925.00"}, []string{av, re})
}

// A request that died mid-way (its running row's lease passed) does not
// hold its key forever: a retry takes it over and runs; payouts' own
// client key makes that a replay if the first had committed.
func TestIdempotencyLeaseTakeover(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	first := e.post("/v1/merchants/m1/pix-transfers", e.m1, "crash", pixBody("3.00"))
	require.Equal(t, http.StatusCreated, first.Status)
	// Pretend the process died after the payout committed but before the
	// response was stored.
	_, err := e.pool.Exec(e.ctx, `UPDATE idempotent_requests SET state = 'running', status = NULL, response_body = NULL,
		content_type = NULL, completed_at = NULL WHERE idem_key = 'crash'`)
	require.NoError(t, err)
	r := e.post("/v1/merchants/m1/pix-transfers", e.m1, "crash", pixBody("3.00"))
	require.Equal(t, http.StatusConflict, r.Status, "within the lease it is still running")
	e.clock.Advance(2 * time.Minute)
	r = e.post("/v1/merchants/m1/pix-transfers", e.m1, "crash", pixBody("3.00"))
	require.Equal(t, http.StatusCreated, r.Status)
	require.Equal(t, first.json(t)["id"], r.json(t)["id"])
	require.Equal(t, 1, e.payoutCount("m1"))
	var state string
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT state FROM idempotent_requests WHERE idem_key = 'crash'`).Scan(&state))
	require.Equal(t, "done", state)
}

// A 5xx is not stored: the key is released and a retry runs again (here
// the payouts table is briefly unavailable).
func TestIdempotencyServerErrorNotStored(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	// Renaming a table is its owner's, not the application role's.
	owner, err := pgx.Connect(e.ctx, testdb.OwnerURL(t, e.pool))
	require.NoError(t, err)
	defer owner.Close(e.ctx)
	_, err = owner.Exec(e.ctx, `ALTER TABLE payouts RENAME TO payouts_away`)
	require.NoError(t, err)
	restore := func() { _, _ = owner.Exec(e.ctx, `ALTER TABLE IF EXISTS payouts_away RENAME TO payouts`) }
	defer restore()
	r := e.post("/v1/merchants/m1/pix-transfers", e.m1, "flaky", pixBody("4.00"))
	require.Equal(t, http.StatusInternalServerError, r.Status, string(r.Body))
	require.Equal(t, "internal", r.code(t))
	require.NotContains(t, string(r.Body), "payouts", "no internals leak")
	restore()
	var n int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM idempotent_requests WHERE idem_key = 'flaky'`).Scan(&n))
	require.Zero(t, n, "the key was released")
	r = e.post("/v1/merchants/m1/pix-transfers", e.m1, "flaky", pixBody("4.00"))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.Equal(t, 1, e.payoutCount("m1"))
}
