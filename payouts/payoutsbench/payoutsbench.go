// Package payoutsbench measures payouts end to end: creation (reserve in the
// opening transaction), River workers submitting to the simulated provider,
// resolution of unknowns, settlement. `saldo bench payouts` prints it next to
// the ledger's uncontended figure measured in the same run.
package payoutsbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/ledger/ledgerbench"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// Options of a run.
type Options struct {
	Merchants int // merchants payouts are spread over (default 50)
	// Workers is how many goroutines create payouts at once (default 64):
	// the concurrent API requests of a busy payouts service. Group commit
	// shares each transaction between the payouts that arrive together,
	// so throughput grows with it (docs/decisions/0002).
	Workers  int
	Duration time.Duration // how long payouts are created (default 10s)
	// Faults is a sim random fault profile ("hang_after=0.05,error_after=0.05");
	// empty: no faults.
	Faults string
	// SimURL: a running `saldo sim-provider`; empty starts one in process.
	SimURL string
	// RiverWorkers working submit/resolve jobs (default 8 x Workers: with
	// faults, every hung or slow call holds one for seconds).
	RiverWorkers int
	// Warmup is how long payouts are created, and not measured, before the
	// measured window (default 1s).
	Warmup time.Duration
	// DrainTimeout bounds the wait for the last payouts to become final
	// (default 2m).
	DrainTimeout time.Duration
	// RunID prefixes merchant ids (default from the time).
	RunID string
	// Statements, when set, reads how many statements the pool has sent
	// so far (a ledgerbench.StatementCounter set as its tracer):
	// Result.Statements is then the statements per payout.
	Statements func() int64
}

// Result of a run.
type Result struct {
	Created    int64         // payouts created during Duration
	Final      int64         // payouts that reached a final status during Duration
	PerSecond  float64       // Final / Window
	Window     time.Duration // from the first creation to the end of creating
	Unknown    int64         // attempts that went through unknown
	Failed     int64         // payouts failed (after resolution)
	P50, P99   time.Duration // creation -> final status
	Duplicates []string      // sim oracle: references paid more than once
	Audit      audit.Result
	Elapsed    time.Duration
	// ClientCPU and ServerCPU are CPU time per payout, from the first
	// creation until every payout is final: this process (creators, River,
	// the in-process sim) and the database backends (zero when the server
	// is not local). Unlike payouts/s they do not depend on what else the
	// machine is doing.
	ClientCPU, ServerCPU time.Duration
	// Statements per payout over the same span (Options.Statements; zero
	// without it): every statement this process sent, River's included.
	Statements float64
	// Batching: mean requests per group commit when creating payouts
	// (Creates), when recording calls (Records) and when recording the
	// resolver's lookups (Resolutions), and record and lookup batches
	// that failed and were redone one by one (expected 0). Shared counts
	// the transactions that recorded calls and lookups together.
	Creates, Records, Resolutions        float64
	RecordFallbacks, ResolutionFallbacks int64
	RecordTxs, LookupTxs, Shared         int64
}

