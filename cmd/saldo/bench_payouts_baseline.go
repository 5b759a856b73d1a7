package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/intent"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/ledger/ledgerbench"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/payouts/payoutsbench"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// The payout-shaped baseline of `saldo bench payouts` (issue 19, decision
// 0004 option 2). It asks of the payouts pipeline what the pgbench-shaped
// baseline asks of ledger.Post: does saldo do a payout's work as cheaply
// as plain SQL could?
//
// Each of its workers makes one payout at a time with plain pgx SQL, in
// the same tables (so the same indexes, constraints and triggers), writing
// the rows a payout without faults writes, one commit per phase:
//   - open: the client key (payout_requests), the attempt, its "opened"
//     event, its River submit job (the row River's InsertManyTx writes, on
//     a queue no River client works, so nothing else ever fetches it), the
//     payout, and the reserve through the ledger's own ledger_post;
//   - send: the job taken (state running, as River's fetch sets it) and the
//     call marked in flight (firstSendSQL's columns), then the same HTTP
//     exchange with the same simulator, through the same adapter;
//   - record: the attempt succeeded (recordSQL's columns), the call and
//     transition events, the payout succeeded, the job completed (as River's
//     completer sets it) and the settle through ledger_post.
//
// Its payouts are balanced and final when it returns: every reserve is
// settled, every attempt succeeded with the history the audit replays,
// every job completed. So they stay in the bench's database, and `audit
// verify` (run after the last measurement) reads them with the pipeline's.
//
// What it leaves out is what the pipeline does beyond those rows: River's
// polling, its leader and notifications, the attempts core's checks before
// a send, group commit's bookkeeping, the notification endpoints read at
// the final status, logs and metrics. That is the price the ratio shows.
// It runs without faults: with no resolution path (lookups, resolvers,
// review) it cannot honestly handle an unknown answer, and stops on one.

// baselineQueue is the River queue of the baseline's submit jobs: no River
// client works it, so a job a stopped run left available is never sent.
const baselineQueue = "payout_baseline"

// riverLiveStatesMask is the unique_states River writes for the submit
// jobs (attempts' liveJobStates: available, pending, retryable, running,
// scheduled) as River's uniquestates.UniqueStatesToBitmask encodes them:
// available is bit 0 (1), pending bit 4 (16), retryable bit 5 (32),
// running bit 6 (64), scheduled bit 7 (128) of the byte.
const riverLiveStatesMask = 1 + 16 + 32 + 64 + 128

// baselineMerchant is one of the baseline's merchants and its accounts.
type baselineMerchant struct {
	id                  string
	available, reserved int64
}

// payoutBaseline is the prepared baseline: merchants funded, connections
// and the simulator warmed up. Measure it in rounds, then Close it.
type payoutBaseline struct {
	pool      *pgxpool.Pool
	prov      *sim.Provider
	srv       *sim.Server // nil with --sim-url
	caps      providers.Capabilities
	workers   int
	merchants []baselineMerchant
	clearing  [payouts.ClearingShards]int64
	amount    money.Amount
	dest      *providers.Destination
	destJSON  string
	runID     string
	riverID   string // attempted_by, as River's client id
	stmts     func() int64
	pipelined bool // one round trip per phase (phase)
	samples   []baselineSample
}

type baselineSample struct {
	payouts        int64
	elapsed        time.Duration
	latencies      []time.Duration
	client, server time.Duration
	statements     int64
	busy           float64
}

// baselineResult summarises the baseline's samples.
type baselineResult struct {
	Payouts              int64
	Elapsed              time.Duration
	PerSecond            float64
	P50, P99             time.Duration
	ClientCPU, ServerCPU time.Duration // per payout
	Statements           float64       // per payout
	MachineCPU           float64       // share of all cores busy (0..1)
}

