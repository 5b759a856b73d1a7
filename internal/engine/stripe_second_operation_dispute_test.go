package engine_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
)

// logSink keeps what the engine and the API log, as JSON lines.
type logSink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// errors are the messages of the ERROR records logged so far.
func (l *logSink) errors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		var rec struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Level == "ERROR" {
			out = append(out, rec.Msg)
		}
	}
	return out
}

// records are the records logged so far whose message contains msg.
func (l *logSink) records(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(l.b.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && strings.Contains(rec["msg"].(string), msg) {
			out = append(out, rec)
		}
	}
	return out
}

// loggedDisputeAPI is disputeAPI whose logs are kept and whose alerts
// (the attempts core's OnReview) are counted.
type loggedDisputeAPI struct {
	disputeAPI
	logs   *logSink
	alerts *atomic.Int32
}

func newLoggedDisputeAPI(t *testing.T) loggedDisputeAPI {
	t.Helper()
	logs, alerts := &logSink{}, &atomic.Int32{}
	w := newPayoutAPIWith(t, "card_charge=stripe", slog.New(slog.NewJSONHandler(logs, nil)),
		func(attempts.Attempt, string) { alerts.Add(1) })
	_, err := w.pool.Exec(w.ctx, `INSERT INTO notification_endpoints (id, merchant_id, url, secret, created_at)
		VALUES ('we_00000000000000000000000000000001', 'm1', 'http://127.0.0.1:9/hook', 'whsec', now())`)
	require.NoError(t, err)
	return loggedDisputeAPI{disputeAPI: disputeAPI{w}, logs: logs, alerts: alerts}
}

// chargedTwice: Stripe holds a second PaymentIntent of minor BRL cents
// under the reference of a's charge, succeeded; its payment_intent.succeeded
// is delivered and makes the second_operation divergence. It returns the
// second PaymentIntent's id and the event.
func (w loggedDisputeAPI) chargedTwice(t *testing.T, a attempts.Attempt, minor int64) (string, []byte) {
	t.Helper()
	pi := w.fake.Seed("payment_intent", minor, "brl", a.Reference, time.Now())["id"].(string)
	ev := w.fake.Event("payment_intent.succeeded", pi)
	code, outcome := w.deliver(t, ev)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, api.WebhookReview, outcome)
	kind, err := attempts.DivergenceKind(w.ctx, w.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.DivergenceSecondOperation, kind)
	return pi, ev
}

// evidence is the evidence of the note event eventID wrote on attempt a.
func (w loggedDisputeAPI) evidence(t *testing.T, a attempts.Attempt, eventID string) map[string]any {
	t.Helper()
	var b []byte
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT evidence FROM attempt_events WHERE attempt_id = $1 AND type = 'note'
		AND actor_id = $2`, a.ID, eventID).Scan(&b))
	var ev map[string]any
	require.NoError(t, json.Unmarshal(b, &ev))
	return ev
}

func (w loggedDisputeAPI) eventCount(t *testing.T, a attempts.Attempt) int {
	t.Helper()
	var n int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM attempt_events WHERE attempt_id = $1`, a.ID).Scan(&n))
	return n
}

