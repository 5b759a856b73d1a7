package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/ledger/ledgerbench"
	"github.com/saldo/saldo/payouts/payoutsbench"
)

func init() {
	registerBenchmark(benchmark{
		Name:    "payouts",
		Summary: "payouts end to end through River against the simulated PSP, vs ledger transfers/s and a payout-shaped plain-SQL baseline",
		Run:     runBenchPayouts,
	})
}

func runBenchPayouts(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench payouts", flag.ContinueOnError)
	dbURL := databaseURL(fs)
	var o payoutsbench.Options
	fs.IntVar(&o.Merchants, "merchants", 50, "merchants payouts are spread over")
	fs.IntVar(&o.Workers, "workers", 64, "goroutines creating payouts at once (concurrent API requests)")
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, "how long payouts are created")
	fs.DurationVar(&o.Warmup, "warmup", time.Second, "payouts created before each measured round, not counted (accounts, caches, new connections)")
	fs.StringVar(&o.Faults, "faults", "", "sim random fault profile, e.g. hang_after=0.05,error_after=0.05,rate_limit=0.05")
	fs.StringVar(&o.SimURL, "sim-url", "", "a running 'saldo sim-provider' (default: one in process)")
	fs.IntVar(&o.RiverWorkers, "river-workers", 0, "River workers submitting and resolving attempts (default 8 x --workers: with --faults, hung and slow calls each hold one for seconds)")
	rounds := fs.Int("rounds", 2, "alternate payouts and ledger measurements this many times, each for duration/rounds, so a drift in the machine's speed hits both")
	ledgerToo := fs.Bool("ledger", true, "also measure bench ledger's uncontended transfers/s (50 accounts, 8 workers) and print the ratio")
	baselineToo := fs.Bool("baseline", true, "also measure the payout-shaped baseline (plain SQL writing a payout's rows, the same provider exchange, one commit per phase, --workers workers, no faults) and print the ratio")
	pipelined := fs.Bool("baseline-pipelined", false, "send each baseline phase as one pgx batch (one round trip and one commit per phase) instead of a round trip per statement")
	server := fs.String("server-url", localServerURL, "server for the throwaway database when no database URL is given")
	keep := fs.Bool("keep", false, "keep the throwaway database")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
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
	if o.RiverWorkers <= 0 {
		o.RiverWorkers = payoutsbench.DefaultRiverWorkers(o.Workers)
	}
	// Group commit keeps few connections busy however many callers wait.
	cfg.MaxConns = int32(min(o.Workers+o.RiverWorkers+10, 80))
	stmts := &ledgerbench.StatementCounter{}
	cfg.ConnConfig.Tracer = stmts
	o.Statements = stmts.Load
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := refuseSharedBenchDatabase(ctx, pool); err != nil {
		return err
	}
	faults := o.Faults
	if faults == "" {
		faults = "none"
	}
	fmt.Printf("saldo bench payouts: %d merchants, %d creators, %d River workers, %s, faults: %s\ndatabase %s\n\n",
		o.Merchants, o.Workers, o.RiverWorkers, o.Duration, faults, redact(u))

	if *rounds < 1 {
		return fmt.Errorf("--rounds must be at least 1")
	}
	var lw *ledgerbench.Workload
	if *ledgerToo {
		if lw, err = ledgerbench.PrepareLedger(ctx, pool, ledgerbench.Options{Accounts: 50, Workers: 8}); err != nil {
			return err
		}
	}
	var base *payoutBaseline
	if *baselineToo {
		if base, err = preparePayoutBaseline(ctx, pool, o, *pipelined, stmts.Load); err != nil {
			return err
		}
		defer base.Close()
	}
	var res payoutsbench.Result
	var final, created int64
	var window time.Duration
	var dups []string
	// The pipeline's CPU per payout over every round, weighted by the
	// payouts each created.
	var clientCPU, serverCPU time.Duration
	ro := o
	ro.Duration = o.Duration / time.Duration(*rounds)
	for r := range *rounds {
		ro.RunID = ""
		if res, err = payoutsbench.Run(ctx, pool, ro); err != nil {
			return err
		}
		fmt.Printf("round %d %s\n", r+1, res)
		final, window, dups = final+res.Final, window+res.Window, append(dups, res.Duplicates...)
		created += res.Created
		clientCPU += res.ClientCPU * time.Duration(res.Created)
		serverCPU += res.ServerCPU * time.Duration(res.Created)
		if lw != nil {
			if err := lw.Measure(ctx, ro.Duration); err != nil {
				return err
			}
		}
		if base != nil {
			if err := base.Measure(ctx, ro.Duration); err != nil {
				return err
			}
		}
	}
	if created > 0 {
		clientCPU, serverCPU = clientCPU/time.Duration(created), serverCPU/time.Duration(created)
	}
	res.Duplicates = dups
	perSecond := float64(final) / window.Seconds()
	fmt.Printf("\npayouts: %d final in %s of creating (%.1f/s)\n", final, window.Round(time.Millisecond), perSecond)
	if lw != nil {
		lr := lw.Result()
		fmt.Println(lr)
		if lr.PerSecond > 0 {
			fmt.Printf("\nratio payouts/s / ledger transfers/s: %.2fx   (target >= 0.8x without faults, >= 0.5x with --faults at 5%% of each kind)\n", perSecond/lr.PerSecond)
		}
	}
	if base != nil {
		if err := printBaseline(ctx, pool, base, perSecond, clientCPU, serverCPU, o.Faults != ""); err != nil {
			return err
		}
		// The audit again, after the baseline's last payouts: it reads
		// what the pipeline wrote and the baseline's balanced, final rows.
		if res.Audit, err = audit.Run(ctx, pool); err != nil {
			return err
		}
		res.Duplicates = append(res.Duplicates, base.Duplicates()...)
	}
	if res.Audit.OK() && len(res.Duplicates) == 0 {
		fmt.Println(res.Audit.Summary())
		fmt.Println("sim oracle: nobody paid twice")
		return nil
	}
	fmt.Println(res.Audit.Summary())
	if len(res.Duplicates) > 0 {
		fmt.Printf("sim oracle: %d references paid more than once: %v\n", len(res.Duplicates), res.Duplicates)
	}
	return exitError{Code: 1}
}

