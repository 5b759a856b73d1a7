package attempts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// batchRecorder is a BatchOwner that writes one test_owner_effects row per
// final attempt in the recording transaction (UNIQUE: a second hand-over of
// one attempt fails that transaction) and counts what it was handed, one at
// a time (AttemptFinal) or together (AttemptsFinal).
type batchRecorder struct {
	mu      sync.Mutex
	handed  map[uuid.UUID]int // committed or not: every hand-over that returned nil
	single  int
	batches []int // sizes of the AttemptsFinal calls that returned nil
	// refuse makes the next AttemptsFinal calls fail (the shared
	// transaction rolls back and its attempts are recorded one by one).
	refuse atomic.Int32
	// refuseShared makes the next AttemptsFinal calls fail that hand over
	// both attempts made final by a lookup and attempts made final by a
	// call: a batch of calls and lookups (resultsMany).
	refuseShared atomic.Int32
}

func newBatchRecorder() *batchRecorder { return &batchRecorder{handed: map[uuid.UUID]int{}} }

func (o *batchRecorder) AttemptFinal(ctx context.Context, tx pgx.Tx, a Attempt) error {
	if _, err := tx.Exec(ctx, `INSERT INTO test_owner_effects (attempt_id, status) VALUES ($1, $2)`, a.ID, a.Status); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.handed[a.ID]++
	o.single++
	return nil
}