func (r baselineResult) String() string {
	cpu := ""
	if r.ServerCPU > 0 {
		cpu = fmt.Sprintf(", CPU/payout client %.0f us server %.0f us", float64(r.ClientCPU)/1e3, float64(r.ServerCPU)/1e3)
	}
	if r.Statements > 0 {
		cpu += fmt.Sprintf(", %.2f statements/payout", r.Statements)
	}
	return fmt.Sprintf("payout-shaped baseline: %d payouts final in %s (%.1f/s), time to final p50 %.1f ms p99 %.1f ms%s, machine CPU %.0f%%",
		r.Payouts, r.Elapsed.Round(time.Millisecond), r.PerSecond, float64(r.P50)/1e6, float64(r.P99)/1e6, cpu, 100*r.MachineCPU)
}

// preparePayoutBaseline makes the baseline's merchants (funded like the
// pipeline's), their accounts and the provider's clearing shards, starts
// its simulator (o.SimURL's, else one in process without faults, like the
// pipeline's but for the faults) and warms up for o.Warmup.
func preparePayoutBaseline(ctx context.Context, pool *pgxpool.Pool, o payoutsbench.Options, pipelined bool, stmts func() int64) (*payoutBaseline, error) {
	b := &payoutBaseline{pool: pool, workers: max(o.Workers, 1), stmts: stmts, pipelined: pipelined,
		runID:  fmt.Sprintf("bl%d", time.Now().UnixNano()%1_000_000_000),
		amount: money.MustParse("1.00", "BRL")}
	host, _ := os.Hostname()
	b.riverID = fmt.Sprintf("%s_%s", host, time.Now().UTC().Format("2006_01_02T15_04_05_000000"))
	simURL := o.SimURL
	if simURL == "" {
		b.srv = sim.NewServer(sim.Config{Seed: time.Now().UnixNano(), HangFor: 10 * time.Second}).Start()
		simURL = b.srv.URL()
	}
	httpSettings := providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 2 * time.Second}
	caps, err := sim.FetchCapabilities(ctx, simURL, httpSettings)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("payout-shaped baseline: sim at %s: %w", simURL, err)
	}
	b.caps = caps
	b.prov = sim.NewProvider(simURL, sim.WithHTTPSettings(httpSettings), sim.WithCapabilities(caps))
	if b.dest, err = payouts.ValidateDestination(providers.OpPixTransfer,
		&providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "bench@example.com"}}); err != nil {
		b.Close()
		return nil, err
	}
	d, err := json.Marshal(b.dest)
	if err != nil {
		b.Close()
		return nil, err
	}
	b.destJSON = string(d)
	if err := b.setup(ctx, max(o.Merchants, 1)); err != nil {
		b.Close()
		return nil, err
	}
	if o.Warmup > 0 {
		if _, err := b.drive(ctx, o.Warmup); err != nil {
			b.Close()
			return nil, fmt.Errorf("payout-shaped baseline warm-up: %w", err)
		}
	}
	return b, nil
}

// setup creates and funds the merchants and makes every account a payout
// touches, committed before any payout (as payouts.prepareAccounts does).
func (b *payoutBaseline) setup(ctx context.Context, n int) error {
	cur := b.amount.Currency()
	for i := range n {
		id := fmt.Sprintf("%s_%d", b.runID, i)
		if _, err := merchants.Create(ctx, b.pool, id, "bench baseline merchant"); err != nil {
			return err
		}
		if _, err := merchants.Fund(ctx, b.pool, merchants.Funding{MerchantID: id,
			Amount: money.MustParse("1000000000.00", "BRL"), Key: "bench", Reason: "bench funding", Actor: "bench"}); err != nil {
			return err
		}
		av, err := ledger.EnsureAccount(ctx, b.pool, ledger.MerchantAvailable(id, cur))
		if err != nil {
			return err
		}
		re, err := ledger.EnsureAccount(ctx, b.pool, ledger.MerchantReserved(id, cur))
		if err != nil {
			return err
		}
		b.merchants = append(b.merchants, baselineMerchant{id: id, available: av.ID, reserved: re.ID})
	}
	for k := range payouts.ClearingShards {
		// payouts' clearingShard: shard 0 is the provider's own clearing
		// account, shard k its owner "<provider>.<kk>".
		spec := ledger.ProviderClearing(b.prov.Name(), cur)
		if k > 0 {
			spec.OwnerID = fmt.Sprintf("%s.%02d", b.prov.Name(), k)
		}
		a, err := ledger.EnsureAccount(ctx, b.pool, spec)
		if err != nil {
			return err
		}
		b.clearing[k] = a.ID
	}
	return nil
}

