package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

func init() {
	registerBenchmark(benchmark{
		Name:    "reads",
		Summary: "API reads (balances, entries pages, balance at an instant, statement, CSV) on a ledger of N postings, writers running",
		Run:     runBenchReads,
	})
}

// readsOptions configure saldo bench reads.
type readsOptions struct {
	Postings    int
	Merchants   int
	Builders    int
	Batch       int
	Samples     int
	WriterShare float64
	CSVRows     int
	DeepPage    int
	Calibrate   time.Duration
	PayoutsPerS float64
	// PayoutsMerchantPayouts: payouts the payouts merchant (<run>p) has
	// before its statement is read.
	PayoutsMerchantPayouts int
	SkipAudit              bool
	Rounds                 int
	Reuse                  string
}

func runBenchReads(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench reads", flag.ContinueOnError)
	dbURL := databaseURL(fs)
	var o readsOptions
	fs.IntVar(&o.Postings, "postings", 10_000_000, "postings the ledger is built with before reads are measured (through ledger.PostMany, in batches)")
	fs.IntVar(&o.Merchants, "merchants", 8, "merchants the postings are spread over (at least --builders + 1)")
	fs.IntVar(&o.Builders, "builders", 2, "concurrent batch writers building the ledger (each owns a long account: merchant r<i> available BRL)")
	fs.IntVar(&o.Batch, "batch", 2000, "transactions per PostMany batch while building")
	fs.IntVar(&o.Samples, "samples", 2000, "requests measured per read, with writers and again without")
	fs.IntVar(&o.Rounds, "rounds", 10, "interleave the reads in this many rounds (each makes samples/rounds requests of every read)")
	fs.Float64Var(&o.WriterShare, "writers", 0.5, "writers post at this fraction of the ledger's measured throughput while reads are measured (0: no writers)")
	fs.IntVar(&o.CSVRows, "csv-rows", 1_000_000, "postings in the measured CSV export")
	fs.IntVar(&o.DeepPage, "deep-page", 10_000, "the deep entries page measured (50 rows a page; capped by the long account's length)")
	fs.DurationVar(&o.Calibrate, "calibrate", 3*time.Second, "how long the ledger's throughput (ledger.Poster, 64 workers) is measured before the reads")
	fs.IntVar(&o.PayoutsMerchantPayouts, "payouts-merchant", 400, "payouts of the merchant whose statement is all payouts (<run>p; created when missing)")
	fs.Float64Var(&o.PayoutsPerS, "payouts", 20, "payouts per second created for the statement's merchant while reads are measured (real payout_reserve entries)")
	fs.StringVar(&o.Reuse, "reuse", "", "measure the ledger an earlier run RUN built (its database: --database-url, kept with --keep) instead of building one; RUN is the prefix of its merchants' ids")
	fs.BoolVar(&o.SkipAudit, "skip-audit", false, "skip the audit at the end (never for figures you publish)")
	server := fs.String("server-url", localServerURL, "server for the throwaway database when no database URL is given")
	keep := fs.Bool("keep", false, "keep the throwaway database")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	if o.Builders < 1 || o.Merchants < o.Builders+1 || o.Postings < 2*o.Builders || o.Batch < 1 || o.Samples < 10 {
		return errors.New("bench reads: need --builders >= 1, --merchants > --builders, --postings >= 2 x builders, --batch >= 1, --samples >= 10")
	}
	u, cleanup, err := benchDatabase(ctx, dbURL, *server, *keep)
	if err != nil {
		return err
	}
	defer cleanup()
	cfg, err := parseDatabaseURL(u)
	if err != nil {
		return err
	}
	cfg.MaxConns = 40
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	host, _ := os.Hostname()
	fmt.Printf("saldo bench reads: %d postings over %d merchants (%d long accounts), %d samples per read, writers at %.0f%% of the ledger's throughput\n",
		o.Postings, o.Merchants, o.Builders, o.Samples, 100*o.WriterShare)
	fmt.Printf("machine: %s, %d CPUs, %s; database %s\n\n", host, runtime.NumCPU(), cpuModel(), redact(u))
	return benchReads(ctx, pool, o)
}