func (o *batchRecorder) AttemptsFinal(ctx context.Context, tx pgx.Tx, as []Attempt, _ *ledger.Deferred) error {
	if o.refuse.Load() > 0 {
		o.refuse.Add(-1)
		return errors.New("batch owner refuses this batch")
	}
	if o.refuseShared.Load() > 0 {
		var looked, called bool
		for _, a := range as {
			looked, called = looked || a.LookupCount > 0, called || a.LookupCount == 0
		}
		if looked && called {
			o.refuseShared.Add(-1)
			return errors.New("batch owner refuses this batch of calls and lookups")
		}
	}
	for _, a := range as {
		if !a.Status.Final() {
			return fmt.Errorf("AttemptsFinal handed %s attempt %s", a.Status, a.ID)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO test_owner_effects (attempt_id, status) VALUES ($1, $2)`, a.ID, a.Status); err != nil {
			return err
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, a := range as {
		o.handed[a.ID]++
	}
	o.batches = append(o.batches, len(as))
	return nil
}

var _ BatchOwner = (*batchRecorder)(nil)

// requireHandedOnce: no attempt was handed to the owner twice.
func (o *batchRecorder) requireHandedOnce(t *testing.T) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for id, c := range o.handed {
		require.Equal(t, 1, c, "attempt %s handed to its owner %d times", id, c)
	}
}

// scenario is what one slot of the mixed batch does at the PSP.
type scenario string

const (
	scOK          scenario = "ok"           // 201 succeeded
	scDecline     scenario = "decline"      // 422 pix key not found: failed
	scErrorAfter  scenario = "error_after"  // processed, then 500: unknown
	scHangAfter   scenario = "hang_after"   // processed, then read timeout: unknown
	scRateLimit   scenario = "rate_limit"   // 429: stays pending, next send later
	scUnavailable scenario = "unavailable"  // 503: unknown (R2: 5xx)
	scProcessing  scenario = "processing"   // 2xx processing: stays pending, resolver follows
	scLateFailed  scenario = "late_failed"  // an operator tries to fail it during the call (refused: in flight); the PSP says succeeded
	scLateSuccess scenario = "late_success" // an operator succeeds it during the call; the PSP declines
	scAckedError  scenario = "acked_error"  // processed, then 500 naming the provider id: unknown, acknowledged
	scInFlight    scenario = "in_flight"    // 409 key in use: unknown, acknowledged (R16)
	scAuthRefused scenario = "auth_refused" // credentials refused: pending, the long wait for an operator
)

var mixedScenarios = []scenario{scOK, scDecline, scErrorAfter, scHangAfter, scRateLimit, scUnavailable,
	scProcessing, scLateFailed, scLateSuccess, scAckedError, scInFlight, scAuthRefused}

// rewriting is the sim's adapter with the answers of some references'
// calls rewritten after the real exchange (the sim processed them): what a
// provider answering a 500 that names its operation, a 409 "key in use" or
// a refusal of our credentials looks like to the attempts core.
type rewriting struct {
	*sim.Provider
	mu      sync.Mutex
	answers map[string]scenario // reference -> scAckedError, scInFlight or scAuthRefused
}

func (p *rewriting) Submit(ctx context.Context, req providers.SubmitRequest) providers.SubmitResult {
	res := p.Provider.Submit(ctx, req)
	p.mu.Lock()
	sc := p.answers[req.Reference]
	p.mu.Unlock()
	switch sc {
	case scAckedError:
		id := res.ProviderID
		res = providers.SubmitResult{Exchange: res.Exchange, ProviderID: id}
		res.Exchange.StatusCode = http.StatusInternalServerError
	case scInFlight:
		res = providers.SubmitResult{Exchange: res.Exchange, Refinement: providers.RefineInFlight}
		res.Exchange.StatusCode = http.StatusConflict
	case scAuthRefused:
		res = providers.SubmitResult{Exchange: res.Exchange, Refinement: providers.RefineAuthRefused}
		res.Exchange.StatusCode = http.StatusUnauthorized
	}
	return res
}

// slotOutcome is everything about one executed attempt that must not depend
// on whether its call was recorded alone or in a batch.
type slotOutcome struct {
	Scenario      scenario
	Sent          bool
	Outcome       Outcome
	RetryIn       time.Duration
	Status        Status
	ProviderState string
	HasProviderID bool
	FailureCode   string
	FailureReason string
	CallCount     int
	CallsRecorded int
	NextSendIn    time.Duration // from the clock's fixed now; -1: none
	HasLastError  bool
	Review        bool
	Unknown       bool // unknown_at set
	Resolved      bool // resolved_at set
	ResolvedBy    string
	NextLookup    bool
	Processing    bool // processing_since set
	HasData       bool
	Acknowledged  bool
	Events        []string
	OwnerEffects  []string
	ResolveJobs   int
	SubmitJobs    int
}

// mixedRun opens one attempt per slot, executes them all concurrently
// against providers/sim and returns each slot's outcome. With batch, the
// owner is a BatchOwner (calls recorded together, recordBatch); without,
// a plain Owner (every call recorded by recordOne): the reference path.
// A barrier after the calls makes every result arrive at the recorder at
// once, so the batches form.
func mixedRun(t *testing.T, batch bool) ([]slotOutcome, *batchRecorder, *ownerRecorder) {
	ctx := context.Background()
	pool := testdb.New(t)
	createOwnerEffects(t, pool)
	clock := newFakeClock()

	fast := sim.NewServer(sim.Config{Seed: 3, HangFor: 10 * simReadTimeout}).Start()
	t.Cleanup(fast.Close)
	slow := sim.NewServer(sim.Config{Seed: 3, SettleAfter: time.Hour}).Start()
	t.Cleanup(slow.Close)
	settings := sim.WithHTTPSettings(providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: simReadTimeout})
	fastProv := &rewriting{Provider: fast.NewProvider(settings), answers: map[string]scenario{}}
	slowProv := slow.NewProvider(settings, sim.WithName("slow"))

	svc, err := New(Config{Pool: pool, Clock: clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Providers: map[string]providers.Provider{fastProv.Name(): fastProv, slowProv.Name(): slowProv}})
	require.NoError(t, err)
	bo, plain := newBatchRecorder(), &ownerRecorder{calls: map[uuid.UUID][]Status{}}
	for _, k := range Kinds {
		if batch {
			svc.RegisterOwner(k, bo)
		} else {
			svc.RegisterOwner(k, plain)
		}
	}

	var slots []scenario
	for range 3 {
		slots = append(slots, mixedScenarios...)
	}
	n := len(slots)
	ids := make([]uuid.UUID, n)
	byID := map[uuid.UUID]scenario{}
	for i, sc := range slots {
		prov, email := fastProv.Name(), fmt.Sprintf("p%d@example.com", i)
		switch sc {
		case scDecline, scLateSuccess:
			email = sim.DeclinedPixKey
		case scProcessing:
			prov = slowProv.Name()
		}
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			a, err := svc.Open(ctx, tx, OpenParams{Kind: KindPixTransfer, SubjectID: fmt.Sprintf("tr_%d", i), Provider: prov,
				Input: providers.OperationInput{Operation: providers.OpPixTransfer, Amount: fmt.Sprintf("%d.00", i+1),
					Currency: "BRL", Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: email}}}})
			ids[i] = a.ID
			byID[a.ID] = sc
			if err != nil {
				return err
			}
			switch sc {
			case scAckedError, scInFlight, scAuthRefused:
				fastProv.mu.Lock()
				fastProv.answers[a.Reference] = sc
				fastProv.mu.Unlock()
			}
			kind := map[scenario]sim.FaultKind{scErrorAfter: sim.FaultErrorAfter, scHangAfter: sim.FaultHangAfter,
				scRateLimit: sim.FaultRateLimit, scUnavailable: sim.FaultUnavailable}[sc]
			if kind != "" {
				return fast.AddFault(sim.FaultRule{Kind: kind, Reference: a.Reference, Times: 1,
					RetryAfter: sim.Duration(3 * time.Second)})
			}
			return nil
		}))
	}

	// The barrier: every call's result waits until all calls returned. The
	// "late" slots are resolved by an operator while their call is out.
	var arrived atomic.Int32
	allIn := make(chan struct{})
	svc.hookAfterCall = func(a Attempt) error {
		switch byID[a.ID] {
		case scLateFailed:
			// Issue 13 finding 5: never while the call is out (R22).
			_, err := svc.ResolveManually(ctx, a.ID, StatusFailed, "op_1", "operator failed it", nil)
			require.ErrorIs(t, err, ErrManualFailRefused)
		case scLateSuccess:
			_, err := svc.ResolveManually(ctx, a.ID, StatusSucceeded, "op_1", "operator saw it paid", nil)
			require.NoError(t, err)
		}
		if arrived.Add(1) == int32(n) {
			close(allIn)
		}
		select {
		case <-allIn:
		case <-time.After(20 * time.Second):
			return errors.New("barrier: not every call returned")
		}
		return nil
	}

	results := make([]ExecuteResult, n)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			results[i], err = svc.Execute(ctx, id)
			assert.NoError(t, err, "slot %d (%s)", i, slots[i])
		}()
	}
	wg.Wait()
	require.False(t, t.Failed())

	out := make([]slotOutcome, n)
	now := clock.Now()
	for i, id := range ids {
		a, err := svc.Get(ctx, pool, id)
		require.NoError(t, err)
		r := results[i]
		require.Equal(t, a, r.Attempt, "slot %d (%s): Execute returns the attempt as stored", i, slots[i])
		evs, err := svc.Events(ctx, pool, id)
		require.NoError(t, err)
		o := slotOutcome{Scenario: slots[i], Sent: r.Sent, Outcome: r.Outcome, RetryIn: r.RetryIn, Status: a.Status,
			ProviderState: a.ProviderState, HasProviderID: a.ProviderID != "", FailureCode: a.FailureCode,
			FailureReason: a.FailureReason, CallCount: a.CallCount, CallsRecorded: a.CallsRecorded, NextSendIn: -1,
			HasLastError: a.LastError != "", Review: a.Review, Unknown: a.UnknownAt != nil, Resolved: a.ResolvedAt != nil,
			ResolvedBy: a.ResolvedBy, NextLookup: a.NextLookupAt != nil, Processing: a.ProcessingFrom != nil,
			HasData: len(a.Data) > 0, Acknowledged: a.AcknowledgedAt != nil}
		if a.NextSendAt != nil {
			o.NextSendIn = a.NextSendAt.Sub(now)
		}
		if slots[i] == scAuthRefused {
			// The long wait is jittered (backoff): between half of
			// AuthRefusedWait and all of it, the same in both.
			require.GreaterOrEqual(t, o.RetryIn, 5*time.Minute, "slot %d", i)
			require.LessOrEqual(t, o.RetryIn, 10*time.Minute, "slot %d", i)
			require.InDelta(t, float64(o.RetryIn), float64(o.NextSendIn), float64(time.Millisecond), "slot %d", i)
			o.RetryIn, o.NextSendIn = time.Minute, time.Minute
		}
		for _, e := range evs {
			s := fmt.Sprintf("%s/%s", e.Type, e.Actor)
			switch e.Type {
			case EventCall:
				s += fmt.Sprintf(":%d:%s:%d", e.CallNumber, e.Outcome, e.StatusCode)
			case EventTransition:
				s += ":" + string(e.FromStatus) + "->" + string(e.ToStatus)
				if e.ToStatus.Final() {
					s += ":" + e.Reason
				}
			case EventNote:
				s += ":" + e.Reason
			}
			o.Events = append(o.Events, s)
		}
		rows, err := pool.Query(ctx, `SELECT status FROM test_owner_effects WHERE attempt_id = $1`, id)
		require.NoError(t, err)
		o.OwnerEffects, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for kind, dst := range map[string]*int{ResolveAttemptKind: &o.ResolveJobs, SubmitAttemptKind: &o.SubmitJobs} {
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1
				AND args->>'attempt_id' = $2`, kind, id.String()).Scan(dst))
		}
		out[i] = o
		if slots[i] == scLateSuccess {
			// The provider declined what the operator had called paid: a
			// reversal, a divergence in review until settled (R9, R19).
			require.NotNil(t, a.DivergedAt, "slot %d", i)
			_, err := svc.SettleDivergence(ctx, id, "op_1", "the operator's success was wrong; booked", HoldNone)
			require.NoError(t, err)
		}
	}
	vs, err := Verify(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, vs)
	require.Empty(t, fast.Duplicates())
	require.Empty(t, slow.Duplicates())
	return out, bo, plain
}

