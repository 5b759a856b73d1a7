// Package ledgerbench measures the ledger's write path against a plain-SQL
// baseline on the same database, for `saldo bench ledger` and for other
// benchmarks (payouts) that want the ledger figure.
//
// The ledger run posts random two-leg transfers between merchant accounts
// that forbid negatives, each with its own idempotency key, through
// ledger.Post on a pool (one round trip and one commit per transfer). The
// baseline has the shape of pgbench's TPC-B-like transaction reduced to a
// transfer: two balance UPDATEs and two history INSERTs per database
// transaction, on its own tables. It runs in two forms: "pgbench-shaped"
// (BEGIN, four statements, COMMIT: one round trip each, as pgbench sends
// them) and "pipelined" (the same four statements in one pgx batch, one round
// trip, one commit), so the comparison is honest about round trips.
package ledgerbench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// Options configure a run.
type Options struct {
	Accounts int           // number of accounts transfers move between (>= 2)
	Workers  int           // concurrent workers, one connection each
	Duration time.Duration // how long to run
	// Hot: every transfer debits the same account (a hot-account workload:
	// every transfer queues on one row lock).
	Hot bool
	// RunID distinguishes this run's accounts and keys from earlier runs in
	// the same database; empty means a random one.
	RunID string
	// Warmup runs the workload unmeasured first, so every connection has
	// compiled its functions and cached its plans (a fresh connection's
	// first Post pays for planning ledger_post's statements). Default 1s;
	// negative disables it.
	Warmup time.Duration
}

func (o *Options) defaults() error {
	if o.Accounts == 0 {
		o.Accounts = 50
	}
	if o.Workers == 0 {
		o.Workers = 8
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = time.Second
	}
	if o.Accounts < 2 || o.Workers < 1 || o.Duration < 0 {
		return fmt.Errorf("ledgerbench: need at least 2 accounts, 1 worker and a positive duration")
	}
	if o.RunID == "" {
		o.RunID = fmt.Sprintf("b%08x", rand.Uint32())
	}
	return nil
}

// Result is what one run measured.
type Result struct {
	Name      string
	Transfers int64 // committed transfers
	Refused   int64 // transfers refused for insufficient funds (not counted above)
	Elapsed   time.Duration
	PerSecond float64
	P50, P99  time.Duration
	// BytesPerTransfer is the growth of the run's history tables (heap,
	// indexes, TOAST) divided by Transfers; HeapBytes (heap and TOAST) and
	// IndexBytes split it. BalanceBytes is the growth of the table of
	// balances (updated in place: dead row versions that VACUUM reclaims)
	// divided by Transfers.
	BytesPerTransfer, HeapBytes, IndexBytes, BalanceBytes float64
	// WALBytes is the WAL written while the workload ran, divided by
	// Transfers: the records of this database's relations and the commit
	// records of their transactions when pg_walinspect can be used (a
	// superuser on PostgreSQL 15+), else the whole server's WAL
	// (WALServerWide), which on a shared server includes other databases'.
	WALBytes      float64
	WALServerWide bool
	// MachineCPU is the share of every core of the machine that was busy
	// while the workload ran (0..1), whoever used it: above 0.9 the run
	// was bound by the cores, below it by latency (commits, locks).
	MachineCPU float64
	// ClientCPU and ServerCPU are CPU time per transfer spent by this
	// process and by the database backends serving it (read from /proc;
	// zero when the server is not local). Unlike transfers/s they do not
	// depend on what else the machine is doing.
	ClientCPU, ServerCPU time.Duration
	// PerCommit is the average of transfers per database commit (1 but for
	// group commit).
	PerCommit float64
}

