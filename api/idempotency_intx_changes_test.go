package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers/sim"
)

// inTxChange is a mutating route whose change has no key of its own below
// the API (a revocation, a disabling, an operator's decision, a payout's
// retry): its Idempotency-Key row is completed in the change's own
// transaction (completeIdempotentInTx).
type inTxChange struct {
	name string
	// arrange makes what the route changes and returns the request.
	arrange func(t *testing.T, e *env) (path, key string, body any)
	sql     string // a statement of the change's transaction (the proxy loses its COMMIT answer)
	table   string // the table whose write the change waits for under LOCK TABLE ... SHARE
	// lostStatus is what the request whose COMMIT answer was lost gets:
	// 503, unless the route finds out by itself that it committed.
	lostStatus int
	// changes counts how many times the change was made (path as arranged).
	changes func(t *testing.T, e *env, path string) int
	// made checks that an answer is the change's (not "already done").
	made func(t *testing.T, body map[string]any)
}

// idIn is the path's segment fromEnd places before its last:
// idIn("/v1/keys/{id}/revoke", 1) is {id}.
func idIn(path string, fromEnd int) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	return parts[len(parts)-1-fromEnd]
}

func (e *env) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, e.pool.QueryRow(e.ctx, sql, args...).Scan(&n))
	return n
}

var inTxChanges = []inTxChange{
	{name: "revoke key",
		arrange: func(t *testing.T, e *env) (string, string, any) {
			k, _, err := api.CreateKey(e.ctx, e.pool, api.RoleAuditor, "", "victim", e.clock.Now())
			require.NoError(t, err)
			return "/v1/keys/" + k.ID + "/revoke", e.admin, nil
		},
		sql: "UPDATE api_keys SET revoked_at", table: "api_keys", lostStatus: http.StatusServiceUnavailable,
		changes: func(t *testing.T, e *env, path string) int {
			return e.count(t, `SELECT count(*) FROM api_keys WHERE id = $1 AND revoked_at IS NOT NULL`, idIn(path, 1))
		},
		made: func(t *testing.T, body map[string]any) { require.NotEmpty(t, body["revoked_at"]) }},
	{name: "disable notification endpoint",
		arrange: func(t *testing.T, e *env) (string, string, any) {
			r := e.post("/v1/merchants/m1/notification-endpoints", e.m1, "", map[string]any{"url": "https://example.com/hook"})
			require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
			return "/v1/merchants/m1/notification-endpoints/" + r.json(t)["id"].(string) + "/disable", e.m1, nil
		},
		sql: "UPDATE notification_endpoints SET disabled_at", table: "notification_endpoints", lostStatus: http.StatusServiceUnavailable,
		changes: func(t *testing.T, e *env, path string) int {
			return e.count(t, `SELECT count(*) FROM notification_endpoints WHERE id = $1 AND disabled_at IS NOT NULL`, idIn(path, 1))
		},
		made: func(t *testing.T, body map[string]any) { require.NotEmpty(t, body["disabled_at"]) }},
	{name: "manual resolution",
		arrange: func(t *testing.T, e *env) (string, string, any) {
			a := e.attemptOf(e.createPix("30.00", "intx-res"))
			require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: a.Reference}))
			res, err := e.att.Execute(e.ctx, a.ID)
			require.NoError(t, err)
			require.Equal(t, attempts.StatusUnknown, res.Attempt.Status)
			return "/v1/attempts/" + a.ID.String() + "/resolution", e.operator,
				map[string]any{"status": "succeeded", "reason": "PSP dashboard shows it paid", "evidence": map[string]any{"ticket": "PSP-7"}}
		},
		sql: "UPDATE attempts SET status = $3", table: "attempts", lostStatus: http.StatusServiceUnavailable,
		changes: func(t *testing.T, e *env, path string) int {
			return e.count(t, `SELECT count(*) FROM attempt_events WHERE attempt_id = $1::uuid AND type = 'transition'
				AND actor = 'operator'`, idIn(path, 1))
		},
		made: func(t *testing.T, body map[string]any) {
			require.Equal(t, true, body["transitioned"])
			require.Equal(t, "succeeded", body["attempt"].(map[string]any)["status"])
		}},
	{name: "divergence settlement",
		arrange: func(t *testing.T, e *env) (string, string, any) {
			a := e.attemptOf(e.createPix("10.00", "intx-dv"))
			e.failThenReportPaid(t, a, "10.00", "op_late_intx")
			return "/v1/attempts/" + a.ID.String() + "/divergence-settlement", e.operator,
				map[string]any{"reason": "the PSP paid after its 503; recovered, ticket 7", "hold": "release"}
		},
		sql: "divergence_settled_at = $2", table: "attempts", lostStatus: http.StatusServiceUnavailable,
		changes: func(t *testing.T, e *env, path string) int {
			return e.count(t, `SELECT count(*) FROM attempt_events WHERE attempt_id = $1::uuid AND type = 'note'
				AND reason LIKE 'divergence settled:%'`, idIn(path, 1))
		},
		made: func(t *testing.T, body map[string]any) { require.NotEmpty(t, body["divergence_settled_at"]) }},
	{name: "reconciliation divergence resolution",
		arrange: func(t *testing.T, e *env) (string, string, any) {
			id, _ := plantUnknownToUs(t, e, "ref-intx-1")
			return "/v1/reconcile/divergences/" + id + "/resolution", e.operator, map[string]any{"reason": "a test lie"}
		},
		sql: "UPDATE reconcile_divergences SET status = 'resolved'", table: "reconcile_divergences",
		lostStatus: http.StatusServiceUnavailable,
		changes: func(t *testing.T, e *env, path string) int {
			return e.count(t, `SELECT count(*) FROM reconcile_divergences WHERE id = $1 AND status = 'resolved'`, idIn(path, 1))
		},
		made: func(t *testing.T, body map[string]any) {
			require.Equal(t, true, body["transitioned"])
			require.Equal(t, "resolved", body["divergence"].(map[string]any)["status"])
		}},
	{name: "payout retry",
		arrange: func(t *testing.T, e *env) (string, string, any) {
			p := e.createPix("20.00", "intx-retry")
			a := e.attemptOf(p)
			require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: a.Reference}))
			r, err := e.att.Execute(e.ctx, a.ID)
			require.NoError(t, err)
			require.Equal(t, attempts.StatusUnknown, r.Attempt.Status)
			e.clock.Advance(time.Hour)
			rr, err := e.att.Resolve(e.ctx, a.ID)
			require.NoError(t, err)
			require.Equal(t, attempts.StatusFailed, rr.Attempt.Status)
			return "/v1/merchants/m1/payouts/" + p["id"].(string) + "/retry", e.m1, nil
		},
		// payouts.Retry reads the payout again after an error from its
		// COMMIT and answers the retry that committed.
		sql: "UPDATE payouts SET status = 'processing'", table: "attempts", lostStatus: http.StatusOK,
		changes: func(t *testing.T, e *env, path string) int {
			return e.count(t, `SELECT count(*) - 1 FROM attempts WHERE subject_id = $1`, idIn(path, 1))
		},
		made: func(t *testing.T, body map[string]any) {
			require.Equal(t, "processing", body["status"])
			require.EqualValues(t, 2, body["attempt_count"])
		}},
}

