package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/ledger/ledgerbench"
)

func init() {
	registerBenchmark(benchmark{
		Name:    "ledger",
		Summary: "ledger.Post transfers/s vs a plain-SQL TPC-B-like baseline, plus audit verify",
		Run:     runBenchLedger,
	})
}

func runBenchLedger(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench ledger", flag.ContinueOnError)
	dbURL := databaseURL(fs)
	var o ledgerbench.Options
	fs.IntVar(&o.Accounts, "accounts", 50, "accounts transfers move between")
	fs.IntVar(&o.Workers, "workers", 8, "concurrent workers (one connection each)")
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, "measured time of each workload (ledger, each baseline)")
	fs.BoolVar(&o.Hot, "hot", false, "hot account: every transfer debits the same account")
	baseline := fs.Bool("baseline", true, "also measure the plain-SQL baselines and print the ratios")
	group := fs.Bool("group-commit", true, "also measure ledger.Poster (group commit) beside ledger.Post")
	var po ledger.PosterOptions
	fs.IntVar(&po.MaxBatch, "batch", 64, "ledger.Poster: most transfers per commit")
	fs.IntVar(&po.Flushers, "flushers", 2, "ledger.Poster: batches in flight at once (on disjoint accounts)")
	rounds := fs.Int("rounds", 3, "interleave the ledger and the baselines in this many rounds (each gets duration/rounds per round)")
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
	cfg.MaxConns = int32(o.Workers + po.Flushers + 2)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := ledgerbench.CheckPool(pool, o); err != nil {
		return err
	}

	mode := "uncontended (random pairs)"
	if o.Hot {
		mode = "hot account (every transfer debits one account)"
	}
	fmt.Printf("saldo bench ledger: %d accounts, %d workers, %s measured per workload in %d rounds, %s\ndatabase %s\n\n",
		o.Accounts, o.Workers, o.Duration, *rounds, mode, redact(u))

	if *baseline {
		var popt *ledger.PosterOptions
		if *group {
			popt = &po
		}
		cmp, err := ledgerbench.Compare(ctx, pool, o, *rounds, popt)
		if err != nil {
			return err
		}
		fmt.Println(cmp.Ledger)
		if *group {
			fmt.Println(cmp.Poster)
		}
		fmt.Println(cmp.PgbenchShaped)
		fmt.Println(cmp.Pipelined)
		fmt.Println()
		if shaped := cmp.PgbenchShaped.PerSecond; shaped > 0 && cmp.Pipelined.PerSecond > 0 {
			if *group {
				target := "target >= 5x at 64 workers and 1000 accounts"
				if o.Hot {
					target = "target >= 10x at 64 workers"
				}
				fmt.Printf("ratio ledger.Poster / pgbench-shaped baseline: %.2fx   (%s; group commit, avg %.1f transfers per commit)\n",
					cmp.Poster.PerSecond/shaped, target, cmp.Poster.PerCommit)
			}
			fmt.Printf("ratio ledger.Post / pgbench-shaped baseline:   %.2fx   (target >= 1.0x at 8 workers; one commit per transfer, like the baseline)\n", cmp.Ledger.PerSecond/shaped)
			fmt.Printf("ratio ledger.Post / pipelined baseline:        %.2fx   (same round trips and commits as Post)\n", cmp.Ledger.PerSecond/cmp.Pipelined.PerSecond)
			// The same comparison in CPU per transfer (client and server),
			// which a busy neighbour moves less than transfers/s.
			cpu := func(r ledgerbench.Result) time.Duration { return r.ClientCPU + r.ServerCPU }
			if base := cpu(cmp.PgbenchShaped); base > 0 {
				if *group && cpu(cmp.Poster) > 0 {
					fmt.Printf("CPU per transfer, pgbench-shaped / ledger.Poster: %.2fx   (client + server: %v against %v)\n",
						float64(base)/float64(cpu(cmp.Poster)), base.Round(time.Microsecond), cpu(cmp.Poster).Round(time.Microsecond))
				}
				if cpu(cmp.Ledger) > 0 {
					fmt.Printf("CPU per transfer, pgbench-shaped / ledger.Post:   %.2fx   (client + server: %v against %v)\n",
						float64(base)/float64(cpu(cmp.Ledger)), base.Round(time.Microsecond), cpu(cmp.Ledger).Round(time.Microsecond))
				}
			}
		}
	} else {
		res, err := ledgerbench.Ledger(ctx, pool, o)
		if err != nil {
			return err
		}
		fmt.Println(res)
	}

	fmt.Println("\nbytes on disk per transfer, after the run (WAL per workload is above):")
	lf, err := ledgerbench.LedgerFootprint(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Println(lf)
	if *baseline {
		bf, err := ledgerbench.BaselineFootprint(ctx, pool)
		if err != nil {
			return err
		}
		fmt.Println(bf)
		if lt, _, _ := lf.Total(); lt > 0 {
			if bt, _, _ := bf.Total(); bt > 0 {
				fmt.Printf("ratio ledger / baseline bytes per transfer: %.1fx\n", lt/bt)
			}
		}
	}
	fmt.Println()

	rep, err := ledger.Verify(ctx, pool)
	if err != nil {
		return fmt.Errorf("audit verify: %w", err)
	}
	if rep.OK() {
		fmt.Printf("audit verify (ledger): OK, %d accounts, %d transactions, %d postings checked in %s\n",
			rep.Accounts, rep.Transactions, rep.Postings, rep.Duration.Round(time.Millisecond))
		return nil
	}
	fmt.Printf("audit verify (ledger): %d VIOLATIONS\n", rep.Total())
	for i, v := range rep.Violations {
		if i == 20 {
			break
		}
		fmt.Println("  ", v)
	}
	return exitError{Code: 1}
}
