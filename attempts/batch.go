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
	"github.com/saldo/saldo/internal/pgplan"
	"github.com/saldo/saldo/internal/pgtext"
	"github.com/saldo/saldo/internal/sqlcols"
	"github.com/saldo/saldo/ledger"
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
	// failed, each exactly once), except that the owner adds its ledger
	// transactions to postings instead of posting them: the attempts core
	// posts every owner's together once the last owner has returned, so a
	// record batch locks every account it touches in one id order, never
	// one owner's accounts and then another's (issue 13 finding 3). The
	// owner posts nothing itself. Returning an error rolls every one of
	// their transitions back.
	AttemptsFinal(ctx context.Context, tx pgx.Tx, as []Attempt, postings *ledger.Deferred) error
}

func (s *Service) batchOwner(kind Kind) (BatchOwner, bool) {
	o, ok := s.owner(kind).(BatchOwner)
	return o, ok
}

func (s *Service) isBatchOwned(kind Kind) bool {
	_, ok := s.batchOwner(kind)
	return ok
}

// newBatchers builds the Execute phase batchers (they start no goroutine).
func (s *Service) newBatchers() {
	for name := range s.providers {
		s.providerNames = append(s.providerNames, name)
	}
	// The results batcher writes two batches at once: a batch holding calls
	// that went unknown or were rate limited applies them one by one
	// (transitions, events, lookup jobs) before its final ones, and with a
	// single flusher every other worker's result waited behind it. Under
	// saldo bench payouts with every fault kind at 5 %, two flushers took
	// the time to final from p50 1.8-3.1 s (p99 6.9-9.6 s) to p50 0.29 s
	// (p99 3.4-3.7 s) at the same payouts/s; without faults they cost about
	// 4 % (docs/performance.md). Two record batches lock ledger accounts in
	// id order (ledger_post_batch) and never share an attempt or a payout.
	//
	// The results batcher lingers 2 ms for a batch to fill once
	// the previous one had company: their batches write the merchants'
	// balance rows, which every ledger writer (opening, record and lookup
	// batches) holds from its ledger statement to its COMMIT, so fewer,
	// bigger batches wait less on each other. Under saldo bench payouts
	// with every fault kind at 5 % that took 1224-1243 payouts/s to
	// 1285-1375 (5 ms: 1243-1266); lingering in the read and call-mark
	// batchers too, on the way to the provider call, was slower
	// (1189-1218). Without faults it made no measurable difference.
	//
	// Calls' results and lookups' answers share one batcher
	// (results_batch.go): with every fault kind at 5 % its batches held
	// 20.7-21.7 calls and 6.0-6.6 lookups (14.1-14.8 and 3.8-4.4 when
	// each kind had its own batcher) and the server's CPU per payout fell
	// by 5-19 % in four alternating runs (docs/performance.md). Three
	// flushers split the same answers into smaller batches (12.4-13.3
	// calls) and did worse: 613-642 payouts/s against 721-865 with two.
	o := func(name string, flushers int, linger time.Duration) groupcommit.Options {
		return groupcommit.Options{Name: name, MaxBatch: 64, Flushers: flushers, Linger: linger}
	}
	s.firstSender = groupcommit.New(o("attempts_first_send", 1, 0), s.firstSendMany)
	s.getter = groupcommit.New(o("attempts_read", 1, 0), s.getMany)
	s.starter = groupcommit.New(o("attempts_call_start", 1, 0), s.startMany)
	s.results = groupcommit.New(o("attempts_results", 2, 2*time.Millisecond), s.resultsMany)
	for _, d := range s.cfg.ResolveSchedule {
		s.scheduleMicros = append(s.scheduleMicros, d.Microseconds())
	}
}

// BatchStats is how Execute's phases and the resolver's lookups were
// batched. Records and Resolutions count the batches of attempts_results
// holding calls' results and lookups' answers (a shared batch counts in
// both); their Fallbacks count those that failed as a whole and were
// recorded one by one (expected zero).
type BatchStats struct {
	FirstSends, Reads, Starts, Records, Resolutions groupcommit.Stats
	// Shared counts the transactions that recorded calls and lookups
	// together (resultsMany); Records and Resolutions count each of them.
	Shared int64
}