// One Idempotency-Key, one change, and its answer, after a COMMIT whose
// answer was lost (R4, R5: after an error, ask whether it may have
// committed; never redo blindly). A revocation, a disabling, an operator's
// decision or settlement, a divergence's resolution and a payout's retry
// have no key of their own below the API: the idempotency row is completed
// in the change's transaction, so the client's retry with the same key
// replays the first answer (transitioned, settled, revoked), not "already
// done" (a 409 not_diverged or not_retryable, transitioned: false).
func TestLostCommitAnswerOnChangesWithoutDomainKeysReplays_R4_R5(t *testing.T) {
	t.Parallel()
	for _, rt := range inTxChanges {
		t.Run(rt.name, func(t *testing.T) {
			t.Parallel()
			e, proxy := setupProxiedAPI(t)
			path, key, body := rt.arrange(t, e)
			hdr := map[string]string{"Idempotency-Key": "lost-change-1"}
			send := func() resp {
				r, err := e.exchange(req{method: http.MethodPost, path: path, key: key, body: body, header: hdr})
				require.NoError(t, err)
				return r
			}
			proxy.LoseCommitAnswer(rt.sql, 1)
			r1 := send()
			require.Equal(t, 1, proxy.Cuts(), "the change's COMMIT answer was lost: %d %s", r1.Status, r1.Body)
			require.Equal(t, rt.lostStatus, r1.Status, string(r1.Body))
			if rt.lostStatus == http.StatusServiceUnavailable {
				require.Equal(t, "database_unavailable", r1.code(t))
			}
			require.Equal(t, 1, rt.changes(t, e, path), "the first request committed")

			r2 := send()
			require.Equal(t, http.StatusOK, r2.Status, "the retry ran again instead of replaying: %s", r2.Body)
			require.Equal(t, "true", r2.Header.Get(api.ReplayedHeader), string(r2.Body))
			rt.made(t, r2.json(t))
			if rt.lostStatus == http.StatusOK {
				require.Equal(t, string(r1.Body), string(r2.Body), "the replay is the first answer")
			}
			require.Equal(t, 1, rt.changes(t, e, path), "one Idempotency-Key, one change")
			r3 := send()
			require.Equal(t, string(r2.Body), string(r3.Body))
		})
	}
}

