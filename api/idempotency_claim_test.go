package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers/sim"
)

// One Idempotency-Key, one effect (R4, R5; never redo blindly): a request
// deletes or completes its idempotency row only while the claim is still its
// own (claim_token, migrations/00052). When a retry took the key over after
// the lease (the first request was slow, not dead) and the first request
// then fails, the retry's claim stays: a third request with the same key is
// told the request is in progress instead of running beside the second. On
// a route whose handler has no domain key of its own (notification
// endpoints, keys, merchants) it would otherwise create a second object.
func TestFailedRequestReleasesATakenOverClaim(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	path := "/v1/merchants/m1/notification-endpoints"
	body := map[string]any{"url": "https://example.com/hook"}
	hdr := map[string]string{"Idempotency-Key": "ep-1"}

	// Hold inserts into notification_endpoints (reads go on).
	blocker, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer blocker.Rollback(e.ctx) //nolint:errcheck
	_, err = blocker.Exec(e.ctx, `LOCK TABLE notification_endpoints IN SHARE MODE`)
	require.NoError(t, err)
	waiting := func(n int) func() bool {
		return func() bool {
			var k int
			// Waiting on the table lock at its INSERT, or on the merchant's
			// row the first request holds (the endpoint limit's lock).
			_ = e.pool.QueryRow(e.ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
				AND (query LIKE '%notification_endpoints%' OR query LIKE 'SELECT 1 FROM merchants WHERE id = $1 FOR UPDATE')`).Scan(&k)
			return k == n
		}
	}
	send := func() chan resp {
		ch := make(chan resp, 1)
		go func() {
			r, _ := e.exchange(req{method: http.MethodPost, path: path, key: e.m1, body: body, header: hdr})
			ch <- r
		}()
		return ch
	}
	a := send() // claims ep-1, blocks on its INSERT
	require.Eventually(t, waiting(1), 30*time.Second, 5*time.Millisecond)
	e.clock.Advance(2 * time.Minute) // A's lease passes while A is still running
	b := send()                      // takes ep-1 over, blocks too
	require.Eventually(t, waiting(2), 30*time.Second, 5*time.Millisecond)

	// A's connection is cut: A answers 5xx and releases its claim, which
	// is B's now: nothing is released.
	_, err = e.pool.Exec(e.ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
		AND query LIKE 'INSERT INTO notification_endpoints%' ORDER BY query_start LIMIT 1`)
	require.NoError(t, err)
	ra := <-a
	require.GreaterOrEqual(t, ra.Status, 500, string(ra.Body))

	// Same key again while B still runs: C is not let in (the reviewer's
	// version waited here for C's INSERT, which is the defect).
	rc := <-send()
	require.Equal(t, http.StatusConflict, rc.Status, "a third request ran beside the retry: %s", rc.Body)
	require.Equal(t, "request_in_progress", rc.code(t))
	require.Eventually(t, waiting(1), 30*time.Second, 5*time.Millisecond, "only B is inserting")

	require.NoError(t, blocker.Rollback(e.ctx))
	rb := <-b
	require.Equal(t, http.StatusCreated, rb.Status, string(rb.Body))
	t.Logf("A %d, B %d, C %d", ra.Status, rb.Status, rc.Status)
	var n int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM notification_endpoints WHERE merchant_id = 'm1'`).Scan(&n))
	require.Equal(t, 1, n, "one Idempotency-Key made %d endpoints", n)

	// B's answer is the one kept: a later retry replays it.
	rd := <-send()
	require.Equal(t, http.StatusCreated, rd.Status, string(rd.Body))
	require.Equal(t, "true", rd.Header.Get("Idempotent-Replayed"))
	require.Equal(t, rb.json(t)["id"], rd.json(t)["id"])
}

// A request that outlived its lease does not overwrite the answer of the
// retry that took its key over: the retry's claim, and its answer, are
// kept. On a route that completes its row in its own transaction (a
// notification endpoint: completeIdempotentInTx) the slow request creates
// nothing either: it finds the claim gone and rolls back, 409
// request_in_progress (it answered 201 and made a second endpoint before).
func TestSlowRequestDoesNotOverwriteATakenOverClaim(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	path := "/v1/merchants/m1/notification-endpoints"
	body := map[string]any{"url": "https://example.com/hook"}
	hdr := map[string]string{"Idempotency-Key": "ep-2"}

	blocker, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer blocker.Rollback(e.ctx) //nolint:errcheck
	_, err = blocker.Exec(e.ctx, `LOCK TABLE notification_endpoints IN SHARE MODE`)
	require.NoError(t, err)
	var k int
	waiting := func() bool {
		_ = e.pool.QueryRow(e.ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
			AND query LIKE 'INSERT INTO notification_endpoints%'`).Scan(&k)
		return k == 1
	}
	a := make(chan resp, 1)
	go func() {
		r, _ := e.exchange(req{method: http.MethodPost, path: path, key: e.m1, body: body, header: hdr})
		a <- r
	}()
	require.Eventually(t, waiting, 30*time.Second, 5*time.Millisecond)
	e.clock.Advance(2 * time.Minute)
	// The key is taken over by a retry (its claim row's token replaced, as
	// claimIdempotencyKey does), which here is still running.
	_, err = e.pool.Exec(e.ctx, `UPDATE idempotent_requests SET claim_token = 'retry', lease_until = now() + interval '1 hour'
		WHERE idem_key = 'ep-2'`)
	require.NoError(t, err)
	require.NoError(t, blocker.Rollback(e.ctx))
	ra := <-a
	require.Equal(t, http.StatusConflict, ra.Status, string(ra.Body))
	require.Equal(t, "request_in_progress", ra.code(t))
	var n int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM notification_endpoints WHERE merchant_id = 'm1'`).Scan(&n))
	require.Zero(t, n, "the request that lost its claim made an endpoint")
	var state, token string
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT state, claim_token FROM idempotent_requests WHERE idem_key = 'ep-2'`).Scan(&state, &token))
	require.Equal(t, "running", state, "the slow request completed the retry's claim")
	require.Equal(t, "retry", token)
}
