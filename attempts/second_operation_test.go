package attempts

import (
	"context"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// divergenceRecorder is the test owner told of divergences too
// (DivergenceOwner): the kind each divergence was recorded with, read in
// the transaction that records it.
type divergenceRecorder struct {
	*ownerRecorder
	mu    sync.Mutex
	kinds map[uuid.UUID][]string
}

func (o *divergenceRecorder) AttemptDiverged(ctx context.Context, tx pgx.Tx, a Attempt) error {
	kind, err := DivergenceKind(ctx, tx, a.ID)
	if err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.kinds[a.ID] = append(o.kinds[a.ID], kind)
	return nil
}

func (o *divergenceRecorder) told(id uuid.UUID) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.kinds[id]...)
}

// setupDivergenceOwner is setup with an owner told of divergences.
func setupDivergenceOwner(t *testing.T) (*harness, *divergenceRecorder) {
	h := setup(t, harnessOpts{})
	rec := &divergenceRecorder{ownerRecorder: h.owner, kinds: map[uuid.UUID][]string{}}
	for _, k := range Kinds {
		h.svc.RegisterOwner(k, rec)
	}
	return h, rec
}

// succeededAttempt is an attempt the provider reported succeeded as
// provider operation pid.
func succeededAttempt(t *testing.T, h *harness, pid string) Attempt {
	t.Helper()
	a := unknownAttempt(t, h)
	r, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
		ProviderID: pid, Source: SourceWebhook, Actor: "evt_first"})
	require.NoError(t, err)
	require.True(t, r.Transitioned)
	return r.Attempt
}

// A Pix cob paid twice, or a transfer made twice: the provider reports a
// second operation (another provider id) succeeded under the reference of
// an attempt that already succeeded with the first. Someone was paid or
// charged twice: it is a divergence of kind second_operation (R9, R19),
// not a note nobody is asked to act on. The status, the provider id and
// the ledger stay (the owner's final effect happened once); the attempt is
// in the review queue with an alert, its owner is told (the merchant's
// *.diverged, needs_attention), saldo_attempts_divergences_total counts it
// and Verify reports it until an operator settles it. The same report
// again (a redelivery, a lookup naming it) changes nothing; a repeat of
// the first operation's report notes nothing.
func TestSecondOperationOnASucceededAttemptIsADivergence_R9_R19(t *testing.T) {
	t.Parallel()
	h, rec := setupDivergenceOwner(t)
	const first, second = "E12345678202009091221aaaaaaaaaaa", "E12345678202009091221bbbbbbbbbbb"
	a := succeededAttempt(t, h, first)
	before := len(h.events(a.ID))
	reviews := h.reviews.Load()

	r, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
		ProviderID: second, Source: SourceWebhook, Actor: "pix:E2"})
	require.ErrorIs(t, err, ErrProviderIDMismatch, "the webhook answers review")
	require.False(t, r.Transitioned)
	got := h.get(a.ID)
	require.Equal(t, StatusSucceeded, got.Status, "finals never change (R9)")
	require.Equal(t, first, got.ProviderID)
	require.NotNil(t, got.DivergedAt, "a second operation is a divergence")
	require.Contains(t, got.Divergence, second)
	require.Contains(t, got.Divergence, "second operation")
	require.True(t, got.Review)
	kind, err := DivergenceKind(h.ctx, h.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, DivergenceSecondOperation, kind)
	require.Equal(t, []string{DivergenceSecondOperation}, rec.told(a.ID), "the owner is told, with the kind")
	require.Equal(t, []string{"succeeded"}, h.ownerEffects(a.ID), "nothing moved: the final effect happened once")
	require.Equal(t, float64(1), testCounter(h.metrics.Divergences))
	require.Equal(t, reviews+1, h.reviews.Load(), "an alert")
	evs := h.events(a.ID)
	require.Len(t, evs, before+2, "a note naming the second operation and the review")
	require.Equal(t, EventNote, evs[before].Type)
	require.Contains(t, evs[before].Reason, second)
	require.Equal(t, EventReview, evs[before+1].Type)
	q, _, err := h.svc.ReviewQueue(h.ctx, h.pool, ReviewQueueParams{})
	require.NoError(t, err)
	require.Len(t, q, 1)
	require.Equal(t, a.ID, q[0].ID)
	vs, err := Verify(h.ctx, h.pool)
	require.NoError(t, err)
	require.Len(t, vs, 1)
	require.Equal(t, "diverged", vs[0].Code)
	require.Equal(t, a.ID.String(), vs[0].AttemptID)

	// The same second operation again: a redelivered webhook, a late
	// lookup, the statement. Nothing more.
	for _, in := range []ResolveInput{
		{Source: SourceWebhook, Actor: "pix:E2"},
		{Source: SourceResolver, Actor: "lookup"},
		{Source: SourceReconciliation, Actor: "run_1"},
	} {
		in.Reference, in.State, in.ProviderID = a.Reference, providers.StateSucceeded, second
		_, err = h.svc.ResolveByReference(h.ctx, in)
		require.NoError(t, err, "%s: the same second operation is not news", in.Source)
	}
	// And the first operation's report again notes nothing.
	_, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
		ProviderID: first, Source: SourceWebhook, Actor: "evt_first"})
	require.NoError(t, err)
	require.Len(t, h.events(a.ID), before+2)
	require.Equal(t, got.DivergedAt, h.get(a.ID).DivergedAt)
	require.Equal(t, float64(1), testCounter(h.metrics.Divergences))
	require.Equal(t, reviews+1, h.reviews.Load())
	require.Len(t, rec.told(a.ID), 1)

	// An operator books the return and settles it: Verify is clean.
	_, err = h.svc.SettleDivergence(h.ctx, a.ID, "op-1", "second Pix returned to the payer (devolucao D1)", HoldNone)
	require.NoError(t, err)
	h.requireNoViolations()
	q, _, err = h.svc.ReviewQueue(h.ctx, h.pool, ReviewQueueParams{})
	require.NoError(t, err)
	require.Empty(t, q)
}