// BatchStats returns the counts so far.
func (s *Service) BatchStats() BatchStats {
	return BatchStats{FirstSends: s.firstSender.Stats(), Reads: s.getter.Stats(), Starts: s.starter.Stats(),
		Records: s.recordStats.stats(), Resolutions: s.lookupStats.stats(), Shared: s.sharedBatches.Load()}
}

// Batch statements reach their rows through "id = ANY ($1)" and only then
// join the unnest of per-row values, and go with pgplan.PerCall: planned on
// every call for the table as it is. A generic plan cached while the table
// was small (a few hundred rows, batches of 20 or more) scans the whole
// table for as long as the connection lives (docs/pitfalls.md).
//
// A status condition next to "id = ANY" is written "(a.status = 'pending')
// IS TRUE" (the same test: status is NOT NULL), which no index can serve:
// with a plain "a.status = 'pending'" the planner reached the rows through
// attempts_open (status, created_at), alone or ANDed with the primary key,
// whenever its statistics said few attempts were pending (most are final),
// and so read every pending entry of that index, and every dead one an
// attempt leaves there when it moves on, on each call. Under saldo bench
// payouts with faults the first-send mark took 6.7 ms a call, the busiest
// statement on the server (docs/performance.md).

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
	as, err := queryAttempts(ctx, db, sql, append([]any{pgplan.PerCall, uuidStrings(ids)}, args...)...)
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

// sendableSQL is what every call-start mark (firstSendSQL, startSQL)
// requires of the attempt a besides its call counts: it is not in review
// (a human decides; nothing is sent meanwhile, R18), and no other attempt
// of its subject has diverged, settled or not (diverged_at set: the
// provider reported it succeeded after it was resolved failed, R9, R19). A
// subject's next attempt exists only because the previous one was proven
// failed (R6); once the provider says that one paid, sending the next pays
// the recipient twice, and settling the divergence (booking what happened)
// does not make it less so: as Retry and the retry policy open no attempt
// after a divergence, settled or not (anyDiverged), none is sent after one.
// Execute holds such an attempt in review instead (holdIfSiblingDiverged),
// an attempt whose call was in flight when the divergence was recorded
// included (holdSiblings skips it then).
//
// Diverged attempts are rare, so the NOT EXISTS costs one probe of the
// subject's attempts (attempts_subject, a handful of rows) or of the tiny
// partial index attempts_diverged, per attempt marked. OFFSET 0 keeps it a
// probe per row: never an anti-join hashing a whole table, whatever the
// plan (docs/pitfalls.md, "A correlated EXISTS can become a hashed scan").
// Together with lateConflict flagging the unsent attempts of the subject
// for review in the divergence's own transaction, a mark that waits on
// that transaction's row lock re-checks "NOT a.review" on the row as it
// committed, so no call starts after a divergence is recorded.
const sendableSQL = `NOT a.review AND NOT EXISTS (SELECT 1 FROM attempts d WHERE d.direction = a.direction
			AND d.subject_id = a.subject_id AND d.diverged_at IS NOT NULL OFFSET 0)`

// firstSendSQL marks the first call of each attempt of a batch in flight
// when it is due and nothing else needs checking: pending, never called,
// not reported processing, no re-send delay pending, a provider this
// process has, a payload matching its sha256 (R5), not in review and no
// unsettled divergence on another attempt of its subject (sendableSQL). The
// attempts it returns are ready for their first call; Execute takes the
// others down its checked path.
const firstSendSQL = `UPDATE attempts a SET call_count = 1, call_started_at = $2, call_deadline_at = $4, next_send_at = NULL,
		updated_at = $2
	FROM unnest($1::uuid[]) AS u(uid)
	WHERE a.id = ANY ($1::uuid[]) AND a.id = u.uid AND (a.status = 'pending') IS TRUE AND a.call_count = 0
		AND a.calls_recorded = 0
		AND a.provider_state IS NULL AND (a.next_send_at IS NULL OR a.next_send_at <= $2)
		AND a.provider = ANY ($3::text[]) AND sha256(a.payload) = a.payload_sha256
		AND ` + sendableSQL + `
	RETURNING ` + attemptColumns