// readsLedger is the ledger the bench built.
type readsLedger struct {
	// sess makes this invocation's idempotency keys unique (a reused
	// ledger keeps the keys of the run that built it).
	sess      string
	merchants []string
	avail     []int64 // each merchant's available BRL account id
	availUSD  []int64 // each merchant's available USD account id
	codes     map[int64]string
}

func benchReads(ctx context.Context, pool *pgxpool.Pool, o readsOptions) error {
	run := fmt.Sprintf("r%06x", rand.Uint32()&0xffffff)
	if o.Reuse != "" {
		run = o.Reuse
	}
	l, err := readsAccounts(ctx, pool, o, run)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if o.Reuse == "" {
		// Build.
		start := time.Now()
		if err := readsBuild(ctx, pool, o, run, l); err != nil {
			return err
		}
		build := time.Since(start)
		fmt.Printf("build: %d postings in %s: %.0f postings/s through ledger.PostMany (%d builders, %d transactions a batch)\n",
			o.Postings, build.Round(time.Second), float64(o.Postings)/build.Seconds(), o.Builders, o.Batch)
		t0 = time.Now()
		if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) ledger_postings, ledger_transactions, ledger_accounts`); err != nil {
			return fmt.Errorf("vacuum: %w", err)
		}
		fmt.Printf("vacuum analyze (what autovacuum does after a bulk of inserts): %s\n", time.Since(t0).Round(time.Millisecond))
		// The build leaves gigabytes of dirty pages in the OS cache; their
		// writeback (and the checkpoints the build's WAL started) would
		// otherwise land in the first measurement and slow the writers'
		// commits and the reads alike. A CHECKPOINT writes them out first.
		t0 = time.Now()
		if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
			fmt.Printf("checkpoint: not allowed for this role (%v); the build's writeback may overlap the first measurement\n", err)
		} else {
			fmt.Printf("checkpoint (the build's pages written out before measuring): %s\n", time.Since(t0).Round(time.Millisecond))
		}
	} else {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM ledger_postings`).Scan(&n); err != nil {
			return err
		}
		fmt.Printf("reusing run %s's ledger: %d postings\n", run, n)
	}
	var size int64
	if err := pool.QueryRow(ctx, `SELECT pg_total_relation_size('ledger_postings') + pg_total_relation_size('ledger_transactions')`).Scan(&size); err != nil {
		return err
	}
	fmt.Printf("ledger tables with indexes: %.0f MB\n\n", float64(size)/1e6)

	// The API, in process, on a loopback listener.
	simSrv := sim.NewServer(sim.Config{Seed: time.Now().UnixNano()}).Start()
	defer simSrv.Close()
	httpSettings := providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 2 * time.Second}
	caps, err := sim.FetchCapabilities(ctx, simSrv.URL(), httpSettings)
	if err != nil {
		return err
	}
	prov := sim.NewProvider(simSrv.URL(), sim.WithHTTPSettings(httpSettings), sim.WithCapabilities(caps))
	eng, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{prov}, PayoutProvider: prov.Name()})
	if err != nil {
		return err
	}
	srv, err := api.New(api.Config{Pool: pool, Payouts: eng.Payouts, Attempts: eng.Attempts, Charges: eng.Charges})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	base := "http://" + ln.Addr().String()
	_, merchantKey, err := api.CreateKey(ctx, pool, api.RoleMerchant, l.merchants[0], "bench reads", time.Now())
	if err != nil {
		return err
	}
	_, auditorKey, err := api.CreateKey(ctx, pool, api.RoleAuditor, "", "bench reads", time.Now())
	if err != nil {
		return err
	}
	c := &readsClient{base: base, http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}

	// The reads, their deep cursors found before anything is measured.
	long := l.codes[l.avail[0]]
	entries := "/v1/ledger/postings?limit=50&account=" + url.QueryEscape(long)
	var lastSeq int64
	if err := pool.QueryRow(ctx, `SELECT last_seq FROM ledger_accounts WHERE id = $1`, l.avail[0]).Scan(&lastSeq); err != nil {
		return err
	}
	deep := min(int64(o.DeepPage), (lastSeq-1)/50+1)
	cursor, err := c.walkPostings(ctx, long, auditorKey, (deep-1)*50)
	if err != nil {
		return err
	}
	var first, last time.Time
	if err := pool.QueryRow(ctx, `SELECT (SELECT posted_at FROM ledger_postings WHERE account_id = $1 AND seq = 1), last_posted_at
		FROM ledger_accounts WHERE id = $1`, l.avail[0]).Scan(&first, &last); err != nil {
		return err
	}
	span := last.Sub(first)
	rng := rand.New(rand.NewPCG(1, 2))
	stmt := "/v1/merchants/" + l.merchants[0] + "/statement?limit=50"
	var stmtEntries int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(last_seq), 0)::bigint FROM ledger_accounts WHERE owner_kind = 'merchant' AND owner_id = $1`,
		l.merchants[0]).Scan(&stmtEntries); err != nil {
		return err
	}
	stmtDeep := int(min(1000, (stmtEntries-1)/50+1))
	stmtCursor, err := c.walkStatement(ctx, stmt, merchantKey, stmtDeep)
	if err != nil {
		return err
	}
	// A merchant whose statement is all payouts (a dashboard's usual
	// case): every entry's cause names a payout, which the statement reads
	// through the entry's attempt.
	pm, err := readsPayoutsMerchant(ctx, pool, eng.Payouts, run, o.PayoutsMerchantPayouts)
	if err != nil {
		return err
	}
	_, pmKey, err := api.CreateKey(ctx, pool, api.RoleMerchant, pm, "bench reads", time.Now())
	if err != nil {
		return err
	}
	pmStmt := "/v1/merchants/" + pm + "/statement?limit=50"
	stmtUntil := stmt + "&to=" + url.QueryEscape(first.Add(span/2).UTC().Format(time.RFC3339Nano))
	reads := []readSpec{
		{name: "baseline: GET /readyz (SELECT 1)", path: func() string { return "/readyz" }},
		{name: "merchant balances", target: 2 * time.Millisecond, key: merchantKey,
			path: func() string { return "/v1/merchants/" + l.merchants[0] + "/balances" }},
		{name: "entries page 1 (50 rows)", target: 5 * time.Millisecond, key: auditorKey, path: func() string { return entries }},
		{name: fmt.Sprintf("entries page %d (50 rows)", deep), target: 5 * time.Millisecond, key: auditorKey,
			path: func() string { return withCursor(entries, cursor) }},
		{name: "balance at an instant", target: 10 * time.Millisecond, key: auditorKey, path: func() string {
			at := first.Add(time.Duration(rng.Int64N(int64(span) + 1))).UTC().Format(time.RFC3339Nano)
			return "/v1/ledger/balance?account=" + url.QueryEscape(long) + "&at=" + url.QueryEscape(at)
		}},
		{name: "statement page 1 (50 rows, 3 accounts)", target: 5 * time.Millisecond, key: merchantKey, path: func() string { return stmt }},
		{name: fmt.Sprintf("statement page %d (50 rows)", stmtDeep), target: 5 * time.Millisecond, key: merchantKey,
			path: func() string { return withCursor(stmt, stmtCursor) }},
		{name: "statement of payouts, page 1 (50 rows)", target: 5 * time.Millisecond, key: pmKey,
			path: func() string { return pmStmt }},
		// A dashboard's "statement until a date": the first page of a range
		// whose end is in the middle of the long account's history (each
		// account positioned there by binary search).
		{name: "statement until a date, page 1", target: 5 * time.Millisecond, key: merchantKey,
			path: func() string { return stmtUntil }},
	}
	// Without autovacuum (some test servers turn it off), the accounts
	// table, a few rows updated by every transfer, grows a page of dead
	// versions every few hundred transfers and every read that looks an
	// account up walks them: vacuum it every few seconds, as autovacuum
	// would, and say so.
	var av string
	if err := pool.QueryRow(ctx, `SHOW autovacuum`).Scan(&av); err != nil {
		return err
	}
	if av != "on" {
		fmt.Println("autovacuum is off on this server: the bench runs VACUUM ledger_accounts every 5 s in its place")
		vctx, stopVacuum := context.WithCancel(ctx)
		defer stopVacuum()
		go func() {
			t := time.NewTicker(5 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-vctx.Done():
					return
				case <-t.C:
					_, _ = pool.Exec(vctx, `VACUUM ledger_accounts`)
				}
			}
		}()
	}
	idle, err := c.measureRounds(ctx, reads, o.Samples, o.Rounds)
	if err != nil {
		return err
	}

	// The ledger's throughput, then writers at a share of it.
	rate, err := readsCalibrate(ctx, pool, o, run, l)
	if err != nil {
		return err
	}
	wctx, stopWriters := context.WithCancel(ctx)
	writersDone, written, err := readsWriters(wctx, pool, eng.Payouts, o, run, l, rate*o.WriterShare)
	if err != nil {
		stopWriters()
		return err
	}
	wstart := time.Now()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		stopWriters()
		return <-writersDone
	}
	defer stop()
	busy, err := c.measureRounds(ctx, reads, o.Samples, o.Rounds)
	if err != nil {
		return err
	}
	fmt.Printf("\n%d requests per read, one client, interleaved in %d rounds; times in ms; ratios are p99 / the baseline's p99 in the same phase\n", o.Samples, o.Rounds)
	fmt.Printf("%-40s %17s %17s %17s  %s\n", "", "no writers", "writers running", "", "")
	fmt.Printf("%-40s %8s %8s %8s %8s %8s  %-12s %s\n", "read", "p50", "p99", "p50", "p99", "ratio", "target", "met (writers running)")
	for i, r := range reads {
		met := ""
		if r.target > 0 {
			met = "yes"
			if busy[i].p99 >= r.target {
				met = "no"
			}
		}
		target := ""
		if r.target > 0 {
			target = fmt.Sprintf("p99 < %s", r.target)
		}
		fmt.Printf("%-40s %8.2f %8.2f %8.2f %8.2f %7.1fx  %-12s %s\n", r.name, ms(idle[i].p50), ms(idle[i].p99), ms(busy[i].p50), ms(busy[i].p99),
			float64(busy[i].p99)/float64(busy[0].p99), target, met)
	}
	fmt.Println()
	if err := readsCSV(ctx, pool, c, o, l, auditorKey); err != nil {
		return err
	}
	if err := stop(); err != nil {
		return fmt.Errorf("writers: %w", err)
	}
	fmt.Printf("writers: %d transfers and payouts while reads were measured (%.0f/s, target %.0f/s)\n",
		written.Load(), float64(written.Load())/time.Since(wstart).Seconds(), rate*o.WriterShare+o.PayoutsPerS)
	if o.SkipAudit {
		fmt.Println("audit: skipped (--skip-audit)")
		return nil
	}
	t0 = time.Now()
	res, err := audit.Run(ctx, pool)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	fmt.Printf("audit (ledger, attempts, payouts, charges, reconcile) in %s: %s\n", time.Since(t0).Round(time.Second), res.Summary())
	if !res.OK() {
		return exitError{Code: 1}
	}
	return nil
}

// readsAccounts creates the merchants and their accounts, and funds the
// long ones.
func readsAccounts(ctx context.Context, pool *pgxpool.Pool, o readsOptions, run string) (*readsLedger, error) {
	l := &readsLedger{codes: map[int64]string{}, sess: fmt.Sprintf("%s-%08x", run, rand.Uint32())}
	for i := range o.Merchants {
		id := fmt.Sprintf("%s%d", run, i)
		if o.Reuse != "" {
			if _, err := merchants.Get(ctx, pool, id); err != nil {
				return nil, fmt.Errorf("--reuse %s: %w", run, err)
			}
		} else if _, err := merchants.Create(ctx, pool, id, "bench reads merchant"); err != nil {
			return nil, err
		}
		l.merchants = append(l.merchants, id)
		for _, spec := range []ledger.AccountSpec{ledger.MerchantAvailable(id, money.BRL), ledger.MerchantAvailable(id, money.USD)} {
			acc, err := ledger.EnsureAccount(ctx, pool, spec)
			if err != nil {
				return nil, err
			}
			l.codes[acc.ID] = acc.Code
			if spec.Currency == money.BRL {
				l.avail = append(l.avail, acc.ID)
			} else {
				l.availUSD = append(l.availUSD, acc.ID)
			}
		}
		if i < o.Builders && o.Reuse == "" {
			for _, cur := range []money.Currency{money.BRL, money.USD} {
				if _, err := merchants.Fund(ctx, pool, merchants.Funding{MerchantID: id, Amount: money.MustParse("1000000000000.00", cur.Code()),
					Key: "bench-reads-" + cur.Code(), Reason: "bench reads funding", Actor: "bench"}); err != nil {
					return nil, err
				}
			}
		}
	}
	return l, nil
}

// readsPayoutsMerchant makes sure merchant <run>p exists, is funded and
// has at least n payouts (created through payouts.Service, as the API
// does; the bench runs no River workers, so they stay reserved: each
// gives the statement two entries, payout_reserve on available and
// reserved), and returns its id. A ledger kept by an earlier run gets
// the merchant and the payouts it lacks.
func readsPayoutsMerchant(ctx context.Context, pool *pgxpool.Pool, pay *payouts.Service, run string, n int) (string, error) {
	id := run + "p"
	if _, err := merchants.Get(ctx, pool, id); errors.Is(err, merchants.ErrNotFound) {
		if _, err := merchants.Create(ctx, pool, id, "bench reads payouts merchant"); err != nil {
			return "", err
		}
	} else if err != nil {
		return "", err
	}
	if _, err := merchants.Fund(ctx, pool, merchants.Funding{MerchantID: id, Amount: money.MustParse("1000000.00", "BRL"),
		Key: "bench-reads-payouts", Reason: "bench reads funding", Actor: "bench"}); err != nil {
		return "", err
	}
	var have int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM payouts WHERE merchant_id = $1`, id).Scan(&have); err != nil {
		return "", err
	}
	for i := have; i < n; i++ {
		if _, err := pay.CreatePayout(ctx, readsPayout(id, fmt.Sprintf("bench-reads-pm-%d", i))); err != nil {
			return "", fmt.Errorf("payouts merchant: payout %d: %w", i, err)
		}
	}
	return id, nil
}

