package attempts

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// batchOwner registers a batchRecorder as the owner of every kind.
func (h *harness) batchOwner() *batchRecorder {
	bo := newBatchRecorder()
	for _, k := range Kinds {
		h.svc.RegisterOwner(k, bo)
	}
	return bo
}

// dueUnknownAttempts makes n attempts unknown after a 500 that processed
// them, and moves the clock to their first lookup.
func dueUnknownAttempts(t *testing.T, h *harness, n int) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = unknownAttempt(t, h).ID
	}
	h.clock.Advance(30 * time.Second)
	return ids
}

// lookupCase is what one unknown attempt's lookup finds.
type lookupCase string

const (
	lcSucceeded    lookupCase = "found_succeeded"     // the 500 had processed it: succeeded (R14)
	lcFailed       lookupCase = "found_failed"        // the provider failed it: failed, owner told
	lcProcessing   lookupCase = "found_processing"    // still processing: stays unknown, processing noted
	lcAbsentPast   lookupCase = "not_found_past"      // never arrived, window passed: failed not_found (R16)
	lcAbsentWithin lookupCase = "not_found_within"    // not found inside the window: proves nothing yet
	lcAbsentAcked  lookupCase = "not_found_acked"     // not found after a webhook named it: proves nothing (R16)
	lcOtherID      lookupCase = "found_other_id"      // found under another provider id than a webhook named: review
	lcUnreachable  lookupCase = "lookup_inconclusive" // the lookup got no answer: nothing moves
	lcOtherAmount  lookupCase = "found_other_amount"  // found succeeded for another amount: review (R17)
)

var lookupCases = []lookupCase{lcSucceeded, lcFailed, lcProcessing, lcAbsentPast, lcAbsentWithin, lcAbsentAcked,
	lcOtherID, lcUnreachable, lcOtherAmount}

// amountsRecorder is a batchRecorder that knows its attempts move 10.50
// BRL (what harness.open opens), one attempt at a time (AmountOwner) and
// many at once (AmountsOwner), counting the batched reads.
type amountsRecorder struct {
	*batchRecorder
	batched atomic.Int32
}

func (*amountsRecorder) AttemptAmount(context.Context, DB, Attempt) (decimal.Decimal, string, error) {
	return decimal.RequireFromString("10.50"), "BRL", nil
}

func (o *amountsRecorder) AttemptAmounts(_ context.Context, _ DB, as []Attempt) (map[uuid.UUID]OwnedAmount, error) {
	o.batched.Add(1)
	m := make(map[uuid.UUID]OwnedAmount, len(as))
	for _, a := range as {
		m[a.ID] = OwnedAmount{Amount: decimal.RequireFromString("10.50"), Currency: "BRL"}
	}
	return m, nil
}

var _ AmountsOwner = (*amountsRecorder)(nil)

// lookupOutcome is everything about a resolved attempt that must not
// depend on whether its lookup was applied alone or in a batch.
type lookupOutcome struct {
	Case          lookupCase
	Transitioned  bool
	RetryIn       time.Duration
	Status        Status
	ProviderState string
	ProviderID    string // "", "psp" (the PSP's id for it) or "webhook" (the id a webhook named)
	FailureCode   string
	Review        bool
	LookupCount   int
	NextLookupIn  time.Duration
	ResolvedBy    string
	Processing    bool
	Events        []string
	OwnerEffects  []string
}

// providerIDKind names whose provider id the attempt holds: the PSP's
// ("psp"), the one the test's webhook named ("webhook"), none (""), or
// else the id itself.
func providerIDKind(a Attempt) string {
	switch a.ProviderID {
	case "op_" + a.Reference[:12]:
		return "psp"
	case "op_named_" + a.Reference[:8]:
		return "webhook"
	}
	return a.ProviderID
}

