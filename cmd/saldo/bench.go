package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime/pprof"
	"sort"

	"github.com/saldo/saldo/ledger/ledgerbench"
)

func init() {
	register(command{
		Name:    "bench",
		Summary: "measure throughput: bench ledger (more with 'saldo bench -h')",
		Run:     runBench,
	})
}

// benchmark is one `saldo bench <name>` subcommand. Add one from an init
// function with registerBenchmark.
type benchmark struct {
	Name    string
	Summary string
	Run     func(ctx context.Context, args []string) error
}

var benchmarks = map[string]benchmark{}

func registerBenchmark(b benchmark) {
	if _, dup := benchmarks[b.Name]; dup {
		panic("saldo: benchmark registered twice: " + b.Name)
	}
	benchmarks[b.Name] = b
}

func runBench(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(os.Stderr, "usage: saldo bench <benchmark> [flags]\n\nbenchmarks:")
		names := make([]string, 0, len(benchmarks))
		for n := range benchmarks {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, benchmarks[n].Summary)
		}
		return flag.ErrHelp
	}
	b, ok := benchmarks[args[0]]
	if !ok {
		return fmt.Errorf("unknown benchmark %q (see 'saldo bench -h')", args[0])
	}
	if path := os.Getenv("SALDO_BENCH_CPUPROFILE"); path != "" {
		stop, err := startCPUProfile(path)
		if err != nil {
			return err
		}
		defer stop()
	}
	return b.Run(ctx, args[1:])
}

// startCPUProfile writes a Go CPU profile of this process to path until the
// returned function is called (SALDO_BENCH_CPUPROFILE; read it with
// 'go tool pprof').
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "saldo bench: cpu profile: %v\n", err)
		}
	}, nil
}

// localServerURL is where benchmarks create a throwaway database when no
// database URL is given.
const localServerURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// benchDatabase returns the database a benchmark should use: the one from
// --database-url / SALDO_DATABASE_URL, or else a throwaway database created
// on serverURL and migrated, dropped by the returned cleanup unless keep.
func benchDatabase(ctx context.Context, dbURL func() (string, error), serverURL string, keep bool) (string, func(), error) {
	if u, err := dbURL(); err == nil {
		return u, func() {}, nil
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	u, drop, err := ledgerbench.ThrowawayDatabase(ctx, serverURL, "saldo_bench", logger)
	if err != nil {
		return "", nil, fmt.Errorf("no --database-url or SALDO_DATABASE_URL, and a throwaway database on %s failed: %w", redact(serverURL), err)
	}
	cleanup := func() {
		if keep {
			fmt.Printf("kept database %s\n", redact(u))
			return
		}
		if err := drop(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "saldo bench: drop throwaway database: %v\n", err)
		}
	}
	return u, cleanup, nil
}

func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}