// readsPayout is the bench's payout: a 1.00 BRL Pix transfer.
func readsPayout(merchantID, clientKey string) payouts.PayoutRequest {
	return payouts.PayoutRequest{MerchantID: merchantID, ClientKey: clientKey, Operation: providers.OpPixTransfer,
		Amount:      money.MustParse("1.00", "BRL"),
		Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "bench@example.com"}}}
}

// readsBuild posts o.Postings postings (two per transfer) through
// ledger.PostMany, batch after batch, with o.Builders builders at once.
// Builder b moves money from its long account (merchant b's available
// BRL, or its available USD for one transfer in ten) to the other
// accounts of its share of the merchants, so builders never wait for each
// other's locks.
func readsBuild(ctx context.Context, pool *pgxpool.Pool, o readsOptions, run string, l *readsLedger) error {
	transfers := o.Postings / 2
	var done atomic.Int64
	errs := make(chan error, o.Builders)
	var wg sync.WaitGroup
	for b := range o.Builders {
		var others []int
		for m := o.Builders; m < o.Merchants; m++ {
			if m%o.Builders == b || o.Merchants-o.Builders < o.Builders {
				others = append(others, m)
			}
		}
		n := transfers / o.Builders
		if b < transfers%o.Builders {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(b), 7))
			batch := make([]ledger.TransactionInput, 0, o.Batch)
			for i := 0; i < n; {
				batch = batch[:0]
				for ; i < n && len(batch) < o.Batch; i++ {
					to := others[rng.IntN(len(others))]
					from, dest, cur := l.avail[b], l.avail[to], money.BRL
					if i%10 == 9 {
						from, dest, cur = l.availUSD[b], l.availUSD[to], money.USD
					}
					amt := decimal.New(int64(1+rng.IntN(10_000)), -2)
					batch = append(batch, ledger.TransactionInput{
						IdempotencyKey: run + "-" + strconv.Itoa(b) + "-" + strconv.Itoa(i), CauseKind: "bench", CauseID: run,
						Postings: []ledger.PostingInput{
							{AccountID: from, Amount: amt.Neg(), Currency: cur},
							{AccountID: dest, Amount: amt, Currency: cur},
						},
					})
				}
				if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := ledger.PostMany(ctx, tx, batch)
					return err
				}); err != nil {
					errs <- fmt.Errorf("build: builder %d: %w", b, err)
					return
				}
				done.Add(int64(len(batch)))
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	start := time.Now()
	for {
		select {
		case <-finished:
			select {
			case err := <-errs:
				return err
			default:
				return nil
			}
		case err := <-errs:
			return err
		case <-tick.C:
			d := done.Load()
			fmt.Printf("  build: %d of %d postings, %.0f postings/s\n", 2*d, o.Postings, float64(2*d)/time.Since(start).Seconds())
		}
	}
}