// Close stops the baseline's simulator.
func (b *payoutBaseline) Close() {
	if b.srv != nil {
		b.srv.Close()
	}
}

// Duplicates is the baseline simulator's oracle: references paid more
// than once (nil with --sim-url, whose oracle the pipeline's check reads).
func (b *payoutBaseline) Duplicates() []string {
	if b.srv == nil {
		return nil
	}
	return b.srv.Duplicates()
}

// Measure runs the baseline for d and records the sample: payouts whose
// record committed, and the CPU of this process and of the database's
// backends meanwhile (as payoutsbench and ledgerbench read them).
func (b *payoutBaseline) Measure(ctx context.Context, d time.Duration) error {
	client0, server0, machine0 := ledgerbench.ProcessCPU(), ledgerbench.BackendsCPU(ctx, b.pool), ledgerbench.MachineCPU()
	var stmts0 int64
	if b.stmts != nil {
		stmts0 = b.stmts()
	}
	sm, err := b.drive(ctx, d)
	if err != nil {
		return fmt.Errorf("payout-shaped baseline: %w", err)
	}
	sm.busy = ledgerbench.MachineCPU().BusySince(machine0)
	if b.stmts != nil {
		// Read before BackendsCPU, which sends a statement.
		sm.statements = b.stmts() - stmts0
	}
	client1, server1 := ledgerbench.ProcessCPU(), ledgerbench.BackendsCPU(ctx, b.pool)
	sm.client = client1 - client0
	if server0 > 0 && server1 > server0 {
		sm.server = server1 - server0
	}
	b.samples = append(b.samples, sm)
	return nil
}

// Result summarises every sample measured so far.
func (b *payoutBaseline) Result() baselineResult {
	var r baselineResult
	var all []time.Duration
	var client, server time.Duration
	var stmts int64
	var busy float64
	for _, sm := range b.samples {
		r.Payouts += sm.payouts
		r.Elapsed += sm.elapsed
		all = append(all, sm.latencies...)
		client, server, stmts = client+sm.client, server+sm.server, stmts+sm.statements
		busy += sm.busy * sm.elapsed.Seconds()
	}
	if r.Payouts == 0 {
		return r
	}
	slices.Sort(all)
	r.P50, r.P99 = all[len(all)/2], all[min(len(all)-1, len(all)*99/100)]
	r.PerSecond = float64(r.Payouts) / r.Elapsed.Seconds()
	r.ClientCPU, r.ServerCPU = client/time.Duration(r.Payouts), server/time.Duration(r.Payouts)
	r.Statements = float64(stmts) / float64(r.Payouts)
	r.MachineCPU = busy / r.Elapsed.Seconds()
	return r
}