// lookupRun makes two unknown attempts per lookupCase, then resolves them
// all: with batch, in one resolver batch (resolveTogether) handing final
// attempts to a BatchOwner that reads amounts in batches; without, one
// Resolve after the other, each in its own transaction, with a plain
// AmountOwner: the reference path.
func lookupRun(t *testing.T, batch bool) ([]lookupOutcome, *amountsRecorder) {
	h := setup(t, harnessOpts{})
	bo := &amountsRecorder{batchRecorder: newBatchRecorder()}
	for _, k := range Kinds {
		if batch {
			h.svc.RegisterOwner(k, bo)
		} else {
			h.svc.RegisterOwner(k, amountOwner{h.owner})
		}
	}
	var cases []lookupCase
	for range 2 {
		cases = append(cases, lookupCases...)
	}
	// The window (2 minutes) has passed for every case but lcAbsentWithin,
	// whose attempts went unknown 90 s after the others.
	ids := make([]uuid.UUID, len(cases))
	makeUnknown := func(i int) {
		c := cases[i]
		plan := behave500AfterRecord
		if c == lcAbsentPast || c == lcAbsentWithin || c == lcAbsentAcked {
			plan = behave500NoRecord
		}
		h.psp.setPlan(plan)
		a := h.open(newSubject())
		r, err := h.svc.Execute(h.ctx, a.ID)
		require.NoError(t, err)
		require.Equal(t, StatusUnknown, r.Attempt.Status)
		ids[i] = a.ID
		switch c {
		case lcFailed:
			h.psp.setOp(a.Reference, "failed")
		case lcProcessing:
			h.psp.setOp(a.Reference, "processing")
		case lcOtherAmount:
			h.psp.mu.Lock()
			h.psp.ops[a.Reference].Amount = "99.00"
			h.psp.mu.Unlock()
		case lcAbsentAcked, lcOtherID:
			_, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, State: providers.StateProcessing,
				ProviderID: "op_named_" + a.Reference[:8], Source: SourceWebhook, Actor: "evt_" + a.Reference[:8]})
			require.NoError(t, err)
		}
	}
	for i, c := range cases {
		if c != lcAbsentWithin {
			makeUnknown(i)
		}
	}
	h.clock.Advance(90 * time.Second)
	for i, c := range cases {
		if c == lcAbsentWithin {
			makeUnknown(i)
		}
	}
	h.clock.Advance(60 * time.Second)

	// The provider does not answer the lcUnreachable attempts' lookups.
	live, dead := *h.prov.base.Load(), deadURL(t)
	before := func(i int) {
		if cases[i] == lcUnreachable {
			h.prov.setBase(dead)
		} else {
			h.prov.setBase(live)
		}
	}
	var results []ResolveResult
	var errs []error
	if batch {
		var err error
		results, errs, err = h.svc.resolveTogether(h.ctx, ids, before)
		require.NoError(t, err)
	} else {
		for i, id := range ids {
			before(i)
			r, err := h.svc.Resolve(h.ctx, id)
			results, errs = append(results, r), append(errs, err)
		}
	}
	h.prov.setBase(live)
	now := h.clock.Now()
	out := make([]lookupOutcome, len(ids))
	for i, id := range ids {
		require.NoError(t, errs[i], "slot %d (%s)", i, cases[i])
		a := h.get(id)
		require.Equal(t, a, results[i].Attempt, "slot %d (%s): the answer is the attempt as stored", i, cases[i])
		o := lookupOutcome{Case: cases[i], Transitioned: results[i].Transitioned, RetryIn: results[i].RetryIn,
			Status: a.Status, ProviderState: a.ProviderState, ProviderID: providerIDKind(a), FailureCode: a.FailureCode,
			Review: a.Review, LookupCount: a.LookupCount, NextLookupIn: -1, ResolvedBy: a.ResolvedBy,
			Processing: a.ProcessingFrom != nil, OwnerEffects: h.ownerEffects(id)}
		if a.NextLookupAt != nil {
			o.NextLookupIn = a.NextLookupAt.Sub(now)
		}
		for _, e := range h.events(id) {
			s := fmt.Sprintf("%s/%s", e.Type, e.Actor)
			switch e.Type {
			case EventLookup:
				s += ":" + e.Outcome
			case EventTransition:
				s += ":" + string(e.FromStatus) + "->" + string(e.ToStatus) + ":" + e.Reason
			case EventNote:
				s += ":" + strings.ReplaceAll(e.Reason, a.Reference, "<reference>")
			}
			o.Events = append(o.Events, s)
		}
		out[i] = o
	}
	h.requireNoViolations()
	return out, bo
}