// readsTransfer is one writer's transfer: from a long account to another
// merchant's account, through the Poster.
func readsTransfer(run string, l *readsLedger, o readsOptions, rng *rand.Rand, key string) ledger.TransactionInput {
	b := rng.IntN(o.Builders)
	to := o.Builders + rng.IntN(o.Merchants-o.Builders)
	return ledger.TransactionInput{IdempotencyKey: key, CauseKind: "bench", CauseID: run,
		Postings: []ledger.PostingInput{
			{AccountID: l.avail[b], Amount: decimal.New(-1, -2), Currency: money.BRL},
			{AccountID: l.avail[to], Amount: decimal.New(1, -2), Currency: money.BRL},
		}}
}

// readsCalibrate measures the ledger's throughput on this ledger:
// ledger.Poster with 64 workers for o.Calibrate, in transfers per second.
func readsCalibrate(ctx context.Context, pool *pgxpool.Pool, o readsOptions, run string, l *readsLedger) (float64, error) {
	if o.WriterShare <= 0 {
		return 0, nil
	}
	p := ledger.NewPoster(pool, ledger.PosterOptions{})
	defer p.Close()
	var n atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	deadline := time.Now().Add(o.Calibrate)
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for i := 0; time.Now().Before(deadline); i++ {
				if _, err := p.Post(ctx, readsTransfer(run, l, o, rng, fmt.Sprintf("%s-cal-%d-%d", l.sess, w, i))); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, fmt.Errorf("calibrate: %w", err)
	}
	rate := float64(n.Load()) / o.Calibrate.Seconds()
	fmt.Printf("ledger throughput on this ledger: %.0f transfers/s (ledger.Poster, 64 workers, %s); writers post at %.0f/s during the reads\n",
		rate, o.Calibrate, rate*o.WriterShare)
	return rate, nil
}