// A third operation under the same reference while the second one's
// divergence stands (or after it was settled) never erases it (the
// evidence never changes, R9): a note naming it and an alert. Its own
// repeats add nothing.
func TestAnotherSecondOperationKeepsTheFirstDivergence_R9_R19(t *testing.T) {
	t.Parallel()
	h, rec := setupDivergenceOwner(t)
	a := succeededAttempt(t, h, "op_1")
	_, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
		ProviderID: "op_2", Source: SourceWebhook, Actor: "evt_2"})
	require.ErrorIs(t, err, ErrProviderIDMismatch)
	first := h.get(a.ID)
	require.Contains(t, first.Divergence, `"op_2"`)
	reviews := h.reviews.Load()
	before := len(h.events(a.ID))

	for i := 0; i < 2; i++ {
		_, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
			ProviderID: "op_3", Source: SourceWebhook, Actor: "evt_3"})
		if i == 0 {
			require.ErrorIs(t, err, ErrProviderIDMismatch)
		} else {
			require.NoError(t, err, "a repeat is not news")
		}
	}
	got := h.get(a.ID)
	require.Equal(t, first.DivergedAt, got.DivergedAt)
	require.Equal(t, first.Divergence, got.Divergence, "the first divergence stays")
	evs := h.events(a.ID)
	require.Len(t, evs, before+1, "one note, once")
	require.Contains(t, evs[before].Reason, `"op_3"`)
	require.Equal(t, reviews+1, h.reviews.Load(), "an alert, once")
	require.Len(t, rec.told(a.ID), 1)

	// Settled; then a fourth: noted with an alert, the settlement stays.
	_, err = h.svc.SettleDivergence(h.ctx, a.ID, "op-1", "both returned", HoldNone)
	require.NoError(t, err)
	_, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
		ProviderID: "op_4", Source: SourceWebhook, Actor: "evt_4"})
	require.ErrorIs(t, err, ErrProviderIDMismatch)
	require.Len(t, h.events(a.ID), before+3, "the settlement's event and the note")
	require.Equal(t, reviews+2, h.reviews.Load())
	require.NotNil(t, h.get(a.ID).DivergenceSettledAt)
}