func (r Result) String() string {
	cpu := ""
	if r.ServerCPU > 0 {
		cpu = fmt.Sprintf(", CPU/payout client %.0f us server %.0f us", float64(r.ClientCPU)/1e3, float64(r.ServerCPU)/1e3)
	}
	if r.Statements > 0 {
		cpu += fmt.Sprintf(", %.2f statements/payout", r.Statements)
	}
	return fmt.Sprintf("payouts: %d created, %d final in window (%.1f/s), %d went unknown, %d failed, time to final p50 %.1f ms p99 %.1f ms, sim duplicates %d%s\n"+
		"group commit: %.1f payouts per opening transaction, %.1f calls per record transaction (%d), %.1f lookups per resolver transaction (%d), %d of them shared, %d record and %d lookup batches redone one by one",
		r.Created, r.Final, r.PerSecond, r.Unknown, r.Failed, ms(r.P50), ms(r.P99), len(r.Duplicates), cpu,
		r.Creates, r.Records, r.RecordTxs, r.Resolutions, r.LookupTxs, r.Shared, r.RecordFallbacks, r.ResolutionFallbacks)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (o *Options) defaults() {
	if o.Merchants <= 0 {
		o.Merchants = 50
	}
	if o.Workers <= 0 {
		o.Workers = 64
	}
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	if o.RiverWorkers <= 0 {
		o.RiverWorkers = DefaultRiverWorkers(o.Workers)
	}
	if o.Warmup <= 0 {
		o.Warmup = time.Second
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 2 * time.Minute
	}
	if o.RunID == "" {
		o.RunID = fmt.Sprintf("pb%d", time.Now().UnixNano()%1_000_000_000)
	}
}

// DefaultRiverWorkers is Options.RiverWorkers' default for that many
// creators: 8 each, since with faults every hung or slow call holds one
// for seconds.
func DefaultRiverWorkers(workers int) int { return 8 * max(workers, 1) }

// Run runs the benchmark against pool (a migrated database).
func Run(ctx context.Context, pool *pgxpool.Pool, o Options) (Result, error) {
	o.defaults()
	var res Result
	simURL := o.SimURL
	var srv *sim.Server
	if simURL == "" {
		// A seed of its own: the sim's provider ids follow from it, and a
		// second run on the same database must not reissue the first
		// run's ids (attempts_provider_id is unique per provider).
		cfg := sim.Config{Seed: time.Now().UnixNano(), HangFor: 10 * time.Second}
		if o.Faults != "" {
			p, err := sim.ParseFaultProfile(o.Faults)
			if err != nil {
				return res, err
			}
			cfg.Random = p
		}
		srv = sim.NewServer(cfg).Start()
		defer srv.Close()
		simURL = srv.URL()
	}
	httpSettings := providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 2 * time.Second}
	caps, err := sim.FetchCapabilities(ctx, simURL, httpSettings)
	if err != nil {
		return res, fmt.Errorf("payoutsbench: sim at %s: %w", simURL, err)
	}
	prov := sim.NewProvider(simURL, sim.WithHTTPSettings(httpSettings), sim.WithCapabilities(caps))
	e, err := engine.New(engine.Config{
		Pool: pool, Providers: []providers.Provider{prov}, PayoutProvider: prov.Name(),
		RunWorkers: true, MaxWorkers: o.RiverWorkers, FetchPollInterval: 10 * time.Millisecond,
		Attempts: attempts.Config{
			SendBackoffBase: 50 * time.Millisecond, SendBackoffMax: time.Second,
			ResolveSchedule: []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, time.Second},
			StaleCallAfter:  30 * time.Second,
		},
	})
	if err != nil {
		return res, err
	}
	ids := make([]string, o.Merchants)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s_%d", o.RunID, i)
		if _, err := merchants.Create(ctx, pool, ids[i], "bench merchant"); err != nil {
			return res, err
		}
		if _, err := merchants.Fund(ctx, pool, merchants.Funding{MerchantID: ids[i],
			Amount: money.MustParse("1000000000.00", "BRL"), Key: "bench", Reason: "bench funding", Actor: "bench"}); err != nil {
			return res, err
		}
	}
	if err := e.Start(ctx); err != nil {
		return res, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = e.Stop(stopCtx)
	}()

	// create runs the creators until deadline and returns how many payouts
	// they created.
	create := func(deadline time.Time, keyPrefix string) (int64, error) {
		var created atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, o.Workers)
		for w := range o.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for seq := 0; time.Now().Before(deadline); seq++ {
					m := ids[(w*7919+seq)%len(ids)]
					_, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: m,
						ClientKey: fmt.Sprintf("%sw%d-%d", keyPrefix, w, seq), Operation: providers.OpPixTransfer,
						Amount:      money.MustParse("1.00", "BRL"),
						Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "bench@example.com"}}})
					if err != nil {
						errs <- err
						return
					}
					created.Add(1)
				}
			}()
		}
		wg.Wait()
		close(errs)
		return created.Load(), <-errs
	}
	// Warm-up, not measured: the first payouts of a process create the
	// merchants' accounts and fill the account cache, and each new
	// connection compiles its statements and PL/pgSQL functions.
	if _, err := create(time.Now().Add(o.Warmup), "warm-"); err != nil {
		return res, err
	}
	if err := drain(ctx, pool, o); err != nil {
		return res, err
	}

	client0, server0 := ledgerbench.ProcessCPU(), ledgerbench.BackendsCPU(ctx, pool)
	var stmts0 int64
	if o.Statements != nil {
		stmts0 = o.Statements()
	}
	start := time.Now()
	created, err := create(start.Add(o.Duration), "")
	if err != nil {
		return res, err
	}
	windowEnd := time.Now()
	res.Created = created

	// Drain: every payout reaches a final status before the audit.
	if err := drain(ctx, pool, o); err != nil {
		return res, err
	}
	res.Elapsed = time.Since(start)
	if o.Statements != nil && res.Created > 0 {
		// Read before the CPU figures: BackendsCPU sends statements too.
		res.Statements = float64(o.Statements()-stmts0) / float64(res.Created)
	}
	if client1, server1 := ledgerbench.ProcessCPU(), ledgerbench.BackendsCPU(ctx, pool); res.Created > 0 {
		res.ClientCPU = (client1 - client0) / time.Duration(res.Created)
		if server0 > 0 && server1 > server0 {
			res.ServerCPU = (server1 - server0) / time.Duration(res.Created)
		}
	}

	bs := e.Attempts.BatchStats()
	res.Creates, res.Records, res.RecordFallbacks = e.Payouts.CreateStats().PerBatch(), bs.Records.PerBatch(), bs.Records.Fallbacks
	res.Resolutions, res.ResolutionFallbacks = bs.Resolutions.PerBatch(), bs.Resolutions.Fallbacks
	res.RecordTxs, res.LookupTxs, res.Shared = bs.Records.Batches, bs.Resolutions.Batches, bs.Shared

	rows, err := pool.Query(ctx, `SELECT updated_at - created_at, updated_at <= $2, status
		FROM payouts WHERE merchant_id LIKE $1 AND created_at >= $3`, o.RunID+"\\_%", windowEnd, start)
	if err != nil {
		return res, err
	}
	var lat []time.Duration
	for rows.Next() {
		var d time.Duration
		var inWindow bool
		var status string
		if err := rows.Scan(&d, &inWindow, &status); err != nil {
			return res, err
		}
		lat = append(lat, d)
		if inWindow {
			res.Final++
		}
		if status == "failed" {
			res.Failed++
		}
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		res.P50, res.P99 = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
	}
	res.Window = windowEnd.Sub(start)
	res.PerSecond = float64(res.Final) / res.Window.Seconds()
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM attempts WHERE unknown_at IS NOT NULL`).Scan(&res.Unknown); err != nil {
		return res, err
	}
	if srv != nil {
		res.Duplicates = srv.Duplicates()
	} else if res.Duplicates, err = remoteDuplicates(ctx, simURL); err != nil {
		return res, err
	}
	res.Audit, err = audit.Run(ctx, pool)
	return res, err
}

// drain waits until every payout of the run is final.
func drain(ctx context.Context, pool *pgxpool.Pool, o Options) error {
	drainBy := time.Now().Add(o.DrainTimeout)
	for {
		var open int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM payouts WHERE status = 'processing' AND merchant_id LIKE $1`,
			o.RunID+"\\_%").Scan(&open); err != nil {
			return err
		}
		if open == 0 {
			return nil
		}
		if time.Now().After(drainBy) {
			return fmt.Errorf("payoutsbench: %d payouts still processing after %s", open, o.DrainTimeout)
		}
		// Not faster: the count reads every payout (no index serves
		// status and a merchant prefix), about 12 ms of server CPU each,
		// which the run's server CPU per payout would include.
		time.Sleep(250 * time.Millisecond)
	}
}

// remoteDuplicates asks a standalone sim's oracle for duplicated references.
func remoteDuplicates(ctx context.Context, simURL string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, simURL+"/sim/duplicates", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("payoutsbench: sim oracle answered %s", resp.Status)
	}
	var body struct {
		References []string `json:"references"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, errors.Join(errors.New("payoutsbench: sim oracle body"), err)
	}
	return body.References, nil
}