// readsWriters posts transfers at rate per second through a Poster, and
// creates o.PayoutsPerS payouts a second for the statement's merchant,
// until ctx ends. done answers the first error (nil after ctx ended).
func readsWriters(ctx context.Context, pool *pgxpool.Pool, pay *payouts.Service, o readsOptions, run string, l *readsLedger, rate float64) (<-chan error, *atomic.Int64, error) {
	done := make(chan error, 1)
	written := new(atomic.Int64)
	// The statement's merchant needs money in its available BRL account
	// for its payouts: it is the first long account, funded above.
	p := ledger.NewPoster(pool, ledger.PosterOptions{})
	tokens := make(chan struct{}, 4096)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	fail := func(err error) {
		if ctx.Err() == nil {
			firstErr.CompareAndSwap(nil, err)
		}
	}
	if rate > 0 {
		wg.Add(1)
		go func() { // the pacer
			defer wg.Done()
			t := time.NewTicker(5 * time.Millisecond)
			defer t.Stop()
			start, sent := time.Now(), 0
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					due := int(time.Since(start).Seconds() * rate)
					for ; sent < due; sent++ {
						select {
						case tokens <- struct{}{}:
						default: // writers are behind: the token is lost, the rate honest
						}
					}
				}
			}
		}()
		for w := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 13))
				for i := 0; ; i++ {
					select {
					case <-ctx.Done():
						return
					case <-tokens:
					}
					if _, err := p.Post(context.WithoutCancel(ctx), readsTransfer(run, l, o, rng, fmt.Sprintf("%s-w-%d-%d", l.sess, w, i))); err != nil {
						fail(err)
						return
					}
					written.Add(1)
				}
			}()
		}
	}
	if o.PayoutsPerS > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(time.Duration(float64(time.Second) / o.PayoutsPerS))
			defer t.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				_, err := pay.CreatePayout(context.WithoutCancel(ctx), readsPayout(l.merchants[0], fmt.Sprintf("%s-po-%d", l.sess, i)))
				if err != nil {
					fail(err)
					return
				}
				written.Add(1)
			}
		}()
	}
	go func() {
		wg.Wait()
		p.Close()
		err, _ := firstErr.Load().(error)
		done <- err
	}()
	return done, written, nil
}