// drive runs b.workers workers for d, each making one payout after the
// other, and stops at the first error.
func (b *payoutBaseline) drive(ctx context.Context, d time.Duration) (baselineSample, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		sm       baselineSample
		done     atomic.Int64
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for w := range b.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []time.Duration
			for seq := 0; time.Now().Before(deadline) && ctx.Err() == nil; seq++ {
				t0 := time.Now()
				if err := b.payout(ctx, b.merchants[(w*7919+seq)%len(b.merchants)]); err != nil {
					mu.Lock()
					if firstErr == nil && ctx.Err() == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					break
				}
				local = append(local, time.Since(t0))
				done.Add(1)
			}
			mu.Lock()
			sm.latencies = append(sm.latencies, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sm.elapsed, sm.payouts = time.Since(start), done.Load()
	return sm, firstErr
}

// The baseline's statements. Each writes the columns the pipeline's
// statement for that row writes (named beside it).

// openRequestSQL: payouts.claimClientKeys, one row, the same conflict
// arbiter (the client key's unique index).
const openRequestSQL = `INSERT INTO payout_requests (merchant_id, client_key, request_hash, object_kind, object_id, created_at)
	VALUES ($1, $2, $3, 'payout', $4, $5) ON CONFLICT DO NOTHING`

// openAttemptSQL: attempts.OpenNew.
const openAttemptSQL = `INSERT INTO attempts (id, kind, subject_id, provider, operation, idempotency_key, reference,
		payload, payload_sha256, key_expires_at, created_at, updated_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)`

// openEventSQL: attempts.insertEvent for the "opened" event.
const openEventSQL = `INSERT INTO attempt_events (attempt_id, at, type, actor, to_status, reason)
	VALUES ($1, $2, 'opened', 'opener', 'pending', $3)`

// openJobSQL: River's JobInsertFastMany for one submit job (the same
// conflict clause on unique_key), on baselineQueue.
const openJobSQL = `INSERT INTO river_job (args, created_at, kind, max_attempts, metadata, priority, queue, scheduled_at,
		state, tags, unique_key, unique_states)
	VALUES ($1::jsonb, now(), $2, 25, '{}'::jsonb, 1, $3, now(), 'available', '{}'::varchar(255)[], $4, $5::int::bit(8))
	ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND unique_states IS NOT NULL
		AND river_job_state_in_bitmask(unique_states, state)
	DO UPDATE SET kind = river_job.kind
	RETURNING id`

// openPayoutSQL: payouts.insertPayouts.
const openPayoutSQL = `INSERT INTO payouts (id, merchant_id, kind, operation, provider, amount, currency, destination,
		description, metadata, status, current_attempt_id, attempt_count, created_at, updated_at)
	VALUES ($1, $2, $3, $4, $5, $6::numeric, $7, $8::jsonb, NULL, '{}'::jsonb, 'processing', $9, 1, $10, $10)`

// postSQL: ledger.Post's call of ledger_post, for a two-legged move.
const baselinePostSQL = `SELECT outcome, detail FROM ledger_post($1, $2, $3, $4, $5::jsonb, NULL, NULL,
		$6::bigint[], ARRAY['', '']::text[], $7::numeric[], ARRAY[$8, $8]::text[])`

// sendJobSQL: River's JobGetAvailable for the one job (the baseline
// knows it: no queue to poll).
const sendJobSQL = `UPDATE river_job SET state = 'running', attempt = attempt + 1, attempted_at = $2,
		attempted_by = array_append(attempted_by, $3::text)
	WHERE id = $1 AND state = 'available'`

// sendMarkSQL: attempts' firstSendSQL.
const sendMarkSQL = `UPDATE attempts SET call_count = 1, call_started_at = $2, call_deadline_at = $3, next_send_at = NULL,
		updated_at = $2
	WHERE id = $1 AND status = 'pending' AND call_count = 0 AND calls_recorded = 0`

// recordAttemptSQL: attempts' recordSQL for a call answered succeeded.
const recordAttemptSQL = `UPDATE attempts SET calls_recorded = 1, call_ended_at = $2, last_error = NULL, updated_at = $2,
		status = 'succeeded', provider_id = $3, data = $4::jsonb, resolved_at = $2, resolved_by = 'worker',
		provider_state = 'succeeded', next_send_at = NULL
	WHERE id = $1 AND status = 'pending' AND call_count = 1 AND calls_recorded = 0`

// recordEventsSQL: attempts.insertEvents for the call and transition
// events, in one statement.
const recordEventsSQL = `INSERT INTO attempt_events (attempt_id, at, type, actor, from_status, to_status, reason,
		call_number, started_at, ended_at, outcome, status_code, provider_request_id, wire_calls, error)
	VALUES ($1, $2, 'call', 'worker', NULL, NULL, NULL, 1, $3, $4, 'succeeded', $5, $6, $7, NULL),
		($1, $2, 'transition', 'worker', 'pending', 'succeeded', $8, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`

// recordPayoutSQL: payouts' attemptsFinalSQL for a succeeded attempt.
const recordPayoutSQL = `UPDATE payouts SET status = 'succeeded', updated_at = $2 WHERE id = $1 AND status = 'processing'`

// recordJobSQL: River's JobSetStateIfRunningMany completing the job.
const recordJobSQL = `UPDATE river_job SET state = 'completed', finalized_at = $2 WHERE id = $1 AND state = 'running'`

// stmt is one statement of a phase, and what its answer must be.
type stmt struct {
	what  string
	sql   string
	args  []any
	check func(pgx.Rows) error
}

// one: the statement changes exactly one row.
func one(what, sql string, args ...any) stmt { return stmt{what, sql, args, rowsAffected(1)} }

// rowsAffected checks that a statement without RETURNING changed n rows.
func rowsAffected(n int64) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if got := rows.CommandTag().RowsAffected(); got != n {
			return fmt.Errorf("%d rows changed, want %d", got, n)
		}
		return nil
	}
}

