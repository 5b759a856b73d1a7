package attempts

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/saldo/saldo/internal/groupcommit"
)

// Group commit (docs/decisions/0002-batching-whole-operations.md). Every
// phase of Execute that writes or reads the database runs through a
// groupcommit.Batcher: the River workers executing attempts at the same
// time share one statement to read their attempts, one to mark their calls
// in flight, and one transaction to record their results. Each answer is
// the one the one-at-a-time path gives; a batch that fails as a whole is
// redone one attempt at a time.

// BatchOwner is an Owner that can take many final attempts at once, inside
// the transaction that records them (set-based, in one go). The attempts
// core records the calls of attempts whose owner is a BatchOwner together;
// the calls of other owners' attempts are recorded one transaction each.
type BatchOwner interface {
	Owner
	// AttemptsFinal is AttemptFinal for several attempts (each succeeded or
	// failed, each exactly once). Returning an error rolls every one of
	// their transitions back.
	AttemptsFinal(ctx context.Context, tx pgx.Tx, as []Attempt) error
}

func (s *Service) batchOwner(kind Kind) (BatchOwner, bool) {
	o, ok := s.owner(kind).(BatchOwner)
	return o, ok
}

// startBatchers builds the Execute phase batchers.
func (s *Service) startBatchers() {
	o := groupcommit.Options{MaxBatch: 64, Flushers: 1}
	s.getter = groupcommit.New(o, s.getMany)
	s.starter = groupcommit.New(o, s.startMany)
	s.recorder = groupcommit.New(o, s.recordMany)
}

// execModeExec makes a batch statement planned for its own arguments: the
// batch statements join arrays against big tables, and a plan cached while
// a table was small would scan it whole (PITFALLS: generic plans).
const execModeExec = pgx.QueryExecModeExec

// getMany reads the attempts of a batch.
func (s *Service) getMany(ctx context.Context, ids []uuid.UUID) []groupcommit.Result[Attempt] {
	out := make([]groupcommit.Result[Attempt], len(ids))
	if len(ids) == 1 {
		a, err := s.Get(ctx, s.pool, ids[0])
		out[0] = groupcommit.Result[Attempt]{Value: a, Err: err}
		return out
	}
	found, err := s.queryByIDs(ctx, s.pool, `SELECT `+attemptColumns+` FROM attempts
		WHERE id = ANY ($1::uuid[])`, ids)
	for i, id := range ids {
		switch a, ok := found[id]; {
		case err != nil:
			out[i].Err = err
		case !ok:
			out[i].Err = ErrNotFound
		default:
			out[i].Value = a
		}
	}
	return out
}

// queryByIDs runs sql with ids as its first argument and returns the
// attempts it returns by id.
func (s *Service) queryByIDs(ctx context.Context, db DB, sql string, ids []uuid.UUID, args ...any) (map[uuid.UUID]Attempt, error) {
	as, err := queryAttempts(ctx, db, sql, append([]any{execModeExec, uuidStrings(ids)}, args...)...)
	if err != nil {
		return nil, err
	}
	m := make(map[uuid.UUID]Attempt, len(as))
	for _, a := range as {
		m[a.ID] = a
	}
	return m, nil
}