func (r Result) String() string {
	walScope := ""
	if r.WALServerWide {
		walScope = " (whole server)"
	}
	cpu := ""
	if r.ServerCPU > 0 {
		cpu = fmt.Sprintf("  CPU/transfer client %4.0f us server %4.0f us", us(r.ClientCPU), us(r.ServerCPU))
	}
	return fmt.Sprintf("%-36s %7.0f transfers/s  p50 %6.2f ms  p99 %6.2f ms%s  machine CPU %3.0f%%  WAL %5.0f B/transfer%s  (%d in %s, %d refused)",
		r.Name, r.PerSecond, ms(r.P50), ms(r.P99), cpu, 100*r.MachineCPU, r.WALBytes, walScope, r.Transfers, r.Elapsed.Round(time.Millisecond), r.Refused)
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// transferFunc performs one transfer from account index from to index to.
// round, worker and seq make a unique idempotency key. refused reports an
// expected refusal (insufficient funds).
type transferFunc func(ctx context.Context, round, worker, seq, from, to int, amount decimal.Decimal) (refused bool, err error)

// Workload is one prepared thing to measure: accounts created and funded,
// connections warmed up. Measure it once or in several rounds interleaved
// with other workloads (Compare), so that a machine whose load changes
// during the run treats every workload alike.
type Workload struct {
	name     string
	tables   []string // the history: written once per transfer
	balances string   // the balances: updated in place
	transfer transferFunc
	pool     *pgxpool.Pool
	o        Options
	rounds   int
	samples  []sample
	// commits counts the workload's commits so far; nil means one per
	// transfer.
	commits func() int64
}

type sample struct {
	latencies []time.Duration
	refused   int64
	elapsed   time.Duration
	bytes     int64
	heap      int64
	balances  int64
	wal       int64
	walServer bool
	busy      float64 // machine CPU busy share
	client    time.Duration
	server    time.Duration
	commits   int64
}

// Measure runs the workload for d and records the sample.
func (w *Workload) Measure(ctx context.Context, d time.Duration) error {
	before, heap0, bal0, lsn0, err := tablesSize(ctx, w.pool, w.balances, w.tables)
	if err != nil {
		return err
	}
	w.rounds++
	client0, server0 := ProcessCPU(), BackendsCPU(ctx, w.pool)
	machine0 := MachineCPU()
	var commits0 int64
	if w.commits != nil {
		commits0 = w.commits()
	}
	sm, err := drive(ctx, w.o, d, w.rounds, w.transfer)
	if err != nil {
		return fmt.Errorf("ledgerbench: %s: %w", w.name, err)
	}
	machine1 := MachineCPU()
	client1, server1 := ProcessCPU(), BackendsCPU(ctx, w.pool)
	sm.busy = machine1.BusySince(machine0)
	sm.commits = int64(len(sm.latencies)) + sm.refused
	if w.commits != nil {
		sm.commits = w.commits() - commits0
	}
	after, heap1, bal1, lsn1, err := tablesSize(ctx, w.pool, w.balances, w.tables)
	if err != nil {
		return err
	}
	sm.bytes, sm.heap, sm.balances = after-before, heap1-heap0, bal1-bal0
	sm.wal, sm.walServer = walBytes(ctx, w.pool, lsn0, lsn1)
	sm.client = client1 - client0
	if server0 > 0 && server1 > server0 {
		sm.server = server1 - server0
	}
	w.samples = append(w.samples, sm)
	return nil
}

// Result summarises every sample measured so far.
func (w *Workload) Result() Result {
	r := Result{Name: w.name}
	var all []time.Duration
	var bytes, heap, wal, balances int64
	var client, server time.Duration
	var commits int64
	var busy float64
	for _, sm := range w.samples {
		commits += sm.commits
		heap += sm.heap
		balances += sm.balances
		wal += sm.wal
		r.WALServerWide = r.WALServerWide || sm.walServer
		busy += sm.busy * sm.elapsed.Seconds()
		all = append(all, sm.latencies...)
		r.Refused += sm.refused
		r.Elapsed += sm.elapsed
		bytes += sm.bytes
		client += sm.client
		server += sm.server
	}
	r.Transfers = int64(len(all))
	if r.Transfers > 0 {
		slices.Sort(all)
		r.P50 = all[len(all)/2]
		r.P99 = all[len(all)*99/100]
		r.PerSecond = float64(r.Transfers) / r.Elapsed.Seconds()
		r.BytesPerTransfer = float64(bytes) / float64(r.Transfers)
		r.HeapBytes = float64(heap) / float64(r.Transfers)
		r.IndexBytes = r.BytesPerTransfer - r.HeapBytes
		r.BalanceBytes = float64(balances) / float64(r.Transfers)
		r.WALBytes = float64(wal) / float64(r.Transfers)
		r.MachineCPU = busy / r.Elapsed.Seconds()
		r.ClientCPU = client / time.Duration(r.Transfers)
		r.ServerCPU = server / time.Duration(r.Transfers)
	}
	if commits > 0 {
		r.PerCommit = float64(r.Transfers+r.Refused) / float64(commits)
	}
	return r
}

func (w *Workload) warmUp(ctx context.Context) error {
	if w.o.Warmup <= 0 {
		return nil
	}
	_, err := drive(ctx, w.o, w.o.Warmup, 0, w.transfer)
	if err != nil {
		return fmt.Errorf("ledgerbench: %s warm-up: %w", w.name, err)
	}
	return nil
}

// drive runs o.Workers workers for d and collects latencies.
func drive(ctx context.Context, o Options, d time.Duration, round int, fn transferFunc) (sample, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		sm       sample
		firstErr error
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(d)
	start := time.Now()
	for w := range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w)+1, uint64(time.Now().UnixNano())))
			local := make([]time.Duration, 0, 4096)
			var localRefused int64
			for seq := 0; time.Now().Before(deadline) && ctx.Err() == nil; seq++ {
				from := 0
				if !o.Hot {
					from = rng.IntN(o.Accounts)
				}
				to := rng.IntN(o.Accounts - 1)
				if to >= from {
					to++
				}
				amount := decimal.New(int64(1+rng.IntN(1000)), -2)
				t0 := time.Now()
				ref, err := fn(ctx, round, w, seq, from, to, amount)
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
						cancel()
					}
					break
				}
				if ref {
					localRefused++
					continue
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			sm.latencies = append(sm.latencies, local...)
			sm.refused += localRefused
			mu.Unlock()
		}()
	}
	wg.Wait()
	sm.elapsed = time.Since(start)
	return sm, firstErr
}