// readsClient makes the measured requests.
type readsClient struct {
	base string
	http *http.Client
}

func (c *readsClient) get(ctx context.Context, path, key string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 1000))
		res.Body.Close()
		return nil, fmt.Errorf("GET %s: %d %s", path, res.StatusCode, b)
	}
	return res, nil
}

func (c *readsClient) getJSON(ctx context.Context, path, key string, v any) error {
	res, err := c.get(ctx, path, key)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	return json.NewDecoder(res.Body).Decode(v)
}

type readResult struct {
	p50, p99 time.Duration
	n        int
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// readSpec is one read the bench measures.
type readSpec struct {
	name   string
	target time.Duration // p99 target (0: none)
	key    string
	path   func() string
}

// measureRounds makes n requests of each read, one after the other, in
// rounds: each round makes n/rounds of every read in turn, so a change in
// the machine's load hits every read alike. Each round starts with a few
// unmeasured requests of each read.
func (c *readsClient) measureRounds(ctx context.Context, reads []readSpec, n, rounds int) ([]readResult, error) {
	lat := make([][]time.Duration, len(reads))
	per := max(n/max(rounds, 1), 1)
	for range max(rounds, 1) {
		for i, rd := range reads {
			for k := -max(per/20, 2); k < per; k++ {
				t0 := time.Now()
				res, err := c.get(ctx, rd.path(), rd.key)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", rd.name, err)
				}
				_, err = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if err != nil {
					return nil, fmt.Errorf("%s: %w", rd.name, err)
				}
				if k >= 0 {
					lat[i] = append(lat[i], time.Since(t0))
				}
			}
		}
	}
	out := make([]readResult, len(reads))
	for i, l := range lat {
		slices.Sort(l)
		out[i] = readResult{p50: l[len(l)/2], p99: l[len(l)*99/100], n: len(l)}
	}
	return out, nil
}