// phase runs stmts in one transaction, one commit: in the pgbench-shaped
// form BEGIN, each statement and COMMIT are a round trip each (as pgbench
// and the ledger's pgbench-shaped baseline send them); pipelined, they go
// in one pgx batch, one round trip, which PostgreSQL runs as one implicit
// transaction (its answers are then checked after the commit: a wrong one
// stops the run all the same).
func (b *payoutBaseline) phase(ctx context.Context, stmts []stmt) error {
	if b.pipelined {
		batch := &pgx.Batch{}
		for _, s := range stmts {
			batch.Queue(s.sql, s.args...)
		}
		br := b.pool.SendBatch(ctx, batch)
		for _, s := range stmts {
			rows, err := br.Query()
			if err == nil {
				err = s.check(rows)
			}
			if err != nil {
				_ = br.Close()
				return fmt.Errorf("%s: %w", s.what, err)
			}
		}
		return br.Close()
	}
	return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		for _, s := range stmts {
			rows, err := tx.Query(ctx, s.sql, s.args...)
			if err == nil {
				err = s.check(rows)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", s.what, err)
			}
		}
		return nil
	})
}

// payout makes one payout of b.amount for merchant m: open, send, record,
// one commit each. Every statement must change exactly its rows; anything
// else is an error that stops the run (the bench's database is then not
// audited clean, which is what such an error deserves).
func (b *payoutBaseline) payout(ctx context.Context, m baselineMerchant) error {
	now := time.Now()
	cur := b.amount.Currency()
	pid := intent.NewID("po_")
	aid := uuid.New()
	ref := attempts.NewReference()
	key := uuid.NewString()
	in := providers.OperationInput{Operation: providers.OpPixTransfer, Amount: b.amount.Format(), Currency: cur.Code(),
		Destination: b.dest, Metadata: map[string]string{"saldo_payout_id": pid, "saldo_merchant_id": m.id}}
	payload, err := b.prov.EncodePayload(in, ref)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(payload)
	var keyExpires *time.Time
	if b.caps.IdempotencyKeys && b.caps.KeyLifetime > 0 {
		t := now.Add(b.caps.KeyLifetime)
		keyExpires = &t
	}
	hash := intent.RequestHash("payout", providers.OpPixTransfer, b.amount.String(), cur.Code(), b.dest, "", map[string]string(nil))
	args, err := json.Marshal(attempts.SubmitAttemptArgs{AttemptID: aid})
	if err != nil {
		return err
	}
	uniqueKey := sha256.Sum256([]byte("&kind=" + attempts.SubmitAttemptKind + "&args=" + string(args)))
	kind, op := string(attempts.KindPixTransfer), string(providers.OpPixTransfer)
	var jobID int64
	reserve, err := b.post(payouts.CauseReserve, aid, pid, m.id, m.available, m.reserved)
	if err != nil {
		return err
	}

	// Open.
	if err := b.phase(ctx, []stmt{
		one("client key", openRequestSQL, m.id, "bl-"+pid, hash, pid, now),
		one("attempt", openAttemptSQL, aid, kind, pid, b.prov.Name(), op, key, ref, payload, sum[:], keyExpires, now),
		one("opened event", openEventSQL, aid, now, fmt.Sprintf("opened %s via %s (key and reference made before any I/O)",
			op, b.prov.Name())),
		{"submit job", openJobSQL, []any{string(args), attempts.SubmitAttemptKind, baselineQueue, uniqueKey[:], riverLiveStatesMask},
			func(rows pgx.Rows) error {
				var err error
				jobID, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
				return err
			}},
		one("payout", openPayoutSQL, pid, m.id, kind, op, b.prov.Name(), b.amount.Decimal().String(), cur.Code(), b.destJSON, aid, now),
		// The reserve last, as the pipeline posts it: it locks the
		// merchant's balance rows until COMMIT.
		reserve,
	}); err != nil {
		return fmt.Errorf("open: %w", err)
	}

	// Send: the job taken and the call marked in flight (the bench's
	// StaleCallAfter, as payoutsbench sets it), then the call.
	started := time.Now()
	if err := b.phase(ctx, []stmt{
		one("take job", sendJobSQL, jobID, started, b.riverID),
		one("mark call", sendMarkSQL, aid, started, started.Add(30*time.Second)),
	}); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	sr := b.prov.Submit(ctx, providers.SubmitRequest{Operation: providers.OpPixTransfer, IdempotencyKey: key,
		Reference: ref, Payload: payload})
	if outcome := attempts.Classify(sr); outcome != attempts.OutcomeSucceeded {
		// No lookups, resolvers or review here: the attempt stays pending
		// with its reserve, and the run stops.
		return fmt.Errorf("attempt %s answered %s (HTTP %d, %v): the baseline has no resolution path; run it without faults",
			aid, outcome, sr.Exchange.StatusCode, sr.Exchange.Err)
	}

	// Record.
	ex := sr.Exchange
	var data *string
	if len(sr.Data) > 0 && json.Valid(sr.Data) {
		data = new(string(sr.Data))
	}
	var reqID *string
	if ex.ProviderRequestID != "" {
		reqID = &ex.ProviderRequestID
	}
	settle, err := b.post(payouts.CauseSettle, aid, pid, m.id, m.reserved, b.clearing[int(aid[0])%payouts.ClearingShards])
	if err != nil {
		return err
	}
	now = time.Now()
	if err := b.phase(ctx, []stmt{
		one("attempt", recordAttemptSQL, aid, now, sr.ProviderID, data),
		{"events", recordEventsSQL, []any{aid, now, ex.Started, ex.Ended, ex.StatusCode, reqID, ex.WireCalls,
			fmt.Sprintf("call 1: HTTP %d %s", ex.StatusCode, attempts.OutcomeSucceeded)}, rowsAffected(2)},
		one("payout", recordPayoutSQL, pid, now),
		one("complete job", recordJobSQL, jobID, now),
		// The settle last, as the pipeline posts it: it locks the
		// merchant's reserved account and a clearing shard until COMMIT.
		settle,
	}); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}