// The resolver's lookups applied in one batch (resolveBatch: one
// transaction, the attempts made final handed to their BatchOwner together
// and their ledger effects posted last) end every attempt exactly as one
// Resolve at a time does: same status, provider state and id, failure,
// review flag, lookup count and schedule, events in order, owner effect
// (R14, R16, R17, R18). The BatchOwner is handed each final attempt once,
// in one AttemptsFinal call.
func TestResolveBatchMatchesOneAtATime(t *testing.T) {
	t.Parallel()
	var ref, got []lookupOutcome
	var bo *amountsRecorder
	t.Run("one_at_a_time", func(t *testing.T) { ref, _ = lookupRun(t, false) })
	t.Run("batched", func(t *testing.T) { got, bo = lookupRun(t, true) })
	require.Len(t, got, len(ref))
	for i := range ref {
		require.Equal(t, ref[i], got[i], "slot %d (%s): batched differs from one at a time", i, ref[i].Case)
	}

	// Sanity: the reference path did what the rules say.
	for _, o := range ref {
		want := map[lookupCase]Status{lcSucceeded: StatusSucceeded, lcFailed: StatusFailed, lcProcessing: StatusUnknown,
			lcAbsentPast: StatusFailed, lcAbsentWithin: StatusUnknown, lcAbsentAcked: StatusUnknown,
			lcOtherID: StatusUnknown, lcUnreachable: StatusUnknown, lcOtherAmount: StatusUnknown}[o.Case]
		require.Equal(t, want, o.Status, o.Case)
		require.Equal(t, o.Case == lcOtherID || o.Case == lcOtherAmount, o.Review, o.Case)
		require.Equal(t, 1, o.LookupCount, o.Case)
	}

	finals := 0
	for _, o := range got {
		if o.Status.Final() {
			finals++
		}
	}
	require.Equal(t, 6, finals)
	bo.requireHandedOnce(t)
	bo.mu.Lock()
	defer bo.mu.Unlock()
	require.Equal(t, []int{finals}, bo.batches, "one hand-over of every final attempt, at the end of the batch")
	require.Zero(t, bo.single)
	require.EqualValues(t, 1, bo.batched.Load(), "the found reports' amounts read in one call")
}

// If the shared lookup transaction fails (the BatchOwner refuses), nothing
// of it commits and each lookup is applied alone: every attempt ends as its
// lookup said, with one lookup event and one owner hand-over.
func TestResolveBatchFailureFallsBackOneByOne(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	bo := h.batchOwner()
	ids := dueUnknownAttempts(t, h, 6)
	bo.refuse.Store(1)
	res, errs, err := h.svc.resolveTogether(h.ctx, ids, nil)
	require.NoError(t, err)
	require.Zero(t, bo.refuse.Load(), "the shared transaction was tried and refused")
	for i, id := range ids {
		require.NoError(t, errs[i])
		require.True(t, res[i].Transitioned)
		require.Equal(t, StatusSucceeded, h.get(id).Status)
		require.Equal(t, []string{"opened", "call:unknown", "transition:pending->unknown", "lookup:found_succeeded",
			"transition:unknown->succeeded"}, eventTypes(h.events(id)), "a rolled-back batch leaves no event behind")
		require.Equal(t, []string{"succeeded"}, h.ownerEffects(id))
	}
	bo.mu.Lock()
	require.Len(t, bo.batches, len(ids), "each lookup applied alone, its attempt handed over alone")
	bo.mu.Unlock()
	h.requireNoViolations()
}