// tablesSize returns the total size of tables (heap, TOAST and indexes),
// the heap and TOAST part alone, the total size of the balances table, and
// the server's WAL flush position (pg_walinspect reads no further).
func tablesSize(ctx context.Context, pool *pgxpool.Pool, balancesTable string, tables []string) (total, heap, balances int64, lsn string, err error) {
	err = pool.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(t::regclass)), 0)::bigint,
		coalesce(sum(pg_table_size(t::regclass)), 0)::bigint, pg_total_relation_size($2::regclass),
		pg_current_wal_flush_lsn()::text
		FROM unnest($1::text[]) t`, tables, balancesTable).Scan(&total, &heap, &balances, &lsn)
	return total, heap, balances, lsn, err
}

// walBytes is the WAL between two positions that belongs to the pool's
// database: records touching its relations and the commit records of
// their transactions, read with pg_walinspect (created in the database if
// missing). Without it (not a superuser, PostgreSQL before 15) it is
// every byte between the positions, and serverWide is set.
func walBytes(ctx context.Context, pool *pgxpool.Pool, lsn0, lsn1 string) (n int64, serverWide bool) {
	var all int64
	if err := pool.QueryRow(ctx, `SELECT ($2::pg_lsn - $1::pg_lsn)::bigint`, lsn0, lsn1).Scan(&all); err != nil {
		return 0, true
	}
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`); err != nil {
		fmt.Fprintf(os.Stderr, "ledgerbench: WAL of the whole server (pg_walinspect: %v)\n", err)
		return all, true
	}
	err := pool.QueryRow(ctx, `
		WITH r AS MATERIALIZED (
			SELECT xid, resource_manager, record_length,
			       block_ref LIKE '%/' || (SELECT oid FROM pg_database WHERE datname = current_database()) || '/%' AS ours
			FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn))
		SELECT coalesce(sum(record_length), 0)::bigint FROM r
		WHERE ours OR (resource_manager = 'Transaction' AND xid IN (SELECT xid FROM r WHERE ours AND xid <> '0'))`,
		lsn0, lsn1).Scan(&n)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ledgerbench: WAL of the whole server (pg_walinspect: %v)\n", err)
		return all, true
	}
	return n, false
}

// PrepareLedger prepares the ledger.Post workload: it creates o.Accounts
// merchant accounts for the run, funds each from the platform funding
// account (generously, so transfers are not refused), and warms up. Each
// transfer is one ledger.Post on the pool with its own idempotency key: one
// round trip and one commit per transfer.
func PrepareLedger(ctx context.Context, pool *pgxpool.Pool, o Options) (*Workload, error) {
	return prepareLedger(ctx, pool, o, "ledger.Post", func(ctx context.Context, in ledger.TransactionInput) error {
		_, err := ledger.Post(ctx, pool, in)
		return err
	})
}

// PreparePoster prepares the same workload through a ledger.Poster (group
// commit: transfers that arrive while a batch commits share the next
// batch's round trip and commit). Close the returned Poster after the
// last Measure.
func PreparePoster(ctx context.Context, pool *pgxpool.Pool, o Options, po ledger.PosterOptions) (*Workload, *ledger.Poster, error) {
	p := ledger.NewPoster(pool, po)
	w, err := prepareLedger(ctx, pool, o, "ledger.Poster (group commit)", func(ctx context.Context, in ledger.TransactionInput) error {
		_, err := p.Post(ctx, in)
		return err
	})
	if err != nil {
		p.Close()
		return nil, nil, err
	}
	w.commits = func() int64 { return p.Stats().Batches }
	return w, p, nil
}

