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
	// BytesPerTransfer is the growth of the run's tables (heap, indexes,
	// TOAST) divided by Transfers.
	BytesPerTransfer float64
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
	cpu := ""
	if r.ServerCPU > 0 {
		cpu = fmt.Sprintf("  CPU/transfer client %4.0f us server %4.0f us", us(r.ClientCPU), us(r.ServerCPU))
	}
	return fmt.Sprintf("%-32s %8.0f transfers/s  p50 %6.2f ms  p99 %6.2f ms  %6.0f B/transfer%s  (%d in %s, %d refused)",
		r.Name, r.PerSecond, ms(r.P50), ms(r.P99), r.BytesPerTransfer, cpu, r.Transfers, r.Elapsed.Round(time.Millisecond), r.Refused)
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
	tables   []string
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
	client    time.Duration
	server    time.Duration
	commits   int64
}

// Measure runs the workload for d and records the sample.
func (w *Workload) Measure(ctx context.Context, d time.Duration) error {
	before, err := tablesSize(ctx, w.pool, w.tables...)
	if err != nil {
		return err
	}
	w.rounds++
	client0, server0 := ProcessCPU(), BackendsCPU(ctx, w.pool)
	var commits0 int64
	if w.commits != nil {
		commits0 = w.commits()
	}
	sm, err := drive(ctx, w.o, d, w.rounds, w.transfer)
	if err != nil {
		return fmt.Errorf("ledgerbench: %s: %w", w.name, err)
	}
	client1, server1 := ProcessCPU(), BackendsCPU(ctx, w.pool)
	sm.commits = int64(len(sm.latencies)) + sm.refused
	if w.commits != nil {
		sm.commits = w.commits() - commits0
	}
	after, err := tablesSize(ctx, w.pool, w.tables...)
	if err != nil {
		return err
	}
	sm.bytes = after - before
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
	var bytes int64
	var client, server time.Duration
	var commits int64
	for _, sm := range w.samples {
		commits += sm.commits
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

func tablesSize(ctx context.Context, pool *pgxpool.Pool, tables ...string) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(t::regclass)), 0)::bigint FROM unnest($1::text[]) t`, tables).Scan(&n)
	return n, err
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
	w := &Workload{name: name, tables: []string{"ledger_accounts", "ledger_transactions", "ledger_postings"}, pool: pool, o: o}
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
	w := &Workload{name: name, tables: []string{"saldo_bench_accounts", "saldo_bench_history"}, pool: pool, o: o}
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