// Execute's record phase batched (recordBatch: definitive answers moved by
// one statement and handed to the BatchOwner together, the rest through
// applyOutcome in the same transaction) ends every attempt exactly as the
// one-at-a-time path (recordOne) does: same status, calls recorded,
// provider state, failure, backoff, review flag, events in order, owner
// effect and resolver job (R1, R2, R9, R10, R12, R14). The BatchOwner is
// handed each final attempt exactly once, and some batches hold several.
func TestRecordBatchMatchesOneAtATime(t *testing.T) {
	t.Parallel()
	var ref, got []slotOutcome
	var bo *batchRecorder
	var plain *ownerRecorder
	t.Run("one_at_a_time", func(t *testing.T) { ref, _, plain = mixedRun(t, false) })
	t.Run("batched", func(t *testing.T) { got, bo, _ = mixedRun(t, true) })
	require.Len(t, got, len(ref))
	for i := range ref {
		require.Equal(t, ref[i], got[i], "slot %d (%s): batched differs from one at a time", i, ref[i].Scenario)
	}

	// Sanity: the reference path did what the rules say.
	for _, o := range ref {
		want := map[scenario]Status{scOK: StatusSucceeded, scDecline: StatusFailed, scErrorAfter: StatusUnknown,
			scHangAfter: StatusUnknown, scRateLimit: StatusPending, scUnavailable: StatusUnknown,
			scProcessing: StatusPending, scLateFailed: StatusSucceeded, scLateSuccess: StatusSucceeded,
			scAckedError: StatusUnknown, scInFlight: StatusUnknown,
			scAuthRefused: StatusPending}[o.Scenario]
		require.Equal(t, want, o.Status, o.Scenario)
		require.Equal(t, o.Scenario == scAckedError || o.Scenario == scInFlight || o.Scenario == scProcessing, o.Acknowledged, o.Scenario)
		require.Equal(t, o.Status == StatusPending && o.Scenario != scProcessing, o.NextSendIn > 0, o.Scenario)
	}
	require.Empty(t, plain.calls[uuid.Nil])

	bo.mu.Lock()
	defer bo.mu.Unlock()
	finals := 0
	for i, o := range got {
		if o.Status.Final() {
			finals++
			require.Len(t, o.OwnerEffects, 1, "slot %d (%s)", i, o.Scenario)
		} else {
			require.Empty(t, o.OwnerEffects, "slot %d (%s)", i, o.Scenario)
		}
	}
	handed := 0
	for id, c := range bo.handed {
		require.Equal(t, 1, c, "attempt %s handed to its owner %d times", id, c)
		handed++
	}
	require.Equal(t, finals, handed)
	big := 0
	for _, size := range bo.batches {
		big = max(big, size)
	}
	require.Greater(t, big, 1, "no record batch handed several final attempts (batches %v, single %d)", bo.batches, bo.single)
	t.Logf("AttemptsFinal batch sizes %v, one-at-a-time hand-overs %d", bo.batches, bo.single)
}