// post is the ledger_post statement moving b.amount from account from to
// account to, as payouts.moveInput names it (key, cause, description,
// metadata); its check wants every leg posted.
func (b *payoutBaseline) post(cause string, aid uuid.UUID, pid, merchant string, from, to int64) (stmt, error) {
	meta, err := json.Marshal(map[string]string{"payout_id": pid, "merchant_id": merchant})
	if err != nil {
		return stmt{}, err
	}
	amt := b.amount.Decimal()
	return stmt{cause, baselinePostSQL, []any{cause + ":" + aid.String(), cause, aid.String(),
		fmt.Sprintf("%s %s of %s %s", cause, b.amount, attempts.KindPixTransfer, pid), string(meta),
		[]int64{from, to}, []string{amt.Neg().String(), amt.String()}, b.amount.Currency().Code()},
		func(rows pgx.Rows) error {
			defer rows.Close()
			n := 0
			for rows.Next() {
				var outcome string
				var detail *string
				if err := rows.Scan(&outcome, &detail); err != nil {
					return err
				}
				if outcome != "posted" {
					return fmt.Errorf("ledger_post answered %s (%v)", outcome, detail)
				}
				n++
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if n != 2 {
				return fmt.Errorf("ledger_post answered %d legs, want 2", n)
			}
			return nil
		}}, nil
}