// lockWaiters is how many backends of the test's database wait for a lock.
func (e *env) lockWaiters() int {
	var n int
	_ = e.pool.QueryRow(e.ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&n)
	return n
}

// One Idempotency-Key, one change, when a request outlives its lease and a
// retry takes its key over (R4, R5): the slow request finds, in its own
// transaction, that the claim is no longer its own, rolls its change back
// and answers 409 request_in_progress; the retry's change is the one, with
// its answer, and a later retry replays it.
func TestTakenOverRequestOnChangesWithoutDomainKeysChangesNothing_R4_R5(t *testing.T) {
	t.Parallel()
	for _, rt := range inTxChanges {
		t.Run(rt.name, func(t *testing.T) {
			t.Parallel()
			e, _ := setupProxiedAPI(t)
			path, key, body := rt.arrange(t, e)
			hdr := map[string]string{"Idempotency-Key": "slow-change-1"}

			// Hold writes to the change's table (reads and row locks go on).
			blocker, err := e.pool.Begin(e.ctx)
			require.NoError(t, err)
			defer blocker.Rollback(e.ctx) //nolint:errcheck
			_, err = blocker.Exec(e.ctx, `LOCK TABLE `+rt.table+` IN SHARE MODE`)
			require.NoError(t, err)
			send := func() chan resp {
				ch := make(chan resp, 1)
				go func() {
					r, err := e.exchange(req{method: http.MethodPost, path: path, key: key, body: body, header: hdr})
					if err != nil {
						r = resp{Status: -1, Body: []byte(err.Error())}
					}
					ch <- r
				}()
				return ch
			}
			waiting := func(n int) func() bool { return func() bool { return e.lockWaiters() == n } }
			a := send() // claims the key, waits at its write
			require.Eventually(t, waiting(1), 30*time.Second, 5*time.Millisecond)
			e.clock.Advance(2 * time.Minute) // A's lease passes while A is still running
			b := send()                      // takes the key over, waits (for the table or A's row)
			require.Eventually(t, waiting(2), 30*time.Second, 5*time.Millisecond)
			require.NoError(t, blocker.Rollback(e.ctx))

			ra, rb := <-a, <-b
			require.Equal(t, http.StatusOK, rb.Status, "the retry that holds the key: %s", rb.Body)
			rt.made(t, rb.json(t))
			require.Equal(t, http.StatusConflict, ra.Status, "the request that lost its key: %s", ra.Body)
			require.Equal(t, "request_in_progress", ra.code(t))
			require.Equal(t, "1", ra.Header.Get("Retry-After"))
			require.Equal(t, 1, rt.changes(t, e, path), "one Idempotency-Key, one change")

			// B's answer is the one kept: a later retry replays it.
			rc := <-send()
			require.Equal(t, http.StatusOK, rc.Status, string(rc.Body))
			require.Equal(t, "true", rc.Header.Get(api.ReplayedHeader))
			require.Equal(t, string(rb.Body), string(rc.Body))
		})
	}
}

// domainKeyRoute is a mutating route whose effect has a key of its own
// below the API, derived from the request's Idempotency-Key (payout_requests,
// charge_requests, a funding's ledger key): the idempotency row is stored
// after the COMMIT, and the domain's key makes a rerun a replay.
type domainKeyRoute struct {
	name string
	// arrange returns the request (after making what it needs).
	arrange func(t *testing.T, e *env) (path, key string, body any)
	sql     string // a statement of the effect's transaction (the proxy loses its COMMIT answer)
	count   string // how many effects the request made
}

