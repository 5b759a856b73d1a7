package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers/sim"
)

// receiver is a merchant's notification endpoint.
type receiver struct {
	mu     sync.Mutex
	status int
	got    []received
	srv    *httptest.Server
}

type received struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{status: http.StatusOK}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		defer rc.mu.Unlock()
		rc.got = append(rc.got, received{header: r.Header.Clone(), body: b})
		w.WriteHeader(rc.status)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// A payout's life over HTTP: processing with its attempt timeline, then
// final; the merchant's endpoint receives a signed payout.succeeded event
// enqueued in the transaction that made it final (R24), retried until a 2xx.
func TestPayoutLifecycleAndNotifications(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	rc := newReceiver(t)
	r := e.do(req{method: http.MethodPost, path: "/v1/merchants/m1/notification-endpoints", key: e.m1,
		body: map[string]any{"url": rc.srv.URL + "/hooks"}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	secret := r.json(t)["secret"].(string)
	require.NotEmpty(t, secret)
	list := e.get("/v1/merchants/m1/notification-endpoints", e.m1)
	require.NotContains(t, string(list.Body), secret, "the secret is shown once")
	r = e.do(req{method: http.MethodPost, path: "/v1/merchants/m1/notification-endpoints", key: e.m1,
		body: map[string]any{"url": "ftp://x"}})
	require.Equal(t, http.StatusBadRequest, r.Status)

	p := e.createPix("40.00", "life-1")
	require.Equal(t, "processing", p["status"])
	id := p["id"].(string)
	v := e.get("/v1/merchants/m1/payouts/"+id, e.m1).json(t)
	require.Equal(t, "processing", v["status"])
	require.Len(t, v["attempts"], 1)

	a := e.attemptOf(p)
	res, err := e.att.Execute(e.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, res.Attempt.Status)
	v = e.get("/v1/merchants/m1/payouts/"+id, e.auditor).json(t)
	require.Equal(t, "succeeded", v["status"])
	att := v["attempts"].([]any)[0].(map[string]any)
	require.Equal(t, "succeeded", att["status"])
	require.NotEmpty(t, att["events"])

	// The attempt with its timeline, for operators and auditors.
	r = e.get("/v1/attempts/"+a.ID.String(), e.operator)
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, a.Reference, r.json(t)["reference"])
	require.Equal(t, http.StatusNotFound, e.get("/v1/attempts/not-a-uuid", e.operator).Status)

	// List with filters and a cursor.
	e.createPix("1.00", "life-2")
	e.createPix("2.00", "life-3")
	pg := e.get("/v1/merchants/m1/payouts?limit=2", e.m1).json(t)
	require.Len(t, pg["data"], 2)
	pg2 := e.get("/v1/merchants/m1/payouts?limit=2&cursor="+url.QueryEscape(pg["next_cursor"].(string)), e.m1).json(t)
	require.Len(t, pg2["data"], 1)
	require.Nil(t, pg2["next_cursor"])
	ok := e.get("/v1/merchants/m1/payouts?status=succeeded", e.m1).json(t)
	require.Len(t, ok["data"], 1)
	require.Equal(t, id, ok["data"].([]any)[0].(map[string]any)["id"])
	require.Equal(t, http.StatusBadRequest, e.get("/v1/merchants/m1/payouts?status=weird", e.m1).Status)

	// One notification recorded, with its River job, in the final transaction.
	var eventID string
	var jobs int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT id FROM notification_events WHERE object_id = $1 AND type = 'payout.succeeded'`, id).Scan(&eventID))
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM river_job WHERE kind = 'saldo_deliver_notification' AND args->>'event_id' = $1`,
		eventID).Scan(&jobs))
	require.Equal(t, 1, jobs)

	// Delivery: a failing receiver is an error (the job retries), then a 2xx.
	rc.mu.Lock()
	rc.status = http.StatusInternalServerError
	rc.mu.Unlock()
	require.Error(t, e.notif.Deliver(e.ctx, eventID))
	rc.mu.Lock()
	rc.status = http.StatusOK
	rc.mu.Unlock()
	require.NoError(t, e.notif.Deliver(e.ctx, eventID))
	require.NoError(t, e.notif.Deliver(e.ctx, eventID), "delivered events are not sent again")
	rc.mu.Lock()
	got := append([]received(nil), rc.got...)
	rc.mu.Unlock()
	require.Len(t, got, 2)
	last := got[1]
	require.Equal(t, eventID, last.header.Get(api.EventIDHeader))
	require.NoError(t, api.VerifySignature(secret, last.header.Get(api.SignatureHeader), last.body, e.clock.Now(), 5*time.Minute))
	require.ErrorIs(t, api.VerifySignature("whsec_other", last.header.Get(api.SignatureHeader), last.body, e.clock.Now(), 5*time.Minute), api.ErrSignature)
	require.ErrorIs(t, api.VerifySignature(secret, last.header.Get(api.SignatureHeader), last.body, e.clock.Now().Add(time.Hour), 5*time.Minute), api.ErrSignature)
	var ev struct {
		ID, Type string
		Data     api.PayoutJSON
	}
	require.NoError(t, json.Unmarshal(last.body, &ev))
	require.Equal(t, eventID, ev.ID)
	require.Equal(t, "payout.succeeded", ev.Type)
	require.Equal(t, id, ev.Data.ID)
	require.Equal(t, "40.00", ev.Data.Amount)
	var attemptsN int
	var delivered *time.Time
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT attempts, delivered_at FROM notification_events WHERE id = $1`, eventID).Scan(&attemptsN, &delivered))
	require.Equal(t, 2, attemptsN)
	require.NotNil(t, delivered)
}

// The operator resolves an attempt by hand (operator id = key id, reason
// and evidence recorded); a failed payout is retried with a new attempt;
// splits are created and read.
func TestOperatorResolutionRetryAndSplits(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	p := e.createPix("30.00", "op-1")
	id := p["id"].(string)
	a := e.attemptOf(p)
	// The provider answers 503 without executing: unknown, reserve held (R2, R22).
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: a.Reference}))
	res, err := e.att.Execute(e.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, res.Attempt.Status)
	require.Empty(t, e.srv.Operations(a.Reference))
	av, re := e.balances("m1", e.m1)
	require.Equal(t, []string{"970.00", "30.00"}, []string{av, re}, "an unknown attempt frees nothing")

	body := map[string]any{"status": "failed", "reason": "provider confirmed by phone: never executed",
		"evidence": map[string]any{"ticket": "PSP-991"}}
	path := "/v1/attempts/" + a.ID.String() + "/resolution"
	require.Equal(t, http.StatusForbidden, e.post(path, e.auditor, "res-1", body).Status)
	require.Equal(t, http.StatusForbidden, e.post(path, e.m1, "res-1", body).Status)
	require.Equal(t, http.StatusBadRequest, e.post(path, e.operator, "", body).Status)
	r := e.post(path, e.operator, "res-bad", map[string]any{"status": "unknown", "reason": "x"})
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "status", r.json(t)["field"])

	// Issue 13 finding 5 (R16, R22): the 503 may have been processed, and
	// before the provider's consistency window no lookup can prove it
	// absent: 409 with the reason, nothing changes.
	r = e.post(path, e.operator, "res-early", body)
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Equal(t, "manual_fail_refused", r.code(t))
	require.Contains(t, r.json(t)["detail"], "consistency window")
	av, re = e.balances("m1", e.m1)
	require.Equal(t, []string{"970.00", "30.00"}, []string{av, re}, "a refused decision frees nothing")
	// Past the window the decision is recorded again: the lookup it makes
	// finds nothing, so it is allowed.
	e.clock.Advance(10 * time.Minute)
	r = e.post(path, e.operator, "res-1", body)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	out := r.json(t)
	require.Equal(t, true, out["transitioned"])
	found := false
	for _, x := range out["attempt"].(map[string]any)["events"].([]any) {
		ev := x.(map[string]any)
		if ev["type"] == "transition" && ev["to_status"] == "failed" {
			found = true
			require.Equal(t, "operator", ev["actor"])
			require.Equal(t, e.operatorID, ev["actor_id"])
			require.Equal(t, body["reason"], ev["reason"])
			require.JSONEq(t, `{"ticket":"PSP-991"}`, mustJSON(t, ev["evidence"]))
		}
	}
	require.True(t, found)
	// A contradicting decision on a final attempt: 409, nothing changes.
	r = e.post(path, e.operator, "res-2", map[string]any{"status": "succeeded", "reason": "oops"})
	require.Equal(t, http.StatusConflict, r.Status)
	require.Equal(t, "attempt_final", r.code(t))
	av, re = e.balances("m1", e.m1)
	require.Equal(t, []string{"1000.00", "0.00"}, []string{av, re}, "released on failed")

	// Retry: a new attempt with a new key, reserved again (R6).
	r = e.post("/v1/merchants/m1/payouts/"+id+"/retry", e.m1, "retry-1", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, "processing", r.json(t)["status"])
	require.EqualValues(t, 2, r.json(t)["attempt_count"])
	r = e.post("/v1/merchants/m1/payouts/"+id+"/retry", e.m1, "retry-2", nil)
	require.Equal(t, http.StatusConflict, r.Status)
	require.Equal(t, "not_retryable", r.code(t))
	require.Equal(t, http.StatusNotFound, e.post("/v1/merchants/m1/payouts/po_nope/retry", e.m1, "retry-3", nil).Status)
	av, re = e.balances("m1", e.m1)
	require.Equal(t, []string{"970.00", "30.00"}, []string{av, re})
	require.Len(t, e.get("/v1/merchants/m1/payouts/"+id, e.m1).json(t)["attempts"], 2)

	// Splits.
	split := map[string]any{"currency": "BRL", "description": "marketplace order 77", "legs": []any{
		map[string]any{"operation": "pix_transfer", "amount": "10.00",
			"destination": map[string]any{"pix_key": map[string]any{"type": "email", "value": "a@example.com"}}},
		map[string]any{"operation": "bank_payout", "amount": "5.50",
			"destination": map[string]any{"bank_account": map[string]any{"ispb": "00000000", "branch": "0001", "account": "123456", "type": "checking"}}},
	}}
	r = e.post("/v1/merchants/m1/splits", e.m1, "split-1", split)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	sp := r.json(t)
	require.Equal(t, "15.50", sp["total"])
	require.Len(t, sp["legs"], 2)
	r = e.get("/v1/merchants/m1/splits/"+sp["id"].(string), e.auditor)
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, http.StatusNotFound, e.get("/v1/merchants/m2/splits/"+sp["id"].(string), e.m2).Status)
	r = e.get("/v1/merchants/m1/payouts?split_id="+sp["id"].(string)+"&kind=split_leg", e.m1)
	require.Len(t, r.json(t)["data"], 2)
	split["legs"] = []any{map[string]any{"operation": "pix_transfer", "amount": "1.00",
		"destination": map[string]any{"pix_key": map[string]any{"type": "cpf", "value": "11111111111"}}}}
	r = e.post("/v1/merchants/m1/splits", e.m1, "split-2", split)
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "legs[0].destination.pix_key.value", r.json(t)["field"])
	av, re = e.balances("m1", e.m1)
	require.Equal(t, []string{"954.50", "45.50"}, []string{av, re})
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// An attempt whose outcome stays unclear goes to the review queue (R18);
// the operator lists it, sees needs_attention on the payout, and resolves
// it; the queue is then empty.
func TestReviewQueue(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, func(c *attempts.Config) { c.UnansweredReviewAfter = time.Hour })
	p := e.createPix("8.00", "rq-1")
	a := e.attemptOf(p)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: a.Reference}))
	// The lookups fail twice (the resolver's, then the operator's below):
	// an hour after the first unanswered lookup the attempt is in review.
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultLookupFail, Reference: a.Reference, Times: 2}))
	res, err := e.att.Execute(e.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, res.Attempt.Status)
	for range 3 {
		e.clock.Advance(time.Hour)
		_, err := e.att.Resolve(e.ctx, a.ID)
		require.NoError(t, err)
	}
	got, err := e.att.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.True(t, got.Review, "flagged for review")

	q := e.get("/v1/review-queue?limit=10", e.operator).json(t)
	require.Len(t, q["data"], 1)
	require.Equal(t, a.ID.String(), q["data"].([]any)[0].(map[string]any)["id"])
	require.Equal(t, true, e.get("/v1/merchants/m1/payouts/"+p["id"].(string), e.m1).json(t)["needs_attention"])
	require.Equal(t, http.StatusBadRequest, e.get("/v1/review-queue?cursor=garbage", e.operator).Status)

	// Issue 13 finding 5 (R16): failed needs a lookup past the window that
	// came back not found; the operator's own lookup fails: 409, retry later.
	r := e.post("/v1/attempts/"+a.ID.String()+"/resolution", e.operator, "rq-res-0",
		map[string]any{"status": "failed", "reason": "statement of the day has no such transfer"})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Equal(t, "manual_fail_refused", r.code(t))
	require.Contains(t, r.json(t)["detail"], "inconclusive")
	r = e.post("/v1/attempts/"+a.ID.String()+"/resolution", e.operator, "rq-res",
		map[string]any{"status": "failed", "reason": "statement of the day has no such transfer"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Empty(t, e.get("/v1/review-queue", e.auditor).json(t)["data"])
	v := e.get("/v1/merchants/m1/payouts/"+p["id"].(string), e.m1).json(t)
	require.Equal(t, "failed", v["status"])
	require.Equal(t, false, v["needs_attention"])
}