// If the shared record transaction fails (here: the BatchOwner refuses),
// nothing of it commits and every call of the batch is recorded one by one
// (recordOne): each attempt still ends as its call said, its call recorded
// once, its owner told once.
func TestRecordBatchFailureFallsBackOneByOne(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	bo := newBatchRecorder()
	for _, k := range Kinds {
		h.svc.RegisterOwner(k, bo)
	}
	bo.refuse.Store(1000) // every shared transaction fails
	const n = 12
	var ids []uuid.UUID
	for range n {
		ids = append(ids, h.open(newSubject()).ID)
	}
	var arrived atomic.Int32
	allIn := make(chan struct{})
	h.svc.hookAfterCall = func(Attempt) error {
		if arrived.Add(1) == n {
			close(allIn)
		}
		<-allIn
		return nil
	}
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := h.svc.Execute(h.ctx, id)
			assert.NoError(t, err)
			assert.Equal(t, StatusSucceeded, res.Attempt.Status)
		}()
	}
	wg.Wait()
	require.Less(t, bo.refuse.Load(), int32(1000), "no shared record transaction was tried")
	for _, id := range ids {
		h.requireSucceededOnFirstCall(t, id, "a rolled-back batch leaves no event behind")
	}
	bo.mu.Lock()
	require.Equal(t, n, bo.single, "every attempt handed one at a time after the batch failed")
	bo.mu.Unlock()
	h.requireNoViolations()
}