// A second operation of another amount is money moved twice all the same:
// the amount mismatch is noted, and the divergence recorded. The next
// report of it (the next run) is not news: nothing noted, no error.
func TestSecondOperationOfAnotherAmountIsADivergence_R9_R19(t *testing.T) {
	t.Parallel()
	h := setupAmountOwner(t)
	a := succeededAttempt(t, h, "op_1")
	_, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
		ProviderID: "op_2", Amount: "7.00", Currency: "BRL", Source: SourceReconciliation, Actor: "run_1"})
	require.ErrorIs(t, err, ErrReportMismatch)
	got := h.get(a.ID)
	require.NotNil(t, got.DivergedAt)
	kind, err := DivergenceKind(h.ctx, h.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, DivergenceSecondOperation, kind)
	n := len(h.events(a.ID))
	_, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
		ProviderID: "op_2", Amount: "7.00", Currency: "BRL", Source: SourceReconciliation, Actor: "run_2"})
	require.NoError(t, err, "the second operation is known: not a contradiction again")
	require.Len(t, h.events(a.ID), n, "the next run adds nothing")
}

// A report naming, for a succeeded attempt's reference, a provider id that
// another attempt holds (a PSP's bug, a misrouted or forged notice) is in
// front of a human like any report naming another attempt's id (R17): the
// same divergence, whose text says which attempt holds it. Nothing moves
// for either attempt.
func TestSecondOperationNamingAnotherAttemptsIDGoesToReview_R9_R17(t *testing.T) {
	t.Parallel()
	h, rec := setupDivergenceOwner(t)
	x := succeededAttempt(t, h, "op_x")
	a := succeededAttempt(t, h, "op_a")
	_, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateSucceeded,
		ProviderID: "op_x", Source: SourceWebhook, Actor: "evt_misrouted"})
	require.ErrorIs(t, err, ErrProviderIDMismatch)
	got := h.get(a.ID)
	require.NotNil(t, got.DivergedAt)
	require.True(t, got.Review)
	require.Contains(t, got.Divergence, x.ID.String(), "names the attempt that holds the id")
	require.Equal(t, "op_a", got.ProviderID)
	require.Nil(t, h.get(x.ID).DivergedAt, "the holder is not touched")
	require.Len(t, rec.told(a.ID), 1)
	q, _, err := h.svc.ReviewQueue(h.ctx, h.pool, ReviewQueueParams{})
	require.NoError(t, err)
	require.Len(t, q, 1)
	require.Equal(t, a.ID, q[0].ID)
}

// A failed attempt reported failed under another provider id: no money
// moved twice. A note, once; no divergence.
func TestSecondFailedOperationIsOnlyNoted_R9(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	a := unknownAttempt(t, h)
	_, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateFailed,
		ProviderID: "op_1", Source: SourceWebhook, Actor: "evt_1"})
	require.NoError(t, err)
	n := len(h.events(a.ID))
	for i := 0; i < 2; i++ {
		_, err = h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateFailed,
			ProviderID: "op_2", Source: SourceWebhook, Actor: "evt_2"})
		require.NoError(t, err, "nothing for a human to review")
	}
	got := h.get(a.ID)
	require.Nil(t, got.DivergedAt)
	require.Len(t, h.events(a.ID), n+1)
	require.Equal(t, float64(0), testCounter(h.metrics.Divergences))
	h.requireNoViolations()
}