var domainKeyRoutes = []domainKeyRoute{
	{name: "bank payout",
		arrange: func(t *testing.T, e *env) (string, string, any) {
			return "/v1/merchants/m1/payouts", e.m1, map[string]any{"operation": "bank_payout", "amount": "12.00", "currency": "BRL",
				"destination": map[string]any{"bank_account": map[string]any{"ispb": "00000000", "branch": "0001", "account": "123456", "type": "checking"}}}
		},
		sql: "INSERT INTO payouts", count: `SELECT count(*) FROM payouts WHERE merchant_id = 'm1'`},
	{name: "pix transfer",
		arrange: func(t *testing.T, e *env) (string, string, any) {
			return "/v1/merchants/m1/pix-transfers", e.m1, pixBody("13.00")
		},
		sql: "INSERT INTO payouts", count: `SELECT count(*) FROM payouts WHERE merchant_id = 'm1'`},
	{name: "split",
		arrange: func(t *testing.T, e *env) (string, string, any) {
			return "/v1/merchants/m1/splits", e.m1, map[string]any{"currency": "BRL", "legs": []any{
				map[string]any{"operation": "pix_transfer", "amount": "10.00",
					"destination": map[string]any{"pix_key": map[string]any{"type": "email", "value": "a@example.com"}}},
				map[string]any{"operation": "pix_transfer", "amount": "5.50",
					"destination": map[string]any{"pix_key": map[string]any{"type": "email", "value": "b@example.com"}}},
			}}
		},
		sql: "INSERT INTO splits", count: `SELECT count(*) FROM splits WHERE merchant_id = 'm1'`},
	{name: "funding",
		arrange: func(t *testing.T, e *env) (string, string, any) {
			return "/v1/merchants/m1/fundings", e.admin, map[string]any{"amount": "7.00", "currency": "BRL", "reason": "top-up"}
		},
		sql: "ledger_post", count: `SELECT count(*) FROM ledger_transactions WHERE idempotency_key LIKE 'funding:m1:%:lost-domain-1'`},
	{name: "card charge",
		arrange: func(t *testing.T, e *env) (string, string, any) {
			return "/v1/merchants/m1/charges", e.m1, map[string]any{"kind": "card", "amount": "40.00", "currency": "BRL", "card_token": "tok_visa"}
		},
		sql: "INSERT INTO charges", count: `SELECT count(*) FROM charges WHERE merchant_id = 'm1'`},
	{name: "refund",
		arrange: func(t *testing.T, e *env) (string, string, any) {
			r := e.post("/v1/merchants/m1/charges", e.m1, "lost-domain-charge",
				map[string]any{"kind": "card", "amount": "50.00", "currency": "BRL", "card_token": "tok_visa"})
			require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
			c := r.json(t)
			require.Equal(t, attempts.StatusSucceeded, e.execute(c["attempt_id"].(string)).Status)
			return "/v1/merchants/m1/charges/" + c["id"].(string) + "/refunds", e.m1, map[string]any{"amount": "20.00", "currency": "BRL"}
		},
		sql: "INSERT INTO payouts", count: `SELECT count(*) FROM payouts WHERE merchant_id = 'm1' AND kind = 'refund'`},
}

// The routes whose effect has a key of its own below the API keep storing
// their answer after the COMMIT (R4, R5): after a COMMIT whose answer was
// lost, the retry with the same Idempotency-Key runs again and the domain's
// key answers it with the object that committed (201, the same object),
// never a second one; a further retry replays that answer byte for byte.
func TestLostCommitAnswerOnRoutesWithDomainKeysGetsTheSameObject_R4_R5(t *testing.T) {
	t.Parallel()
	for _, rt := range domainKeyRoutes {
		t.Run(rt.name, func(t *testing.T) {
			t.Parallel()
			e, proxy := setupProxiedAPI(t)
			path, key, body := rt.arrange(t, e)
			hdr := map[string]string{"Idempotency-Key": "lost-domain-1"}
			send := func() resp {
				r, err := e.exchange(req{method: http.MethodPost, path: path, key: key, body: body, header: hdr})
				require.NoError(t, err)
				return r
			}
			proxy.LoseCommitAnswer(rt.sql, 1)
			r1 := send()
			require.Equal(t, 1, proxy.Cuts(), "the effect's COMMIT answer was lost: %d %s", r1.Status, r1.Body)
			t.Logf("first answer: %d", r1.Status)
			require.Equal(t, 1, e.count(t, rt.count), "the first request committed")

			r2 := send()
			require.Equal(t, http.StatusCreated, r2.Status, string(r2.Body))
			if r1.Status == http.StatusCreated {
				// The domain found out by itself that it committed.
				require.Equal(t, r1.json(t)["id"], r2.json(t)["id"])
			} else {
				require.Equal(t, http.StatusServiceUnavailable, r1.Status, string(r1.Body))
				require.Equal(t, "database_unavailable", r1.code(t))
			}
			require.Equal(t, 1, e.count(t, rt.count), "one Idempotency-Key, one effect")
			r3 := send()
			require.Equal(t, string(r2.Body), string(r3.Body))
			require.Equal(t, "true", r3.Header.Get(api.ReplayedHeader))
		})
	}
}