// firstSendMany runs firstSendSQL for a batch; an attempt not ready for a
// first send is answered with the zero Attempt.
func (s *Service) firstSendMany(ctx context.Context, ids []uuid.UUID) []groupcommit.Result[Attempt] {
	out := make([]groupcommit.Result[Attempt], len(ids))
	now := s.clock.Now()
	marked, err := s.queryByIDs(ctx, s.pool, firstSendSQL, ids, now, s.providerNames, now.Add(s.cfg.StaleCallAfter))
	for i, id := range ids {
		if err != nil {
			out[i].Err = fmt.Errorf("attempts: mark first call in flight: %w", err)
			continue
		}
		// An attempt named twice in a batch (two executors at once) is
		// updated once: only its first executor may call (R12); the other
		// takes the checked path, which sees the call in flight.
		out[i].Value = marked[id]
		delete(marked, id)
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
// call since the attempt was read, the provider is not processing it, and
// it may still be sent (sendableSQL: not in review, no unsettled
// divergence on another attempt of its subject).
const startSQL = `UPDATE attempts a SET call_count = u.call_no, call_started_at = u.started,
		call_deadline_at = u.started + $4::interval, next_send_at = NULL, updated_at = u.started
	FROM unnest($1::uuid[], $2::int[], $3::timestamptz[]) AS u(uid, call_no, started)
	WHERE a.id = ANY ($1::uuid[]) AND a.id = u.uid AND (a.status = 'pending') IS TRUE AND a.call_count = u.call_no - 1
		AND a.calls_recorded = u.call_no - 1 AND a.provider_state IS DISTINCT FROM 'processing'
		AND ` + sendableSQL + `
	RETURNING a.id, a.call_count`

// startMany marks the calls of a batch in flight in one statement; each
// answer says whether that request's mark took: the attempt's and the
// call's, so that of two executors of one attempt asking for different
// calls (one of them read it before a call was recorded) the one whose
// call number was applied is told so, as one at a time.
func (s *Service) startMany(ctx context.Context, reqs []startReq) []groupcommit.Result[bool] {
	out := make([]groupcommit.Result[bool], len(reqs))
	ids, calls, started := make([]string, len(reqs)), make([]int32, len(reqs)), make([]time.Time, len(reqs))
	for i, r := range reqs {
		ids[i], calls[i], started[i] = r.id.String(), int32(r.callNo), r.started
	}
	type call struct {
		id uuid.UUID
		no int
	}
	rows, err := s.pool.Query(ctx, startSQL, pgplan.PerCall, ids, calls, started, s.cfg.StaleCallAfter)
	marked := map[call]bool{}
	if err == nil {
		var id uuid.UUID
		var no int32
		_, err = pgx.ForEachRow(rows, []any{&id, &no}, func() error { marked[call{id, int(no)}] = true; return nil })
	}
	for i, r := range reqs {
		if err != nil {
			out[i].Err = fmt.Errorf("attempts: mark call in flight: %w", err)
			continue
		}
		// Named twice in a batch for the same call: the row was updated
		// once, so only the first of its executors may call (R12).
		k := call{r.id, r.callNo}
		out[i].Value = marked[k]
		delete(marked, k)
	}
	return out
}

// recordMany records a batch of call results: the attempts a BatchOwner
// owns in one transaction (recordBatch), the others one transaction each.
// If the shared transaction fails, nothing of it committed, and its
// attempts are recorded one by one instead.
func (s *Service) recordMany(ctx context.Context, reqs []recordReq) []groupcommit.Result[recorded] {
	out := make([]groupcommit.Result[recorded], len(reqs))
	together, alone := s.splitRecords(reqs, make(map[uuid.UUID]bool, len(reqs)))
	// A call alone in its batch takes the batch statement too: it records
	// and moves it in two statements where recordOne takes four, and posts
	// its ledger effects with the owner's batch path.
	if len(together) > 0 {
		batch := make([]recordReq, len(together))
		for k, i := range together {
			batch[k] = reqs[i]
		}
		res, err := s.recordBatch(ctx, batch)
		if err == nil {
			for k, i := range together {
				out[i].Value = res[k]
			}
			together = nil
		} else {
			// Not expected (every outcome has a place in the batch): worth
			// an error, though nothing is lost.
			s.recordFallback()
			s.log.ErrorContext(ctx, "attempts: recording a batch of calls failed; recording them one by one, each only if it did not commit",
				"batch", len(batch), "error", err)
			together = s.recordedAfterAll(ctx, reqs, together, out)
		}
	}
	for _, i := range append(alone, together...) {
		out[i].Value, out[i].Err = s.recordOne(ctx, reqs[i])
	}
	return out
}

// splitRecords gives the calls of reqs recorded together, those of
// attempts a BatchOwner owns, and the others, recorded alone. An attempt
// named twice (it cannot have two calls in flight, but the batch statement
// would update its row once), or already in seen, is recorded on its own;
// the attempts put together are added to seen.
func (s *Service) splitRecords(reqs []recordReq, seen map[uuid.UUID]bool) (together, alone []int) {
	for i, r := range reqs {
		if _, ok := s.batchOwner(r.a.Kind); ok && !seen[r.a.ID] {
			seen[r.a.ID] = true
			together = append(together, i)
			continue
		}
		alone = append(alone, i)
	}
	return together, alone
}

// recordedAfterAll is what recordMany does before redoing a failed record
// batch one call at a time: the error may be a lost COMMIT answer, after
// which the batch did commit (docs/pitfalls.md), and recording its calls again
// would add call events, metrics and owner work twice. It reads the
// attempts of reqs[idx...]: a call the database shows recorded
// (calls_recorded has reached it) is answered from the attempt as it
// stands; the others are returned to be recorded one by one. If the read
// fails, every one of them is answered with that error: its call stays in
// flight, so the next execution resolves it by lookup (R14), never by a
// re-send.
func (s *Service) recordedAfterAll(ctx context.Context, reqs []recordReq, idx []int, out []groupcommit.Result[recorded]) []int {
	ids := make([]uuid.UUID, len(idx))
	for k, i := range idx {
		ids[k] = reqs[i].a.ID
	}
	now := s.clock.Now()
	found, err := s.queryByIDs(ctx, s.pool, `SELECT `+attemptColumns+` FROM attempts WHERE id = ANY ($1::uuid[])`, ids)
	if err != nil {
		for _, i := range idx {
			out[i].Err = fmt.Errorf("attempts: a record batch failed and what it committed cannot be read: %w", err)
		}
		return nil
	}
	var redo []int
	for _, i := range idx {
		a, ok := found[reqs[i].a.ID]
		if !ok || a.CallsRecorded < reqs[i].callNo {
			redo = append(redo, i)
			continue
		}
		r := recorded{a: a}
		if a.Status == StatusPending && a.NextSendAt != nil && a.NextSendAt.After(now) {
			r.retryIn = a.NextSendAt.Sub(now)
		}
		out[i].Value = r
		s.log.WarnContext(ctx, "attempts: a record batch answered an error but committed; its call is not recorded again",
			"attempt_id", a.ID, "kind", a.Kind, "provider", a.Provider, "reference", a.Reference, "call", reqs[i].callNo,
			"status", a.Status)
	}
	return redo
}

// recordSQL records each call of a batch, and moves the attempts whose
// call gave a definitive answer (to_status succeeded or failed) to that
// final status when the state machine allows it from their current status
// and the answer names no provider id other than the recorded one, and the
// pending attempts whose call's fate is unknown (to_status unknown) to
// unknown, with their first lookup due at $10: what transition does one
// attempt at a time. An unknown call's answer that acknowledged something
// (ack: a provider id, a 409 "key in use") is kept with it, as acknowledge
// does, when it names no other provider id. A call that may go out again
// (retry_at: not sent, rate limited, credentials refused) schedules its
// re-send when the attempt is still pending and this was its latest call,
// as applyOutcome does. The CTE o locks the attempts first (in id order;
// materialized, so a nested loop never locks them again) and gives their
// status before the statement: from_status, moves (whether this statement
// makes the transition) and retry (whether it scheduled the re-send).
var recordSQL = `WITH o AS MATERIALIZED (SELECT id, status, provider, provider_id, call_count FROM attempts
		WHERE id = ANY ($1::uuid[]) ORDER BY id FOR UPDATE)
	UPDATE attempts a SET calls_recorded = GREATEST(a.calls_recorded, m.call_no),
		call_ended_at = $9, last_error = m.err, updated_at = $9,
		status = CASE WHEN m.moves THEN m.to_status ELSE a.status END,
		provider_id = CASE WHEN m.moves THEN COALESCE(a.provider_id, m.u_provider_id) ELSE a.provider_id END,
		failure_code = CASE WHEN m.moves THEN COALESCE(m.u_failure_code, a.failure_code) ELSE a.failure_code END,
		failure_reason = CASE WHEN m.moves THEN COALESCE(m.u_failure_reason, a.failure_reason) ELSE a.failure_reason END,
		data = CASE WHEN m.moves THEN COALESCE(m.u_data::jsonb, a.data) ELSE a.data END,
		resolved_at = CASE WHEN m.moves AND m.final THEN $9 ELSE a.resolved_at END,
		resolved_by = CASE WHEN m.moves AND m.final THEN 'worker' ELSE a.resolved_by END,
		provider_state = CASE WHEN m.moves AND m.final THEN m.to_status ELSE a.provider_state END,
		unknown_at = CASE WHEN m.moves AND NOT m.final THEN $9 ELSE a.unknown_at END,
		next_lookup_at = CASE WHEN m.moves AND NOT m.final THEN $10 ELSE a.next_lookup_at END,
		acknowledged_at = CASE WHEN m.moves AND m.ack IS NOT NULL THEN COALESCE(a.acknowledged_at, $9)
			ELSE a.acknowledged_at END,
		acknowledgement = CASE WHEN m.moves AND m.ack IS NOT NULL THEN COALESCE(a.acknowledgement, m.ack)
			ELSE a.acknowledgement END,
		next_send_at = CASE WHEN m.moves THEN NULL WHEN m.retry THEN m.retry_at ELSE a.next_send_at END
	FROM (SELECT u.*, o.status AS from_status, u.to_status <> 'unknown' AS final,
			CASE WHEN u.to_status = 'unknown' THEN o.status = 'pending'
				ELSE u.to_status IS NOT NULL AND o.status IN ('pending', 'unknown')
			END AND (u.u_provider_id IS NULL OR o.provider_id IS NULL OR o.provider_id = u.u_provider_id)
			AND (u.u_provider_id IS NULL OR o.provider_id IS NOT NULL OR NOT EXISTS (SELECT 1 FROM attempts h
				WHERE h.provider = o.provider AND h.provider_id = u.u_provider_id
					AND h.id <> o.id)) AS moves,
			u.retry_at IS NOT NULL AND o.status = 'pending' AND o.call_count = u.call_no AS retry
		FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
				$11::text[], $12::timestamptz[])
			AS u(uid, call_no, err, to_status, u_provider_id, u_failure_code, u_failure_reason, u_data, ack, retry_at)
		JOIN o ON o.id = u.uid) m
	WHERE a.id = ANY ($1::uuid[]) AND a.id = m.uid
	RETURNING m.from_status, m.moves, m.retry, ` + qualifiedAttemptColumns

// recordBatch records calls of attempts owned by BatchOwners in one
// transaction: one statement records every call and moves the attempts
// whose definitive answer (succeeded, failed) the state machine allows to
// their final status, and the pending ones whose call's fate is unknown
// (with nothing acknowledged) to unknown; one statement inserts the call
// and transition events, and one the resolver jobs of the attempts gone
// unknown; the attempts made final go to their owners together; any other
// outcome goes through applyOutcome one attempt at a time, inside the same
// transaction.
func (s *Service) recordBatch(ctx context.Context, reqs []recordReq) ([]recorded, error) {
	var out []recorded
	// The attempts this batch makes final, the statement's (after.final)
	// and any a slow outcome below makes (transition), go to their owners
	// together, last (inTxFinals).
	err := s.inTxFinals(ctx, func(tx pgx.Tx, after *afterCommit) error {
		var err error
		out, err = s.recordBatchTx(ctx, tx, after, reqs)
		return err
	})
	return out, err
}

// recordBatchTx is recordBatch's work inside tx, an inTxFinals
// transaction (recordBatch's own, or one it shares with a batch of
// lookups: resultsMany).
func (s *Service) recordBatchTx(ctx context.Context, tx pgx.Tx, after *afterCommit, reqs []recordReq) ([]recorded, error) {
	out := make([]recorded, len(reqs))
	err := func() error {
		now := s.clock.Now()
		n := len(reqs)
		ids := make([]string, n)
		calls := make([]int32, n)
		errs, to, pids, codes, reasons, data, acks := make([]*string, n), make([]*string, n), make([]*string, n),
			make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
		// retryAt: when the calls that may go out again go (applyOutcome's
		// default case, set-based). The statement schedules their re-send
		// when the attempt is still pending at that call; otherwise nothing
		// is to be done, as in applyOutcome.
		retryAt := make([]*time.Time, n)
		for i, r := range reqs {
			ids[i], calls[i] = r.a.ID.String(), int32(r.callNo)
			errs[i] = sqlcols.Nullable(pgtext.Truncate(r.errText(), maxErrorText))
			ack := acknowledgement(r.sr)
			switch {
			case r.outcome == OutcomeSucceeded || r.outcome == OutcomeFailed:
				to[i] = ptr(string(r.outcome.Status()))
				pids[i], codes[i], reasons[i] = sqlcols.Nullable(r.sr.ProviderID), sqlcols.Nullable(r.sr.FailureCode), sqlcols.Nullable(r.sr.FailureReason)
				if len(r.sr.Data) > 0 && json.Valid(r.sr.Data) {
					data[i] = ptr(string(r.sr.Data))
				}
			case r.outcome == OutcomeUnknown || r.outcome == OutcomeInFlight:
				// What applyOutcome does with it, set-based: what the answer
				// acknowledged kept (acknowledge), then unknown. One that
				// named another provider id goes one by one (flagged for
				// review).
				to[i] = ptr(string(StatusUnknown))
				if ack != "" {
					acks[i] = ptr(pgtext.Truncate(fmt.Sprintf("call %d: %s", r.callNo, ack), maxErrorText))
					pids[i] = sqlcols.Nullable(r.sr.ProviderID)
				}
			case r.outcome.Resendable() && ack == "" && (r.outcome == OutcomeAuthRefused || r.callNo < s.cfg.MaxSends):
				// At MaxSends, maxedSends decides: one by one.
				retryAt[i] = ptr(now.Add(s.resendDelay(r)))
			}
		}
		type row struct {
			from  Status
			moved bool
			retry bool
			a     Attempt
		}
		rows, err := tx.Query(ctx, recordSQL, pgplan.PerCall, ids, calls, errs, to, pids, codes, reasons, data, now,
			now.Add(s.firstLookupDelay()), acks, retryAt)
		if err != nil {
			return err
		}
		got := make(map[uuid.UUID]row, n)
		for rows.Next() {
			var r row
			if r.a, err = scanAttemptAfter(rows, &r.from, &r.moved, &r.retry); err != nil {
				rows.Close()
				return err
			}
			got[r.a.ID] = r
		}
		if err := rows.Err(); err != nil {
			return err
		}
		events := make([]Event, 0, 2*n)
		var slow []int
		var resolvers []river.InsertManyParams
		for i, r := range reqs {
			g, ok := got[r.a.ID]
			if !ok {
				return fmt.Errorf("%w: attempt %s", ErrNotFound, r.a.ID)
			}
			s.afterCall(ctx, after, r)
			out[i].a = g.a
			events = append(events, r.callEvent(now))
			if !g.moved {
				if retryAt[i] != nil {
					if g.retry {
						out[i].retryIn = retryAt[i].Sub(now)
					}
					continue
				}
				slow = append(slow, i)
				continue
			}
			reason := callReason(r.callNo, r.sr.Exchange.StatusCode, r.outcome)
			if g.a.Status == StatusUnknown {
				reason = r.unknownReason()
				resolvers = append(resolvers, river.InsertManyParams{Args: ResolveAttemptArgs{AttemptID: g.a.ID},
					InsertOpts: s.resolveOptsFor(g.a)})
			} else {
				after.final(g.a)
			}
			na, from := g.a, g.from
			events = append(events, Event{AttemptID: na.ID, At: now, Type: EventTransition, Actor: ActorWorker,
				FromStatus: from, ToStatus: na.Status, Reason: reason})
			s.afterTransition(ctx, after, na, from, ActorWorker, reason)
		}
		// Call events first, then transition events: each attempt's events
		// keep their order.
		if err := insertEvents(ctx, tx, events); err != nil {
			return err
		}
		if len(resolvers) > 0 {
			if _, err := s.riverClient(ctx).InsertManyTx(ctx, tx, resolvers); err != nil {
				return fmt.Errorf("attempts: enqueue %d resolvers: %w", len(resolvers), err)
			}
		}
		// The calls the statement did not move (rate limited, not sent,
		// processing, an acknowledged unknown...) one by one, before the
		// ledger (inTxFinals runs finalTogether after this function): it
		// locks the merchants' balance rows, which must be held for as
		// short a time as possible before COMMIT. Applied after it, their round trips
		// (transitions, events, lookup jobs) ran under those locks, and
		// under provider faults the record batches queued behind each other
		// on the merchants' rows (saldo bench payouts --faults).
		for _, i := range slow {
			if out[i], err = s.applyOutcome(ctx, tx, after, out[i].a, reqs[i]); err != nil {
				return err
			}
		}
		return nil
	}()
	return out, err
}

// finalTogether hands attempts moved to a final status to their owners,
// each owner's together, and the attempts whose divergence the transaction
// recorded (holds) to their HoldOwners, then posts every owner's ledger
// transactions with one PostMany (ledger.Deferred): all the accounts of the
// record batch, the holds' included, are locked in one id order, as every
// other ledger writer locks them (docs/pitfalls.md).
func (s *Service) finalTogether(ctx context.Context, tx pgx.Tx, moved, holds []Attempt) error {
	byOwner := map[BatchOwner][]Attempt{}
	var owners []BatchOwner
	for _, a := range moved {
		o, ok := s.batchOwner(a.Kind)
		if !ok {
			return fmt.Errorf("%w: %s", ErrNoOwner, a.Kind)
		}
		if _, seen := byOwner[o]; !seen {
			owners = append(owners, o)
		}
		byOwner[o] = append(byOwner[o], a)
	}
	var postings ledger.Deferred
	for _, o := range owners {
		if err := o.AttemptsFinal(ctx, tx, byOwner[o], &postings); err != nil {
			return fmt.Errorf("attempts: owner refused %d final attempts: %w", len(byOwner[o]), err)
		}
	}
	for _, a := range holds {
		if o, ok := s.owner(a.Kind).(HoldOwner); ok {
			if err := o.DivergenceHold(ctx, tx, a, &postings); err != nil {
				return fmt.Errorf("attempts: hold of diverged %s: %w", a.ID, err)
			}
		}
	}
	if err := postings.Post(ctx, tx); err != nil {
		return fmt.Errorf("attempts: ledger effects of %d final attempts and %d holds: %w", len(moved), len(holds), err)
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
		fromS[i], toS[i], reasons[i] = sqlcols.Nullable(string(e.FromStatus)), sqlcols.Nullable(string(e.ToStatus)), sqlcols.Nullable(e.Reason)
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
		outcomes[i], reqIDs[i], errs[i] = sqlcols.Nullable(e.Outcome), sqlcols.Nullable(e.ProviderRequestID), sqlcols.Nullable(pgtext.Truncate(e.Error, maxErrorText))
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
