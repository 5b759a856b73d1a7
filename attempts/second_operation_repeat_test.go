package attempts

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// logBuffer keeps a service's log records (JSON lines).
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// errorCount is the number of ERROR records so far.
func (l *logBuffer) errorCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range strings.Split(l.b.String(), "\n") {
		var rec struct {
			Level string `json:"level"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Level == "ERROR" {
			n++
		}
	}
	return n
}

// setupLoggedAmountOwner is setupAmountOwner whose log is kept.
func setupLoggedAmountOwner(t *testing.T) (*harness, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	h := setup(t, harnessOpts{tune: func(c *Config) { c.Logger = slog.New(slog.NewJSONHandler(logs, nil)) }})
	for _, k := range Kinds {
		h.svc.RegisterOwner(k, amountOwner{h.owner})
	}
	return h, logs
}

// R9, R19: a second operation of another amount, its divergence settled
// by an operator, then reported again, by the same webhook (a
// redelivery), another event about it and the statement: not news. Before,
// the amount check ran before the second operation's note was looked for:
// every report was ErrReportMismatch, which the webhook answers "review"
// with an ERROR log and reconciliation counts, each time. Nothing is noted,
// logged at ERROR or alerted; the settlement stays.
func TestSecondOperationOfAnotherAmountReportedAgainAfterSettlementIsNotNews_R9_R19(t *testing.T) {
	t.Parallel()
	h, logs := setupLoggedAmountOwner(t)
	a := succeededAttempt(t, h, "op_1")
	second := ResolveInput{Reference: a.Reference, State: providers.StateSucceeded, ProviderID: "op_2",
		Amount: "7.00", Currency: "BRL", Source: SourceWebhook, Actor: "evt_2"}
	_, err := h.svc.ResolveByReference(h.ctx, second)
	require.ErrorIs(t, err, ErrReportMismatch, "news the first time")
	require.Equal(t, DivergenceSecondOperation, h.get(a.ID).DivergenceKind)
	_, err = h.svc.SettleDivergence(h.ctx, a.ID, "op-1", "second transfer recovered", HoldNone)
	require.NoError(t, err)
	settled := h.get(a.ID)
	n, reviews, errs := len(h.events(a.ID)), h.reviews.Load(), logs.errorCount()
	mismatches, conflicts := testCounter(h.metrics.Mismatches), testCounter(h.metrics.Conflicts)

	for _, in := range []ResolveInput{
		second,
		{Source: SourceWebhook, Actor: "evt_2b"},
		{Source: SourceReconciliation, Actor: "run_1"},
	} {
		in.Reference, in.State, in.ProviderID, in.Amount, in.Currency = a.Reference, providers.StateSucceeded, "op_2", "7.00", "BRL"
		_, err = h.svc.ResolveByReference(h.ctx, in)
		require.NoError(t, err, "%s %s: the same second operation is not news", in.Source, in.Actor)
	}
	require.Len(t, h.events(a.ID), n, "nothing noted")
	require.Equal(t, reviews, h.reviews.Load(), "no alert")
	require.Equal(t, errs, logs.errorCount(), "nothing logged at ERROR")
	require.Equal(t, mismatches, testCounter(h.metrics.Mismatches))
	require.Equal(t, conflicts, testCounter(h.metrics.Conflicts))
	got := h.get(a.ID)
	require.Equal(t, settled.DivergenceSettledAt, got.DivergenceSettledAt)
	h.requireNoViolations()

	// Reported failed now (the second transfer returned): news, once.
	failed := second
	failed.State, failed.Actor = providers.StateFailed, "evt_2_failed"
	_, err = h.svc.ResolveByReference(h.ctx, failed)
	require.ErrorIs(t, err, ErrReportMismatch)
	m := len(h.events(a.ID))
	require.Greater(t, m, n)
	_, err = h.svc.ResolveByReference(h.ctx, failed)
	require.NoError(t, err)
	require.Len(t, h.events(a.ID), m)
}

// R9, R19: a failed second operation of another amount (a second payment
// intent for another amount declined) on a succeeded attempt, and on a
// failed one: a note naming it, once. Before, it never reached
// secondOperation: checkReport noted the mismatch, logged it at ERROR and
// counted it on every redelivery, and the webhook answered "review" each
// time. Now its note is keyed by its provider id and its repeats are not
// news. No divergence either way: it moved no money.
func TestFailedSecondOperationOfAnotherAmountIsNotedOnce_R9_R19(t *testing.T) {
	t.Parallel()
	h, logs := setupLoggedAmountOwner(t)
	ok := succeededAttempt(t, h, "op_A")
	failedAttempt := unknownAttempt(t, h)
	_, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: failedAttempt.Reference, State: providers.StateFailed,
		ProviderID: "op_F", Source: SourceWebhook, Actor: "evt_F"})
	require.NoError(t, err)

	for _, a := range []Attempt{ok, h.get(failedAttempt.ID)} {
		in := ResolveInput{Reference: a.Reference, State: providers.StateFailed, ProviderID: "op_B_" + a.ID.String(),
			Amount: "7.00", Currency: "BRL", Source: SourceWebhook, Actor: "evt_B"}
		_, err := h.svc.ResolveByReference(h.ctx, in)
		require.ErrorIs(t, err, ErrReportMismatch, "%s: news the first time", a.Status)
		n, errs, mismatches := len(h.events(a.ID)), logs.errorCount(), testCounter(h.metrics.Mismatches)
		var noted int
		require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT count(*) FROM attempt_events WHERE attempt_id = $1 AND type = 'note'
			AND evidence->>'second_provider_id' = $2`, a.ID, in.ProviderID).Scan(&noted))
		require.Equal(t, 1, noted, "%s: the second operation is noted by its provider id", a.Status)
		for _, actor := range []string{"evt_B", "evt_B2"} {
			in.Actor = actor
			_, err = h.svc.ResolveByReference(h.ctx, in)
			require.NoError(t, err, "%s: a repeat is not news", a.Status)
		}
		require.Len(t, h.events(a.ID), n, "%s: noted once", a.Status)
		require.Equal(t, errs, logs.errorCount(), "%s: logged once", a.Status)
		require.Equal(t, mismatches, testCounter(h.metrics.Mismatches))
		got := h.get(a.ID)
		require.Nil(t, got.DivergedAt, "%s: it moved no money", a.Status)
		require.Equal(t, a.Status, got.Status)
	}
	require.Zero(t, h.reviews.Load())
	h.requireNoViolations()
}