func prepareLedger(ctx context.Context, pool *pgxpool.Pool, o Options, name string, post func(context.Context, ledger.TransactionInput) error) (*Workload, error) {
	if err := CheckPool(pool, o); err != nil {
		return nil, err
	}
	if err := o.defaults(); err != nil {
		return nil, err
	}
	funding, err := ledger.EnsureAccount(ctx, pool, ledger.PlatformFunding(money.BRL))
	if err != nil {
		return nil, err
	}
	// Each workload gets its own accounts, so workloads measured in turns
	// do not share row locks or balances.
	run := fmt.Sprintf("%s_%x", o.RunID, rand.Uint32())
	ids := make([]int64, o.Accounts)
	for i := range ids {
		acc, err := ledger.EnsureAccount(ctx, pool, ledger.MerchantAvailable(fmt.Sprintf("%s_%d", run, i), money.BRL))
		if err != nil {
			return nil, err
		}
		ids[i] = acc.ID
		amount := decimal.NewFromInt(1_000_000)
		if o.Hot && i == 0 {
			amount = decimal.NewFromInt(1_000_000_000)
		}
		if _, err := ledger.Post(ctx, pool, ledger.TransactionInput{
			IdempotencyKey: fmt.Sprintf("%s-fund-%d", run, i), CauseKind: "bench", CauseID: o.RunID,
			Description: "bench funding",
			Postings: []ledger.PostingInput{
				{AccountID: funding.ID, Amount: amount.Neg(), Currency: money.BRL},
				{AccountID: ids[i], Amount: amount, Currency: money.BRL},
			},
		}); err != nil {
			return nil, err
		}
	}
	if o.Hot {
		name += " (hot)"
	}
	w := &Workload{name: name, balances: "ledger_accounts", tables: []string{"ledger_transactions", "ledger_postings"}, pool: pool, o: o}
	w.transfer = func(ctx context.Context, round, worker, seq, from, to int, amount decimal.Decimal) (bool, error) {
		err := post(ctx, ledger.TransactionInput{
			IdempotencyKey: fmt.Sprintf("%s-%d-%d-%d", run, round, worker, seq),
			CauseKind:      "bench",
			CauseID:        o.RunID,
			Postings: []ledger.PostingInput{
				{AccountID: ids[from], Amount: amount.Neg(), Currency: money.BRL},
				{AccountID: ids[to], Amount: amount, Currency: money.BRL},
			},
		})
		if errors.Is(err, ledger.ErrInsufficientFunds) {
			return true, nil
		}
		return false, err
	}
	return w, w.warmUp(ctx)
}

// Ledger prepares the ledger.Post workload and measures it for o.Duration.
func Ledger(ctx context.Context, pool *pgxpool.Pool, o Options) (Result, error) {
	w, err := PrepareLedger(ctx, pool, o)
	if err != nil {
		return Result{}, err
	}
	if err := w.Measure(ctx, w.o.Duration); err != nil {
		return Result{}, err
	}
	return w.Result(), nil
}

// BaselineMode selects how the baseline sends its statements.
type BaselineMode int

// The baseline modes.
const (
	// PgbenchShaped: BEGIN; UPDATE; UPDATE; INSERT; INSERT; COMMIT, each a
	// round trip, as pgbench sends its TPC-B-like script.
	PgbenchShaped BaselineMode = iota
	// Pipelined: the four statements in one pgx batch (an implicit
	// transaction): one round trip, one commit.
	Pipelined
)

const baselineSchema = `
CREATE TABLE IF NOT EXISTS saldo_bench_accounts (
    run     text NOT NULL,
    id      int NOT NULL,
    balance numeric NOT NULL,
    PRIMARY KEY (run, id)
);
CREATE TABLE IF NOT EXISTS saldo_bench_history (
    run        text NOT NULL,
    account_id int NOT NULL,
    delta      numeric NOT NULL,
    mtime      timestamptz NOT NULL DEFAULT now()
);`