// walkPostings pages through skip postings of the account (500 a page,
// then 50) and returns the cursor of the page after them.
func (c *readsClient) walkPostings(ctx context.Context, code, key string, skip int64) (string, error) {
	cursor := ""
	for skip > 0 {
		limit := int64(500)
		if skip < 500 {
			limit = 50
		}
		var pg struct {
			Data       []json.RawMessage `json:"data"`
			NextCursor string            `json:"next_cursor"`
		}
		if err := c.getJSON(ctx, withCursor(fmt.Sprintf("/v1/ledger/postings?limit=%d&account=%s", limit, url.QueryEscape(code)), cursor), key, &pg); err != nil {
			return "", err
		}
		if pg.NextCursor == "" {
			return "", errors.New("walk: the account ended early")
		}
		cursor, skip = pg.NextCursor, skip-int64(len(pg.Data))
	}
	return cursor, nil
}

// withCursor adds cursor to a listing's path, unless it is "" (the first
// page): the API refuses an empty parameter.
func withCursor(path, cursor string) string {
	if cursor == "" {
		return path
	}
	return path + "&cursor=" + url.QueryEscape(cursor)
}

// walkStatement follows pages-1 statement pages and returns the cursor of
// the next one.
func (c *readsClient) walkStatement(ctx context.Context, path, key string, pages int) (string, error) {
	cursor := ""
	for range max(pages-1, 0) {
		var pg struct {
			NextCursor string `json:"next_cursor"`
		}
		if err := c.getJSON(ctx, withCursor(path, cursor), key, &pg); err != nil {
			return "", err
		}
		if pg.NextCursor == "" {
			return "", errors.New("walk: the statement ended early")
		}
		cursor = pg.NextCursor
	}
	return cursor, nil
}