// A lookup batch's COMMIT commits but its answer is lost (docs/pitfalls.md):
// the lookups are not recorded a second time when the batch is redone one
// by one (no second lookup event, no second lookup counted, no second owner
// hand-over); each answer is the attempt as it committed (R9).
func TestAmbiguousCommitOfLookupBatchRecordsOnce_R9(t *testing.T) {
	t.Parallel()
	h, proxy := setupProxied(t)
	bo := h.batchOwner()
	ids := dueUnknownAttempts(t, h, 5)
	proxy.LoseCommitAnswer("lookup_count = a.lookup_count + 1", 1)
	res, errs, err := h.svc.resolveTogether(h.ctx, ids, nil)
	require.NoError(t, err)
	require.Equal(t, 1, proxy.Cuts(), "the batch lost its commit answer")
	for i, id := range ids {
		require.NoError(t, errs[i])
		a := h.get(id)
		require.Equal(t, a, res[i].Attempt)
		require.Equal(t, StatusSucceeded, a.Status)
		require.Equal(t, 1, a.LookupCount)
		require.Equal(t, []string{"opened", "call:unknown", "transition:pending->unknown", "lookup:found_succeeded",
			"transition:unknown->succeeded"}, eventTypes(h.events(id)))
		require.Equal(t, []string{"succeeded"}, h.ownerEffects(id))
	}
	bo.requireHandedOnce(t)
	h.requireNoViolations()
}

// Resolver jobs resolving at the same time share lookup batches through
// Resolve itself, under -race, two resolvers per attempt: every attempt
// ends succeeded, handed to its owner once.
func TestConcurrentResolvesShareBatches(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	bo := h.batchOwner()
	ids := dueUnknownAttempts(t, h, 40)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(2) // two resolvers per attempt: a duplicate job, a retry
		for range 2 {
			go func() {
				defer wg.Done()
				_, err := h.svc.Resolve(h.ctx, id)
				assert.NoError(t, err)
			}()
		}
	}
	wg.Wait()
	for _, id := range ids {
		a := h.get(id)
		require.Equal(t, StatusSucceeded, a.Status)
		require.Equal(t, []string{"succeeded"}, h.ownerEffects(id))
	}
	bo.requireHandedOnce(t)
	st := h.svc.BatchStats().Resolutions
	t.Logf("lookup batches: %d requests in %d batches", st.Requests, st.Batches)
	h.requireNoViolations()
}

// Calls' results and lookups' answers arriving together are recorded in
// one transaction (resultsMany): calls of fresh attempts and lookups of
// unknown ones, released at once, round after round until some batch held
// both kinds. Every attempt ends succeeded, its call made once, handed to
// its owner once, its events in order (R9, R14). With the owner refusing
// every batch that hands over both kinds, the shared transaction rolls
// back and each side is redone one by one, with the same ends.
func TestResultsBatchSharesCallsAndLookups(t *testing.T) {
	t.Parallel()
	for _, refuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("owner_refuses_%t", refuse), func(t *testing.T) {
			t.Parallel()
			h := setup(t, harnessOpts{})
			bo := h.batchOwner()
			if refuse {
				bo.refuseShared.Store(1 << 20)
			}
			shared := func() bool {
				st := h.svc.BatchStats()
				if refuse {
					return st.Records.Fallbacks > 0 && st.Resolutions.Fallbacks > 0
				}
				return st.Shared > 0
			}
			due, fresh := h.callsAndLookupsTogether(t, shared)
			st := h.svc.BatchStats()
			t.Logf("%d rounds; calls %+v, lookups %+v, shared %d", len(due)/6, st.Records, st.Resolutions, st.Shared)
			require.True(t, shared(), "no batch held calls and lookups in 40 rounds")
			h.requireCalledAndLookedUpOnce(t, due, fresh)
			bo.requireHandedOnce(t)
			h.requireNoViolations()
		})
	}
}