// PrepareBaseline prepares plain SQL doing the same transfers: two balance
// UPDATEs (in id order, so workers never deadlock) and two history INSERTs
// per transaction, on tables saldo_bench_accounts and saldo_bench_history
// (created if missing).
func PrepareBaseline(ctx context.Context, pool *pgxpool.Pool, o Options, mode BaselineMode) (*Workload, error) {
	if err := CheckPool(pool, o); err != nil {
		return nil, err
	}
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, baselineSchema); err != nil {
		return nil, fmt.Errorf("ledgerbench: baseline schema: %w", err)
	}
	run := fmt.Sprintf("%s-%d", o.RunID, mode)
	if _, err := pool.Exec(ctx, `INSERT INTO saldo_bench_accounts (run, id, balance)
		SELECT $1, g, 1000000 FROM generate_series(0, $2 - 1) g ON CONFLICT DO NOTHING`, run, o.Accounts); err != nil {
		return nil, fmt.Errorf("ledgerbench: baseline accounts: %w", err)
	}
	const (
		upd = `UPDATE saldo_bench_accounts SET balance = balance + $3 WHERE run = $1 AND id = $2`
		ins = `INSERT INTO saldo_bench_history (run, account_id, delta) VALUES ($1, $2, $3)`
	)
	name := "baseline, pgbench-shaped"
	if mode == Pipelined {
		name = "baseline, pipelined"
	}
	if o.Hot {
		name += " (hot)"
	}
	w := &Workload{name: name, balances: "saldo_bench_accounts", tables: []string{"saldo_bench_history"}, pool: pool, o: o}
	w.transfer = func(ctx context.Context, round, worker, seq, from, to int, amount decimal.Decimal) (bool, error) {
		type leg struct {
			id    int
			delta decimal.Decimal
		}
		legs := []leg{{from, amount.Neg()}, {to, amount}}
		if to < from {
			legs[0], legs[1] = legs[1], legs[0]
		}
		if mode == Pipelined {
			b := &pgx.Batch{}
			for _, l := range legs {
				b.Queue(upd, run, l.id, l.delta)
			}
			for _, l := range legs {
				b.Queue(ins, run, l.id, l.delta)
			}
			return false, pool.SendBatch(ctx, b).Close()
		}
		return false, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for _, l := range legs {
				if _, err := tx.Exec(ctx, upd, run, l.id, l.delta); err != nil {
					return err
				}
			}
			for _, l := range legs {
				if _, err := tx.Exec(ctx, ins, run, l.id, l.delta); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return w, w.warmUp(ctx)
}

// Baseline prepares a baseline workload and measures it for o.Duration.
func Baseline(ctx context.Context, pool *pgxpool.Pool, o Options, mode BaselineMode) (Result, error) {
	w, err := PrepareBaseline(ctx, pool, o, mode)
	if err != nil {
		return Result{}, err
	}
	if err := w.Measure(ctx, w.o.Duration); err != nil {
		return Result{}, err
	}
	return w.Result(), nil
}

// Comparison is the ledger (Post, and Poster when measured) against both
// baselines.
type Comparison struct {
	Ledger, Poster, PgbenchShaped, Pipelined Result
}

// Compare measures the ledger and both baselines in rounds: each round
// runs every workload for o.Duration/rounds, one after the other, so slow
// phases of a shared machine hit all of them alike. A non-nil po adds the
// ledger.Poster workload with those options.
func Compare(ctx context.Context, pool *pgxpool.Pool, o Options, rounds int, po *ledger.PosterOptions) (Comparison, error) {
	if rounds < 1 {
		rounds = 1
	}
	if err := o.defaults(); err != nil {
		return Comparison{}, err
	}
	l, err := PrepareLedger(ctx, pool, o)
	if err != nil {
		return Comparison{}, err
	}
	shaped, err := PrepareBaseline(ctx, pool, o, PgbenchShaped)
	if err != nil {
		return Comparison{}, err
	}
	piped, err := PrepareBaseline(ctx, pool, o, Pipelined)
	if err != nil {
		return Comparison{}, err
	}
	all := []*Workload{l, shaped, piped}
	var pw *Workload
	if po != nil {
		w, p, err := PreparePoster(ctx, pool, o, *po)
		if err != nil {
			return Comparison{}, err
		}
		defer p.Close()
		pw = w
		all = append(all, pw)
	}
	d := o.Duration / time.Duration(rounds)
	for range rounds {
		for _, w := range all {
			if err := w.Measure(ctx, d); err != nil {
				return Comparison{}, err
			}
		}
	}
	c := Comparison{Ledger: l.Result(), PgbenchShaped: shaped.Result(), Pipelined: piped.Result()}
	if pw != nil {
		c.Poster = pw.Result()
	}
	return c, nil
}

// CheckPool returns an error when pool cannot give every worker its own
// connection (pgxpool's default is 4 connections), which would measure
// the pool instead of the database.
func CheckPool(pool *pgxpool.Pool, o Options) error {
	if err := o.defaults(); err != nil {
		return err
	}
	if int(pool.Config().MaxConns) < o.Workers {
		return fmt.Errorf("ledgerbench: pool has %d connections for %d workers (set pool_max_conns)", pool.Config().MaxConns, o.Workers)
	}
	return nil
}

// Footprint is what a workload's history costs on disk: each relation's
// bytes divided by the transfers it holds. Sizes taken after a run are
// exact where growth measured during a run is not: PostgreSQL extends a
// heap by many pages at once when backends queue to extend it, and those
// pages then fill with whichever workload writes next.
type Footprint struct {
	Name      string
	Transfers int64
	Relations []RelationBytes
}

// RelationBytes is one relation's bytes per transfer.
type RelationBytes struct {
	Name  string
	Index bool
	// PerTransfer counts a heap's used bytes (tuples, dead tuples, page
	// headers and line pointers: pgstattuple's table_len - free_space,
	// or the whole size without pgstattuple) and an index's whole size.
	PerTransfer float64
}

// Total is the bytes per transfer of every relation; Heap and Indexes
// split it.
func (f Footprint) Total() (total, heap, indexes float64) {
	for _, r := range f.Relations {
		total += r.PerTransfer
		if r.Index {
			indexes += r.PerTransfer
		} else {
			heap += r.PerTransfer
		}
	}
	return total, heap, indexes
}

func (f Footprint) String() string {
	t, h, i := f.Total()
	s := fmt.Sprintf("%-36s %5.0f B/transfer: heap %4.0f, indexes %4.0f  (%d transfers)", f.Name, t, h, i, f.Transfers)
	for _, r := range f.Relations {
		s += fmt.Sprintf("\n    %-40s %5.0f", r.Name, r.PerTransfer)
	}
	return s
}

// LedgerFootprint measures the ledger's history tables (transactions and
// postings, with their indexes) per transaction in the database.
func LedgerFootprint(ctx context.Context, pool *pgxpool.Pool) (Footprint, error) {
	f := Footprint{Name: "ledger (transactions + postings)"}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM ledger_transactions`).Scan(&f.Transfers); err != nil {
		return f, err
	}
	return f, f.measure(ctx, pool, "ledger_transactions", "ledger_postings")
}

// BaselineFootprint measures the baselines' history table per transfer
// (two rows per transfer).
func BaselineFootprint(ctx context.Context, pool *pgxpool.Pool) (Footprint, error) {
	f := Footprint{Name: "baseline (history)"}
	if err := pool.QueryRow(ctx, `SELECT count(*) / 2 FROM saldo_bench_history`).Scan(&f.Transfers); err != nil {
		return f, err
	}
	return f, f.measure(ctx, pool, "saldo_bench_history")
}

func (f *Footprint) measure(ctx context.Context, pool *pgxpool.Pool, tables ...string) error {
	if f.Transfers == 0 {
		return nil
	}
	_, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pgstattuple`)
	stattuple := err == nil
	for _, t := range tables {
		var heap int64
		q := `SELECT pg_table_size($1::regclass)`
		if stattuple {
			q = `SELECT table_len - free_space + (SELECT coalesce(pg_table_size(reltoastrelid), 0) FROM pg_class WHERE oid = $1::regclass)
				FROM pgstattuple($1::regclass)`
		}
		if err := pool.QueryRow(ctx, q, t).Scan(&heap); err != nil {
			return fmt.Errorf("ledgerbench: size of %s: %w", t, err)
		}
		f.Relations = append(f.Relations, RelationBytes{Name: t, PerTransfer: float64(heap) / float64(f.Transfers)})
		rows, err := pool.Query(ctx, `SELECT i.indexrelid::regclass::text, pg_relation_size(i.indexrelid)
			FROM pg_index i WHERE i.indrelid = $1::regclass ORDER BY 1`, t)
		if err != nil {
			return fmt.Errorf("ledgerbench: indexes of %s: %w", t, err)
		}
		for rows.Next() {
			var name string
			var n int64
			if err := rows.Scan(&name, &n); err != nil {
				rows.Close()
				return err
			}
			f.Relations = append(f.Relations, RelationBytes{Name: "  index " + name, Index: true, PerTransfer: float64(n) / float64(f.Transfers)})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}