// readsCSV exports about o.CSVRows postings of the second long account
// (or the first when there is one) as CSV, streamed, and reports MB/s and
// this process's peak resident memory during the export (the API and the
// client are both in it).
func readsCSV(ctx context.Context, pool *pgxpool.Pool, c *readsClient, o readsOptions, l *readsLedger, key string) error {
	acc := l.avail[min(1, o.Builders-1)]
	var to *time.Time
	if err := pool.QueryRow(ctx, `SELECT posted_at FROM ledger_postings WHERE account_id = $1 AND seq = $2`, acc, o.CSVRows+1).Scan(&to); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	path := "/v1/ledger/export.csv?account=" + url.QueryEscape(l.codes[acc])
	if to != nil {
		path += "&to=" + url.QueryEscape(to.UTC().Format(time.RFC3339Nano))
	}
	runtime.GC()
	resetPeakRSS()
	before := vmStatus("VmHWM")
	t0 := time.Now()
	res, err := c.get(ctx, path, key)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	var rows, bytesRead int64
	br := bufio.NewReaderSize(res.Body, 64<<10)
	buf := make([]byte, 64<<10)
	for {
		n, err := br.Read(buf)
		rows += int64(bytes.Count(buf[:n], []byte{'\n'}))
		bytesRead += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("csv: %w", err)
		}
	}
	d := time.Since(t0)
	after := vmStatus("VmHWM")
	fmt.Printf("%-42s %d rows, %.1f MB in %s: %.1f MB/s; peak RSS of the process %s before, %s during (VmHWM, reset before the export)  target: constant memory\n",
		"CSV export of one account", rows-1, float64(bytesRead)/1e6, d.Round(time.Millisecond), float64(bytesRead)/1e6/d.Seconds(), before, after)
	return nil
}

// resetPeakRSS resets VmHWM to the current RSS (Linux: clear_refs 5).
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// vmStatus reads one field of /proc/self/status (e.g. VmHWM: "123456 kB").
func vmStatus(field string) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) == 2 {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return fmt.Sprintf("%.0f MB", float64(kb)/1024)
				}
			}
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "unknown CPU"
}