// printBaseline prints the payout-shaped baseline beside the pipeline's
// figures: payouts/s, CPU per payout (client and server, as payoutsbench
// reads them) and the ratios.
func printBaseline(ctx context.Context, pool *pgxpool.Pool, base *payoutBaseline, perSecond float64, clientCPU, serverCPU time.Duration, faults bool) error {
	var syncCommit string
	if err := pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&syncCommit); err != nil {
		return err
	}
	br := base.Result()
	fmt.Printf("\n%s\n", br)
	note := "without faults"
	if faults {
		note = "the baseline runs without faults: it has no resolution path"
	}
	form := "a round trip per statement"
	if base.pipelined {
		form = "one round trip per phase"
	}
	fmt.Printf("  (%d workers, same tables, rows and simulator exchange as a payout; 3 commits per payout, %s; synchronous_commit=%s for both)\n",
		base.workers, form, syncCommit)
	if br.PerSecond > 0 {
		fmt.Printf("ratio payouts/s / payout-shaped baseline: %.2fx   (%s)\n", perSecond/br.PerSecond, note)
	}
	if pc, bc := clientCPU+serverCPU, br.ClientCPU+br.ServerCPU; serverCPU > 0 && br.ServerCPU > 0 {
		fmt.Printf("CPU per payout, payout-shaped baseline / payouts: %.2fx   (client + server: %v against %v)\n",
			float64(bc)/float64(pc), bc.Round(time.Microsecond), pc.Round(time.Microsecond))
	}
	return nil
}

// refuseSharedBenchDatabase refuses a database that already holds
// attempts or a recorded provider identity: the bench runs an engine with
// River workers under the provider name "sim" at a sim of its own, in
// process. On a database a fleet uses, its workers would take the fleet's
// jobs and look the fleet's attempts up at the bench's sim ("not found":
// failed, reserve freed, paid again), and the fleet's resolvers the
// bench's at the recorded sim (R16; found by review). A throwaway database
// (no --database-url) or an empty one is what it needs.
func refuseSharedBenchDatabase(ctx context.Context, pool *pgxpool.Pool) error {
	for _, table := range []string{"attempts", "provider_identities"} {
		var exists bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			continue
		}
		var used bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+table+`)`).Scan(&used); err != nil {
			return err
		}
		if used {
			return fmt.Errorf("refusing to run: this database already holds %s; saldo bench payouts runs River workers under "+
				"the provider name \"sim\" at a sim of its own and would work another process's jobs at the wrong PSP (R16): "+
				"run it on a throwaway database (no --database-url and no SALDO_DATABASE_URL) or an empty one", table)
		}
	}
	return nil
}