// R9, R19, R21: a card charged twice under one reference (a second
// PaymentIntent, a second_operation divergence on the charge's attempt),
// and the cardholder disputes the SECOND payment. Its dispute names a
// PaymentIntent no attempt holds: it was a WARN and "unmatched", and the
// operator handling the double charge never heard of it. It is now a note
// on the attempt that records that second operation (found through its
// note's second_provider_id, migration 00112's index), its evidence naming
// the second operation and the dispute, logged at ERROR; but the charge's
// own payment is not disputed: no dispute_withdrawn marker, no dispute
// divergence, the charge stays refundable. Redeliveries are duplicates.
// After the divergence was settled, the log says so.
func TestStripeDisputeOfTheSecondPaymentIsNotedOnTheAttempt_R9_R19_R21(t *testing.T) {
	t.Parallel()
	w := newLoggedDisputeAPI(t)
	c, a := w.paidCharge(t, "100.00")
	pi, _ := w.chargedTwice(t, a, 10000)

	d, opened := w.fake.OpenDispute(pi, 10000, "duplicate", false)
	dp := d["id"].(string)
	w.handled(t, opened...)
	for _, ev := range opened {
		e := w.evidence(t, a, eventID(t, ev))
		require.Equal(t, true, e["second_operation_dispute"], "%v", e)
		require.Equal(t, pi, e["second_provider_id"], "%v", e)
		require.Equal(t, dp, e["dispute_id"], "%v", e)
		require.Contains(t, e, "withdrawn")
		require.NotContains(t, e, "dispute_withdrawn", "the charge's own payment is not disputed")
		require.Contains(t, w.notes(t, a)[eventID(t, ev)], pi)
	}
	kind, err := attempts.DivergenceKind(w.ctx, w.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.DivergenceSecondOperation, kind, "no dispute divergence: the first payment is not disputed")
	recs := w.logs.records("dispute of a second operation")
	require.Len(t, recs, 2, "one ERROR per report")
	require.Equal(t, "ERROR", recs[0]["level"])
	require.Equal(t, pi, recs[0]["second_provider_id"])
	require.Equal(t, false, recs[0]["divergence_settled"])

	// Redeliveries are duplicates.
	for _, ev := range opened {
		code, outcome := w.deliver(t, ev)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, api.WebhookDuplicate, outcome)
	}
	n := w.eventCount(t, a)

	// The charge's own payment can still be refunded.
	code, p := w.refund(t, c.ID)
	require.Equal(t, http.StatusCreated, code, "%v", p)

	// The operator settles the double charge; the dispute is then won.
	_, err = w.e.Attempts.SettleDivergence(w.ctx, a.ID, "op-1", "second payment "+pi+" refunded", attempts.HoldNone)
	require.NoError(t, err)
	_, won := w.fake.CloseDispute(dp, true)
	w.handled(t, won...)
	recs = w.logs.records("dispute of a second operation whose divergence was already settled")
	require.Len(t, recs, 2)
	require.Equal(t, true, recs[0]["divergence_settled"])
	require.Empty(t, w.logs.records("disputed funds reinstated after the divergence was settled"),
		"the charge's own dispute was never settled: nothing of it came back")
	require.Greater(t, w.eventCount(t, a), n)
	var marked int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM attempt_events WHERE attempt_id = $1 AND type = 'note'
		AND evidence @> $2::jsonb`, a.ID, attempts.WithdrawnDisputeEvidence).Scan(&marked))
	require.Zero(t, marked)
	got, err := w.e.Charges.Get(w.ctx, "m1", c.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, got.Status)
}

// R9, R19: a second payment of ANOTHER amount under a charge's reference
// (70.00 under a charge of 100.00) is a second_operation divergence; the
// operator settles it. Stripe then tells of that payment again (another
// event about the same PaymentIntent, and the same event redelivered):
// not news. Before, every such event was "review" with an ERROR
// ("webhook contradicts the charge"): the amount check ran before the
// second operation's note was found. Now: no note, no ERROR, no alert.
// The same holds before the settlement, and for a second payment of the
// same amount.
func TestStripeSecondPaymentReportedAgainAfterSettlementIsNotNews_R9_R19(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		minor int64
	}{{"another amount", 7000}, {"same amount", 10000}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newLoggedDisputeAPI(t)
			_, a := w.paidCharge(t, "100.00")
			pi, first := w.chargedTwice(t, a, tc.minor)
			alerts := w.alerts.Load()
			require.EqualValues(t, 1, alerts, "the divergence's alert")

			again := func(when string) {
				n, errs := w.eventCount(t, a), len(w.logs.errors())
				code, outcome := w.deliver(t, w.fake.Event("payment_intent.succeeded", pi))
				require.Equal(t, http.StatusOK, code)
				require.Equal(t, api.WebhookHandled, outcome, "%s: the same second payment is not news (not review)", when)
				code, outcome = w.deliver(t, first)
				require.Equal(t, http.StatusOK, code)
				require.Equal(t, api.WebhookDuplicate, outcome)
				require.Equal(t, n, w.eventCount(t, a), "%s: nothing noted", when)
				require.Equal(t, errs, len(w.logs.errors()), "%s: nothing logged at ERROR: %v", when, w.logs.errors()[errs:])
				require.Equal(t, alerts, w.alerts.Load(), "%s: no alert", when)
			}
			again("before the settlement")
			_, err := w.e.Attempts.SettleDivergence(w.ctx, a.ID, "op-1", "second payment "+pi+" refunded", attempts.HoldNone)
			require.NoError(t, err)
			again("after the settlement")
			w.auditOK(t, true)
		})
	}
}