func uuidStrings(ids []uuid.UUID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

// startReq marks call callNo of attempt id in flight (phase 2, R11).
type startReq struct {
	id      uuid.UUID
	callNo  int
	started time.Time
}

// startSQL is the conditional "call started" mark: nobody else started a
// call since the attempt was read, and the provider is not processing it.
const startSQL = `UPDATE attempts a SET call_count = u.call_no, call_started_at = u.started, next_send_at = NULL,
		updated_at = u.started
	FROM unnest($1::uuid[], $2::int[], $3::timestamptz[]) AS u(uid, call_no, started)
	WHERE a.id = u.uid AND a.status = 'pending' AND a.call_count = u.call_no - 1
		AND a.calls_recorded = u.call_no - 1 AND a.provider_state IS DISTINCT FROM 'processing'
	RETURNING a.id`

// startMany marks the calls of a batch in flight in one statement; each
// answer says whether that attempt's mark took.
func (s *Service) startMany(ctx context.Context, reqs []startReq) []groupcommit.Result[bool] {
	out := make([]groupcommit.Result[bool], len(reqs))
	if len(reqs) == 1 {
		r := reqs[0]
		tag, err := s.pool.Exec(ctx, `UPDATE attempts SET call_count = $2, call_started_at = $3, next_send_at = NULL,
			updated_at = $3 WHERE id = $1 AND status = 'pending' AND call_count = $4 AND calls_recorded = $4
			AND provider_state IS DISTINCT FROM 'processing'`, r.id, r.callNo, r.started, r.callNo-1)
		if err != nil {
			out[0].Err = fmt.Errorf("attempts: mark call in flight: %w", err)
		}
		out[0].Value = tag.RowsAffected() == 1
		return out
	}
	ids, calls, started := make([]string, len(reqs)), make([]int32, len(reqs)), make([]time.Time, len(reqs))
	for i, r := range reqs {
		ids[i], calls[i], started[i] = r.id.String(), int32(r.callNo), r.started
	}
	rows, err := s.pool.Query(ctx, startSQL, execModeExec, ids, calls, started)
	marked := map[uuid.UUID]bool{}
	if err == nil {
		var id uuid.UUID
		_, err = pgx.ForEachRow(rows, []any{&id}, func() error { marked[id] = true; return nil })
	}
	for i, r := range reqs {
		if err != nil {
			out[i].Err = fmt.Errorf("attempts: mark call in flight: %w", err)
			continue
		}
		out[i].Value = marked[r.id]
	}
	return out
}

// recordMany records a batch of call results: the attempts a BatchOwner
// owns in one transaction (recordBatch), the others one transaction each.
// If the shared transaction fails, nothing of it committed, and its
// attempts are recorded one by one instead.
func (s *Service) recordMany(ctx context.Context, reqs []recordReq) []groupcommit.Result[recorded] {
	out := make([]groupcommit.Result[recorded], len(reqs))
	var together []int
	for i, r := range reqs {
		if _, ok := s.batchOwner(r.a.Kind); ok {
			together = append(together, i)
			continue
		}
		out[i].Value, out[i].Err = s.recordOne(ctx, r)
	}
	if len(together) > 1 {
		batch := make([]recordReq, len(together))
		for k, i := range together {
			batch[k] = reqs[i]
		}
		res, err := s.recordBatch(ctx, batch)
		if err == nil {
			for k, i := range together {
				out[i].Value = res[k]
			}
			return out
		}
		s.log.WarnContext(ctx, "attempts: recording a batch of calls failed; recording them one by one",
			"batch", len(batch), "error", err)
	}
	for _, i := range together {
		out[i].Value, out[i].Err = s.recordOne(ctx, reqs[i])
	}
	return out
}

// recordSQL records each call of a batch and locks its attempt.
const recordSQL = `UPDATE attempts a SET calls_recorded = GREATEST(a.calls_recorded, u.call_no),
		call_ended_at = $4, last_error = u.err, updated_at = $4
	FROM unnest($1::uuid[], $2::int[], $3::text[]) AS u(uid, call_no, err)
	WHERE a.id = u.uid
	RETURNING ` + attemptColumns

// finalSQL moves a batch of locked attempts to their final status (the
// UPDATE of transition, for many).
const finalSQL = `UPDATE attempts a SET status = u.to_status,
		provider_id = COALESCE(a.provider_id, u.u_provider_id),
		failure_code = COALESCE(u.u_failure_code, a.failure_code),
		failure_reason = COALESCE(u.u_failure_reason, a.failure_reason), data = COALESCE(u.u_data::jsonb, a.data),
		resolved_at = $8, resolved_by = 'worker', provider_state = u.to_status, next_send_at = NULL, updated_at = $8
	FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
		AS u(uid, from_status, to_status, u_provider_id, u_failure_code, u_failure_reason, u_data)
	WHERE a.id = u.uid AND a.status = u.from_status
	RETURNING ` + attemptColumns

// recordBatch records calls of attempts owned by BatchOwners in one
// transaction: one statement records every call (locking the attempts),
// one inserts their call events; the definitive answers (succeeded,
// failed) that the state machine allows are transitioned by one statement
// with one statement of transition events and handed to their owners
// together; anything else goes through applyOutcome one attempt at a time,
// inside the same transaction.
func (s *Service) recordBatch(ctx context.Context, reqs []recordReq) ([]recorded, error) {
	out := make([]recorded, len(reqs))
	err := s.inTx(ctx, func(tx pgx.Tx, after *afterCommit) error {
		now := s.clock.Now()
		n := len(reqs)
		ids, calls, errs := make([]uuid.UUID, n), make([]int32, n), make([]*string, n)
		events := make([]Event, n)
		for i, r := range reqs {
			ids[i], calls[i] = r.a.ID, int32(r.callNo)
			errs[i] = nullable(truncate(r.errText(), maxErrorText))
			events[i] = r.callEvent(now)
		}
		locked, err := s.queryByIDs(ctx, tx, recordSQL, ids, calls, errs, now)
		if err != nil {
			return err
		}
		if err := insertEvents(ctx, tx, events); err != nil {
			return err
		}
		var final []int // indexes of reqs transitioned together
		for i, r := range reqs {
			la, ok := locked[r.a.ID]
			if !ok {
				return fmt.Errorf("%w: attempt %s", ErrNotFound, r.a.ID)
			}
			s.afterCall(ctx, after, r)
			out[i].a = la
			if finalTogether(la, r) {
				final = append(final, i)
				continue
			}
			if out[i], err = s.applyOutcome(ctx, tx, after, la, r); err != nil {
				return err
			}
		}
		return s.finalTogether(ctx, tx, after, reqs, final, out, now)
	})
	return out, err
}

// finalTogether reports whether r's answer moves la to a final status in
// the batch statement: a definitive answer the state machine allows from
// la's status, naming no provider id other than the recorded one.
func finalTogether(la Attempt, r recordReq) bool {
	if r.outcome != OutcomeSucceeded && r.outcome != OutcomeFailed {
		return false
	}
	if !CanTransition(la.Status, r.outcome.Status()) {
		return false
	}
	pid := r.sr.ProviderID
	return pid == "" || la.ProviderID == "" || pid == la.ProviderID
}

// finalTogether transitions reqs[final...] (their attempts locked, as
// out[i].a) in one statement, inserts their transition events and hands
// them to their owners together.
func (s *Service) finalTogether(ctx context.Context, tx pgx.Tx, after *afterCommit, reqs []recordReq, final []int,
	out []recorded, now time.Time) error {
	if len(final) == 0 {
		return nil
	}
	m := len(final)
	ids, from, to := make([]uuid.UUID, m), make([]string, m), make([]string, m)
	pids, codes, reasons, data := make([]*string, m), make([]*string, m), make([]*string, m), make([]*string, m)
	events := make([]Event, m)
	for k, i := range final {
		r, la := reqs[i], out[i].a
		c := change{To: r.outcome.Status(), Actor: ActorWorker, Reason: callReason(r.callNo, r.sr.Exchange.StatusCode, r.outcome)}
		ids[k], from[k], to[k] = la.ID, string(la.Status), string(c.To)
		pids[k], codes[k], reasons[k] = nullable(r.sr.ProviderID), nullable(r.sr.FailureCode), nullable(r.sr.FailureReason)
		if len(r.sr.Data) > 0 && json.Valid(r.sr.Data) {
			data[k] = ptr(string(r.sr.Data))
		}
		events[k] = Event{AttemptID: la.ID, At: now, Type: EventTransition, Actor: c.Actor, FromStatus: la.Status,
			ToStatus: c.To, Reason: c.Reason}
	}
	moved, err := s.queryByIDs(ctx, tx, finalSQL, ids, from, to, pids, codes, reasons, data, now)
	if err != nil {
		return fmt.Errorf("attempts: final transitions of a batch: %w", err)
	}
	if len(moved) != m {
		// Impossible under the row locks recordSQL took; the batch is
		// redone one attempt at a time rather than guessed at.
		return fmt.Errorf("attempts: %d of %d final transitions of a batch did not apply", m-len(moved), m)
	}
	if err := insertEvents(ctx, tx, events); err != nil {
		return err
	}
	byOwner := map[BatchOwner][]Attempt{}
	var owners []BatchOwner
	for k, i := range final {
		na := moved[ids[k]]
		out[i].a = na
		o, ok := s.batchOwner(na.Kind)
		if !ok {
			return fmt.Errorf("%w: %s", ErrNoOwner, na.Kind)
		}
		if _, seen := byOwner[o]; !seen {
			owners = append(owners, o)
		}
		byOwner[o] = append(byOwner[o], na)
		from, reason := Status(from[k]), events[k].Reason
		after.add(func() {
			s.log.InfoContext(ctx, "attempt transitioned", "attempt_id", na.ID, "kind", na.Kind, "provider", na.Provider,
				"reference", na.Reference, "from", from, "to", na.Status, "actor", ActorWorker, "reason", reason)
			s.metrics.transition(na)
		})
	}
	for _, o := range owners {
		if err := o.AttemptsFinal(ctx, tx, byOwner[o]); err != nil {
			return fmt.Errorf("attempts: owner refused %d final attempts: %w", len(byOwner[o]), err)
		}
	}
	return nil
}

// insertEvents inserts events in one statement, in order.
func insertEvents(ctx context.Context, tx pgx.Tx, events []Event) error {
	if len(events) == 1 {
		return insertEvent(ctx, tx, events[0])
	}
	n := len(events)
	ids, at, types, actors := make([]string, n), make([]time.Time, n), make([]string, n), make([]string, n)
	fromS, toS, reasons := make([]*string, n), make([]*string, n), make([]*string, n)
	callNos, codes, wires := make([]*int32, n), make([]*int32, n), make([]*int32, n)
	started, ended := make([]*time.Time, n), make([]*time.Time, n)
	outcomes, reqIDs, errs := make([]*string, n), make([]*string, n), make([]*string, n)
	for i, e := range events {
		if len(e.Evidence) > 0 || e.ActorID != "" {
			return fmt.Errorf("attempts: insertEvents takes no evidence or actor id (event %d)", i)
		}
		ids[i], at[i], types[i], actors[i] = e.AttemptID.String(), e.At, string(e.Type), string(e.Actor)
		fromS[i], toS[i], reasons[i] = nullable(string(e.FromStatus)), nullable(string(e.ToStatus)), nullable(e.Reason)
		if e.CallNumber > 0 {
			callNos[i] = ptr(int32(e.CallNumber))
		}
		if e.StatusCode > 0 {
			codes[i] = ptr(int32(e.StatusCode))
		}
		if e.Type == EventCall || e.Type == EventLookup {
			wires[i] = ptr(int32(e.WireCalls))
		}
		started[i], ended[i] = e.StartedAt, e.EndedAt
		outcomes[i], reqIDs[i], errs[i] = nullable(e.Outcome), nullable(e.ProviderRequestID), nullable(truncate(e.Error, maxErrorText))
	}
	_, err := tx.Exec(ctx, `INSERT INTO attempt_events (attempt_id, at, type, actor, from_status, to_status, reason,
			call_number, started_at, ended_at, outcome, status_code, provider_request_id, wire_calls, error)
		SELECT attempt_id, at, type, actor, from_status, to_status, reason, call_number, started_at, ended_at,
			outcome, status_code, provider_request_id, wire_calls, error
		FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
			$8::int[], $9::timestamptz[], $10::timestamptz[], $11::text[], $12::int[], $13::text[], $14::int[], $15::text[])
			WITH ORDINALITY AS u(attempt_id, at, type, actor, from_status, to_status, reason, call_number, started_at,
				ended_at, outcome, status_code, provider_request_id, wire_calls, error, n)
		ORDER BY n`,
		ids, at, types, actors, fromS, toS, reasons, callNos, started, ended, outcomes, codes, reqIDs, wires, errs)
	if err != nil {
		return fmt.Errorf("attempts: insert %d events: %w", n, err)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// OpenNew opens the first attempt of each of several subjects created in the
// caller's transaction tx: Open for many at once, with one statement for
// the attempts, one for their "opened" events and one for their submit
// jobs. The subjects must be new (made in tx, never seen by Open): none can
// have an open or succeeded attempt, so none of Open's checks for one is
// made; a subject that does have an open attempt, or one named twice, fails
// the whole call on the database's unique index. Validation is Open's.
func (s *Service) OpenNew(ctx context.Context, tx pgx.Tx, ps []OpenParams) ([]Attempt, error) {
	n := len(ps)
	if n == 0 {
		return nil, nil
	}
	os := make([]opening, n)
	for i, p := range ps {
		o, err := s.prepareOpen(p)
		if err != nil {
			return nil, err
		}
		os[i] = o
	}
	ids := make([]uuid.UUID, n)
	kinds, subjects, provs, ops, keys, refs := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n)
	payloads, sums := make([][]byte, n), make([][]byte, n)
	expires, created := make([]*time.Time, n), make([]time.Time, n)
	events := make([]Event, n)
	jobs := make([]river.InsertManyParams, n)
	for i, p := range ps {
		o := os[i]
		ids[i], kinds[i], subjects[i], provs[i], ops[i] = o.id, string(p.Kind), p.SubjectID, p.Provider, string(p.Input.Operation)
		keys[i], refs[i], payloads[i], sums[i] = o.key, o.ref, o.payload, o.sum[:]
		expires[i], created[i] = o.keyExpires, o.now
		events[i] = Event{AttemptID: o.id, At: o.now, Type: EventOpened, Actor: ActorOpener, ToStatus: StatusPending,
			Reason: fmt.Sprintf("opened %s via %s (key and reference made before any I/O)", p.Input.Operation, p.Provider)}
		jobs[i] = river.InsertManyParams{Args: SubmitAttemptArgs{AttemptID: o.id}, InsertOpts: s.submitOpts()}
	}
	inserted, err := s.queryByIDs(ctx, tx, `INSERT INTO attempts (id, kind, subject_id, provider, operation,
			idempotency_key, reference, payload, payload_sha256, key_expires_at, created_at, updated_at)
		SELECT id, kind, subject_id, provider, operation, idempotency_key, reference, payload, payload_sha256,
			key_expires_at, created_at, created_at
		FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bytea[],
			$9::bytea[], $10::timestamptz[], $11::timestamptz[])
			AS u(id, kind, subject_id, provider, operation, idempotency_key, reference, payload, payload_sha256,
				key_expires_at, created_at)
		RETURNING `+attemptColumns, ids, kinds, subjects, provs, ops, keys, refs, payloads, sums, expires, created)
	if err != nil {
		return nil, fmt.Errorf("attempts: open %d: %w", n, err)
	}
	if len(inserted) != n {
		return nil, fmt.Errorf("attempts: open %d: %d inserted", n, len(inserted))
	}
	if err := insertEvents(ctx, tx, events); err != nil {
		return nil, err
	}
	if _, err := s.riverClient(ctx).InsertManyTx(ctx, tx, jobs); err != nil {
		return nil, fmt.Errorf("attempts: enqueue %d submits: %w", n, err)
	}
	out := make([]Attempt, n)
	for i, id := range ids {
		out[i] = inserted[id]
		s.log.DebugContext(ctx, "attempt opened (effective when the caller commits)", "attempt_id", id,
			"kind", out[i].Kind, "subject_id", out[i].SubjectID, "provider", out[i].Provider, "reference", out[i].Reference)
	}
	return out, nil
}