// callsAndLookupsTogether releases calls of fresh attempts and lookups of
// unknown ones at once, six of each, round after round (at most 40) until
// done says so; every call and every lookup must answer succeeded. It
// returns the attempts looked up (due) and those called (fresh).
func (h *harness) callsAndLookupsTogether(t *testing.T, done func() bool) (due, fresh []uuid.UUID) {
	t.Helper()
	defer func() { h.svc.hookAfterCall = nil }()
	for round := 0; round < 40 && !done(); round++ {
		looks := dueUnknownAttempts(t, h, 6)
		h.psp.setPlan(behaveOK)
		var calls []uuid.UUID
		for range 6 {
			calls = append(calls, h.open(newSubject()).ID)
		}
		start := make(chan struct{})
		allIn := make(chan struct{})
		var arrived atomic.Int32
		h.svc.hookAfterCall = func(Attempt) error {
			if arrived.Add(1) == int32(len(calls)) {
				close(allIn)
			}
			<-start
			return nil
		}
		var wg sync.WaitGroup
		for _, id := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := h.svc.Execute(h.ctx, id)
				assert.NoError(t, err)
				assert.Equal(t, StatusSucceeded, res.Attempt.Status)
			}()
		}
		<-allIn
		for _, id := range looks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := h.svc.Resolve(h.ctx, id)
				assert.NoError(t, err)
				assert.Equal(t, StatusSucceeded, res.Attempt.Status)
			}()
		}
		close(start)
		wg.Wait()
		due, fresh = append(due, looks...), append(fresh, calls...)
	}
	return due, fresh
}

// requireCalledAndLookedUpOnce checks callsAndLookupsTogether's attempts:
// each succeeded, looked up or called once, its events in order, handed to
// its owner once, and each fresh one's call seen once by the provider.
func (h *harness) requireCalledAndLookedUpOnce(t *testing.T, due, fresh []uuid.UUID) {
	t.Helper()
	for _, id := range due {
		a := h.get(id)
		require.Equal(t, StatusSucceeded, a.Status)
		require.Equal(t, 1, a.LookupCount)
		require.Equal(t, []string{"opened", "call:unknown", "transition:pending->unknown", "lookup:found_succeeded",
			"transition:unknown->succeeded"}, eventTypes(h.events(id)))
		require.Equal(t, []string{"succeeded"}, h.ownerEffects(id))
	}
	for _, id := range fresh {
		h.requireSucceededOnFirstCall(t, id, "")
	}
}

// requireSucceededOnFirstCall: the attempt id succeeded on its one call,
// recorded once (one call event, one transition), handed to its owner
// once, its key seen once by the PSP. why says what a failure would mean.
func (h *harness) requireSucceededOnFirstCall(t *testing.T, id uuid.UUID, why string) {
	t.Helper()
	a := h.get(id)
	require.Equal(t, StatusSucceeded, a.Status)
	require.Equal(t, 1, a.CallsRecorded)
	require.Equal(t, []string{"opened", "call:succeeded", "transition:pending->succeeded"}, eventTypes(h.events(id)), why)
	require.Equal(t, []string{"succeeded"}, h.ownerEffects(id))
	require.Equal(t, 1, h.psp.seen(a.IdempotencyKey))
}

// A batch holding calls' results and lookups' answers (resultsMany)
// commits but its COMMIT answer is lost (docs/pitfalls.md): redone one by
// one, no call and no lookup is recorded a second time (no second event,
// no second count), no attempt is handed to its owner twice, and every
// caller is answered the attempt as it committed (R9).
func TestAmbiguousCommitOfSharedBatchRecordsOnce_R9(t *testing.T) {
	t.Parallel()
	h, proxy := setupProxied(t)
	bo := h.batchOwner()
	// recordSQL and countLookupsSQL in one transaction: only a shared batch.
	proxy.LoseCommitAnswerOfAll(1, "calls_recorded = GREATEST(a.calls_recorded", "lookup_count = a.lookup_count + 1")
	due, fresh := h.callsAndLookupsTogether(t, func() bool { return proxy.Cuts() > 0 })
	st := h.svc.BatchStats()
	t.Logf("%d rounds; calls %+v, lookups %+v, shared %d", len(due)/6, st.Records, st.Resolutions, st.Shared)
	require.Equal(t, 1, proxy.Cuts(), "no shared batch lost its commit answer in 40 rounds")
	require.Positive(t, st.Records.Fallbacks, "the calls were redone one by one")
	require.Positive(t, st.Resolutions.Fallbacks, "the lookups were redone one by one")
	h.requireCalledAndLookedUpOnce(t, due, fresh)
	bo.requireHandedOnce(t)
	h.requireNoViolations()
}