// startMany marks one call per attempt: two requests in one batch to start
// call 1 of the same attempt (two executors that read it at the same time)
// must let exactly one of them call, as the single conditional UPDATE does
// (R10, R12).
func TestStartManySameAttemptTwiceMarksOnce(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	a := h.open(newSubject())
	b := h.open(newSubject())
	now := h.clock.Now()
	res := h.svc.startMany(h.ctx, []startReq{{id: a.ID, callNo: 1, started: now}, {id: b.ID, callNo: 1, started: now},
		{id: a.ID, callNo: 1, started: now}})
	marked := 0
	for _, i := range []int{0, 2} {
		require.NoError(t, res[i].Err)
		if res[i].Value {
			marked++
		}
	}
	require.True(t, res[1].Value)
	require.Equal(t, 1, marked, "both executors of attempt %s were told their call-start mark took: both will call", a.ID)
}

// The same race end to end, against a provider WITHOUT idempotency keys
// (R20): two executors of each attempt start at the same moment (a
// redelivered job, a sweeper and a worker), so their reads and call-start
// marks land in the same batches. Exactly one may send per attempt, as
// TestConcurrentExecute shows for the one-at-a-time path: a second send is
// a second transfer at the provider.
func TestConcurrentExecuteSameAttemptSendsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	createOwnerEffects(t, pool)
	server := sim.NewServer(sim.Config{Seed: 5, NoIdempotency: true}).Start()
	t.Cleanup(server.Close)
	prov := server.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: time.Second}))
	require.False(t, prov.Capabilities().IdempotencyKeys)
	svc, err := New(Config{Pool: pool, Clock: newFakeClock(), Providers: map[string]providers.Provider{prov.Name(): prov}})
	require.NoError(t, err)
	owner := &ownerRecorder{calls: map[uuid.UUID][]Status{}}
	for _, k := range Kinds {
		svc.RegisterOwner(k, owner)
	}
	const n = 16
	var as []Attempt
	for i := range n {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			a, err := svc.Open(ctx, tx, OpenParams{Kind: KindPixTransfer, SubjectID: fmt.Sprintf("tr_%d", i), Provider: prov.Name(),
				Input: providers.OperationInput{Operation: providers.OpPixTransfer, Amount: "5.00", Currency: "BRL",
					Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "a@example.com"}}}})
			as = append(as, a)
			return err
		}))
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, a := range as {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := svc.Execute(ctx, a.ID)
				assert.NoError(t, err)
			}()
		}
	}
	close(start)
	wg.Wait()
	twice := 0
	for _, a := range as {
		if ops := server.Operations(a.Reference); len(ops) != 1 {
			twice++
			t.Errorf("attempt %s (call_count %d): the provider executed %d transfers for one reference",
				a.ID, must(svc.Get(ctx, pool, a.ID)).CallCount, len(ops))
		}
		require.Equal(t, 1, owner.count(a.ID))
	}
	require.Zero(t, twice, "R10/R12/R20: %d of %d references paid twice (sim duplicates %v)", twice, n, server.Duplicates())
	require.Empty(t, server.Duplicates())
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// OpenNew opens the first attempt of many new subjects in the caller's
// transaction as Open does one (R4, R8, R11, R13): pending, its own key and
// reference made before any I/O, the payload with its sha256, an "opened"
// event and a submit job each, all committed with the caller.
func TestOpenNewOpensLikeOpen(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	subjects := []string{newSubject(), newSubject(), newSubject()}
	var as []Attempt
	require.NoError(t, pgx.BeginFunc(h.ctx, h.pool, func(tx pgx.Tx) error {
		ps := make([]OpenParams, len(subjects))
		for i, s := range subjects {
			ps[i] = OpenParams{Kind: KindPixTransfer, SubjectID: s, Provider: "fake",
				Input: providers.OperationInput{Operation: providers.OpPixTransfer, Amount: fmt.Sprintf("%d.00", i+1), Currency: "BRL"}}
		}
		var err error
		as, err = h.svc.OpenNew(h.ctx, tx, ps)
		return err
	}))
	require.Len(t, as, len(subjects))
	keys, refs := map[string]bool{}, map[string]bool{}
	for i, a := range as {
		require.Equal(t, subjects[i], a.SubjectID, "answers in the order of the params")
		require.Equal(t, a, h.get(a.ID), "OpenNew returns the attempt as stored")
		require.Equal(t, StatusPending, a.Status)
		require.Zero(t, a.CallCount)
		require.NotEmpty(t, a.IdempotencyKey)
		require.Len(t, a.Reference, 32)
		require.False(t, keys[a.IdempotencyKey] || refs[a.Reference], "keys and references are per attempt")
		keys[a.IdempotencyKey], refs[a.Reference] = true, true
		require.Contains(t, string(a.Payload), fmt.Sprintf("%d.00", i+1))
		require.Equal(t, []string{"opened"}, eventTypes(h.events(a.ID)))
		require.Equal(t, 1, h.liveJobs(SubmitAttemptKind, a.ID))
	}
	// And Execute takes them from there.
	for _, a := range as {
		res, err := h.svc.Execute(h.ctx, a.ID)
		require.NoError(t, err)
		require.Equal(t, StatusSucceeded, res.Attempt.Status)
	}
	h.requireNoViolations()
}

