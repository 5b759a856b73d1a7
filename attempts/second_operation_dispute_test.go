package attempts

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// RecordDispute's look-up of the attempt that records a disputed payment
// as its second operation (secondOperationHolderSQL) is served by an index
// (migration 00112's partial attempt_events_second_provider_id), not a
// scan of every attempt's events: the plan names it (sequential scans
// off, so that a few rows do not make the scan look cheaper).
func TestSecondOperationHolderLookupUsesItsIndex_R19(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	tx, err := h.pool.Begin(h.ctx)
	require.NoError(t, err)
	defer tx.Rollback(h.ctx) //nolint:errcheck
	_, err = tx.Exec(h.ctx, `SET LOCAL enable_seqscan = off`)
	require.NoError(t, err)
	rows, err := tx.Query(h.ctx, `EXPLAIN `+secondOperationHolderSQL, "stripe", "pi_second")
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.Contains(t, plan, "attempt_events_second_provider_id", plan)
}

// R9, R19: a dispute of a payment no attempt holds and no attempt records
// as its second operation is ErrNotFound (the webhook answers
// "unmatched"); one of a second operation recorded on an attempt is a note
// there, once per event, without the dispute marker, whether the attempt
// holds the divergence or has it settled; each is alerted (the conflicts
// counter, the review hook), a redelivery is not.
func TestDisputeOfASecondOperationIsNotedOnce_R9_R19(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	_, err := h.svc.RecordDispute(h.ctx, DisputeReport{Provider: "fake", ProviderID: "op_nobody", EventID: "evt_0",
		DisputeID: "dp_0", Withdrawn: true, Note: "dispute of a payment nobody knows"})
	require.ErrorIs(t, err, ErrNotFound)

	a, err := h.openKind(KindCardCharge, newSubject(), "10.50")
	require.NoError(t, err)
	_, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
		ProviderID: "op_1", Source: SourceWebhook, Actor: "evt_1"})
	require.NoError(t, err)
	_, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
		ProviderID: "op_2", Source: SourceWebhook, Actor: "evt_2"})
	require.ErrorIs(t, err, ErrProviderIDMismatch)
	diverged := h.get(a.ID)
	conflicts, reviews := testCounter(h.metrics.Conflicts), h.reviews.Load()

	for i, settle := range []bool{false, true} {
		if settle {
			_, err = h.svc.SettleDivergence(h.ctx, a.ID, "op-1", "second transfer recovered", HoldNone)
			require.NoError(t, err)
		}
		ev := []string{"evt_d1", "evt_d2"}[i]
		r := DisputeReport{Provider: "fake", ProviderID: "op_2", EventID: ev, DisputeID: "dp_1", Withdrawn: true,
			Note: "chargeback of the second payment"}
		res, err := h.svc.RecordDispute(h.ctx, r)
		require.NoError(t, err)
		require.True(t, res.SecondOperation)
		require.False(t, res.Duplicate)
		require.False(t, res.Diverged)
		require.Equal(t, a.ID, res.Attempt.ID)
		n := len(h.events(a.ID))
		require.Equal(t, conflicts+float64(i+1), testCounter(h.metrics.Conflicts), "alerted, not only logged")
		require.Equal(t, reviews+int32(i+1), h.reviews.Load(), "the review hook is called")
		res, err = h.svc.RecordDispute(h.ctx, r)
		require.NoError(t, err)
		require.True(t, res.Duplicate, "a redelivery")
		require.Len(t, h.events(a.ID), n)
		require.Equal(t, conflicts+float64(i+1), testCounter(h.metrics.Conflicts), "a redelivery alerts nobody")
		require.Equal(t, reviews+int32(i+1), h.reviews.Load())
	}
	var marked, noted int
	require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT count(*) FILTER (WHERE evidence @> $2::jsonb),
		count(*) FILTER (WHERE evidence @> '{"second_operation_dispute": true, "withdrawn": true, "dispute_id": "dp_1"}')
		FROM attempt_events WHERE attempt_id = $1 AND type = 'note'`, a.ID, WithdrawnDisputeEvidence).Scan(&marked, &noted))
	require.Zero(t, marked, "the attempt's own payment is not disputed")
	require.Equal(t, 2, noted)
	got := h.get(a.ID)
	require.Equal(t, DivergenceSecondOperation, got.DivergenceKind)
	require.Equal(t, diverged.DivergedAt, got.DivergedAt)
	require.Zero(t, h.owner.count(a.ID)-1, "nothing told to the owner again")
}