// OpenNew is for new subjects: one that already has an open attempt (R8),
// or one named twice, fails the whole call on the unique index, and after
// the caller rolls back nothing of it is left (no attempt, event or job).
func TestOpenNewExistingOpenAttemptFailsWhole(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	old := h.open(newSubject())
	counts := func() (attemptsN, eventsN, jobsN int) {
		require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT (SELECT count(*) FROM attempts), (SELECT count(*) FROM attempt_events),
			(SELECT count(*) FROM river_job)`).Scan(&attemptsN, &eventsN, &jobsN))
		return
	}
	a0, e0, j0 := counts()
	params := func(subject string) OpenParams {
		return OpenParams{Kind: KindPixTransfer, SubjectID: subject, Provider: "fake",
			Input: providers.OperationInput{Operation: providers.OpPixTransfer, Amount: "1.00", Currency: "BRL"}}
	}
	fresh := newSubject()
	for name, ps := range map[string][]OpenParams{
		"subject with an open attempt": {params(fresh), params(old.SubjectID)},
		"subject named twice":          {params(fresh), params(fresh)},
	} {
		var openErr error
		err := pgx.BeginFunc(h.ctx, h.pool, func(tx pgx.Tx) error {
			_, openErr = h.svc.OpenNew(h.ctx, tx, ps)
			return openErr
		})
		require.Error(t, openErr, name)
		require.Error(t, err, name)
		a, e, j := counts()
		require.Equal(t, []int{a0, e0, j0}, []int{a, e, j}, "%s: nothing left after rollback", name)
		got, err := h.svc.ForSubject(h.ctx, h.pool, fresh)
		require.NoError(t, err)
		require.Empty(t, got, name)
	}
	require.Equal(t, old, h.get(old.ID), "the existing open attempt is untouched")
	h.requireNoViolations()
}

// OpenNew validates like Open: bad input is ErrInvalid, nothing is written
// and the caller's transaction stays usable.
func TestOpenNewValidation(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	good := OpenParams{Kind: KindPixTransfer, SubjectID: newSubject(), Provider: "fake",
		Input: providers.OperationInput{Operation: providers.OpPixTransfer, Amount: "1.00", Currency: "BRL"}}
	bad := map[string]func(p *OpenParams){
		"unknown kind":          func(p *OpenParams) { p.Kind = "nope" },
		"empty subject":         func(p *OpenParams) { p.SubjectID = "" },
		"long subject":          func(p *OpenParams) { p.SubjectID = string(make([]byte, 201)) },
		"unknown provider":      func(p *OpenParams) { p.Provider = "nope" },
		"operation not of kind": func(p *OpenParams) { p.Input.Operation = providers.OpCardCharge },
		"payload refused":       func(p *OpenParams) { p.Input.Amount = "-1" },
	}
	for name, mutate := range bad {
		p := good
		p.SubjectID = newSubject()
		mutate(&p)
		require.NoError(t, pgx.BeginFunc(h.ctx, h.pool, func(tx pgx.Tx) error {
			as, err := h.svc.OpenNew(h.ctx, tx, []OpenParams{good, p})
			require.ErrorIs(t, err, ErrInvalid, name)
			require.Nil(t, as, name)
			var n int
			require.NoError(t, tx.QueryRow(h.ctx, `SELECT count(*) FROM attempts`).Scan(&n), "%s: tx still usable", name)
			require.Zero(t, n, "%s: nothing written", name)
			return nil
		}))
	}
	as, err := h.svc.OpenNew(h.ctx, nil, nil)
	require.NoError(t, err)
	require.Empty(t, as)
}

// The batch statements that mark calls in flight reach their attempts by
// primary key only, whatever the statistics say: a plan through
// attempts_open (status, created_at) reads every pending entry of that
// index, and every dead one attempts leave there as they move on, on each
// call (it made the first-send mark the server's busiest statement under
// provider faults). Statistics here are those of a ledger whose attempts
// are nearly all final, as in production, under the generic plan a
// connection caches after its fifth execution.
func TestBatchStatementsReachAttemptsByPrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	_, err := pool.Exec(ctx, `INSERT INTO attempts (id, kind, subject_id, provider, operation, idempotency_key,
			reference, payload, payload_sha256, status, resolved_at, resolved_by, created_at, updated_at)
		SELECT gen_random_uuid(), 'payout', 'po_' || i, 'sim', 'pix_transfer', 'key_' || md5(i::text), md5(i::text),
			convert_to('{"n":' || i || '}', 'UTF8'), sha256(convert_to('{"n":' || i || '}', 'UTF8')),
			CASE WHEN i % 20 = 0 THEN 'failed' ELSE 'succeeded' END, now(), 'worker', now(), now()
		FROM generate_series(1, 5000) AS i`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ANALYZE attempts`)
	require.NoError(t, err)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	ids := []string{uuid.NewString(), uuid.NewString(), uuid.NewString()}
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"first send": {firstSendSQL, []any{ids, time.Now(), []string{"sim"}, time.Now().Add(time.Minute)}},
		"call start": {startSQL, []any{ids, []int32{1, 1, 1}, []time.Time{time.Now(), time.Now(), time.Now()}, time.Minute}},
	} {
		rows, err := conn.Query(ctx, "EXPLAIN "+q.sql, q.args...)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		plan := strings.Join(lines, "\n")
		require.Contains(t, plan, "attempts_pkey", "%s:\n%s", name, plan)
		require.NotContains(t, plan, "attempts_open", "%s:\n%s", name, plan)
		require.NotContains(t, plan, "Seq Scan", "%s:\n%s", name, plan)
	}
}
