package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/providers/stripe"
	"github.com/saldo/saldo/reconcile"
)

func init() {
	register(command{
		Name:    "reconcile",
		Summary: "reconcile one provider's day against its statement (R19; exit 3 when it sees critical divergences)",
		Run: func(ctx context.Context, args []string) error {
			return runReconcile(ctx, args, os.Stdout, isTerminal(os.Stdout))
		},
	})
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// runReconcile is `saldo reconcile --provider NAME --date YYYY-MM-DD`: one
// run of package reconcile, as the daily job makes, with a progress bar on
// a terminal and a summary at the end. Exit status 1 when the run failed,
// 3 when it saw critical divergences (money moved that the ledger does not
// show, or moved twice), 0 otherwise.
func runReconcile(ctx context.Context, args []string, out io.Writer, tty bool) error {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	env := &envDefaults{}
	dbURL := databaseURL(fs)
	provider := fs.String("provider", "", "the provider whose statement is reconciled (its name, e.g. sim)")
	date := fs.String("date", "", "the UTC day to reconcile, YYYY-MM-DD (default: the last day that closed)")
	simURL := fs.String("sim-url", os.Getenv("SALDO_SIM_URL"), "base URL of a simulated PSP (saldo sim-provider) ($SALDO_SIM_URL)")
	simName := fs.String("sim-name", envOr("SALDO_SIM_NAME", "sim"), "provider name of the simulated PSP ($SALDO_SIM_NAME)")
	margin := fs.Duration("settle-margin", env.duration("SALDO_RECONCILE_SETTLE_MARGIN", 2*time.Hour),
		"a day is reconciled this long after it ended ($SALDO_RECONCILE_SETTLE_MARGIN)")
	staleAfter := fs.Duration("stale-after", env.duration("SALDO_RECONCILE_STALE_AFTER", 24*time.Hour),
		"report attempts unknown or in review longer than this ($SALDO_RECONCILE_STALE_AFTER)")
	pixf := registerPixFlags(fs, env)
	stripef := registerStripeFlags(fs, env)
	progress := fs.String("progress", "auto", "progress bar: auto (when stdout is a terminal), always or never")
	timeout := fs.Duration("provider-read-timeout", env.duration("SALDO_PROVIDER_READ_TIMEOUT", 30*time.Second),
		"provider read timeout (statements can be large)")
	logLevel := fs.String("log-level", envOr("SALDO_LOG_LEVEL", "warn"), "debug, info, warn or error ($SALDO_LOG_LEVEL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	problems := env.problems
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Sprintf("unexpected arguments %v", fs.Args()))
	}
	u, err := dbURL()
	if err != nil {
		problems = append(problems, err.Error())
	}
	if *provider == "" {
		problems = append(problems, "--provider is required")
	}
	var day time.Time
	if *date == "" {
		day = reconcile.DayToReconcile(time.Now(), *margin)
	} else if day, err = time.Parse(time.DateOnly, *date); err != nil {
		problems = append(problems, fmt.Sprintf("--date %q is not YYYY-MM-DD", *date))
	}
	switch *progress {
	case "auto":
	case "always":
		tty = true
	case "never":
		tty = false
	default:
		problems = append(problems, "--progress is auto, always or never")
	}
	// The provider is configured with the same flags and environment as
	// saldo serve's: the simulated PSP, Stripe or a Pix PSP.
	kind := ""
	switch {
	case *provider == "":
	case *provider == *simName && *simURL != "":
		kind = "sim"
	case *provider == stripe.Name && stripef.enabled():
		kind = "stripe"
		problems = append(problems, stripef.problems()...)
	case *provider == *pixf.name && pixf.enabled():
		kind = "pix"
		problems = append(problems, pixf.problems()...)
	default:
		problems = append(problems, fmt.Sprintf("provider %q is not configured: pass its settings as saldo serve takes them "+
			"(--sim-url with --sim-name, --stripe-api-key, --pix-base-url and the other --pix-* flags)", *provider))
	}
	if len(problems) > 0 {
		return errors.New("refusing to run:\n  " + strings.Join(problems, "\n  "))
	}
	log, err := newLogger("text", *logLevel)
	if err != nil {
		return err
	}
	settings := providers.HTTPSettings{ReadTimeout: *timeout}
	var prov providers.Provider
	switch kind {
	case "sim":
		capCtx, cancel := context.WithTimeout(ctx, 10*time.Second+*timeout)
		caps, err := sim.FetchCapabilities(capCtx, *simURL, settings)
		cancel()
		if err != nil {
			return fmt.Errorf("provider %s at %s: %w", *simName, *simURL, err)
		}
		prov = sim.NewProvider(*simURL, sim.WithName(*simName), sim.WithHTTPSettings(settings), sim.WithCapabilities(caps))
	case "stripe":
		if prov, err = stripef.build(settings, log); err != nil {
			return err
		}
	case "pix":
		if prov, err = pixf.build(settings, log); err != nil {
			return err
		}
	}

	pool, err := newPool(ctx, u)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	// A statement read at another account than the one the name's
	// attempts went to would turn them all into divergences, or resolve
	// them from a stranger's lines (R16, R19).
	locks, err := holdProviderNames(ctx, pool, []string{prov.Name()})
	if err != nil {
		return err
	}
	defer locks.Close()
	if err := checkProviderIdentities(ctx, identityCheck{Pool: pool, Providers: []providers.Provider{prov},
		Actor: processActor("reconcile"), Log: log, Locks: locks}); err != nil {
		return err
	}
	// The engine wires the owners (payouts, charges) and their notifier,
	// so a statement that resolves an attempt settles or credits it and
	// tells the merchant, as a webhook would. No workers run here.
	// Every operation the provider supports is routed to it (refunds follow
	// their charge), as saldo serve routes a single provider.
	routes := providers.Routes{}
	for _, op := range prov.Capabilities().Operations {
		if op != providers.OpRefund {
			routes[op] = []string{prov.Name()}
		}
	}
	e, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{prov}, Routes: routes,
		Logger: log, Reconcile: reconcile.Config{SettleMargin: *margin, StaleAfter: *staleAfter}})
	if err != nil {
		return err
	}
	bar := &progressBar{w: out, on: tty}
	run, err := e.Reconcile.Run(ctx, prov.Name(), day, reconcile.RunOptions{TriggeredBy: "cli", Progress: bar.update})
	bar.done()
	printRunSummary(out, run)
	if err != nil {
		return err
	}
	for _, k := range []reconcile.Kind{reconcile.KindPaidButFailed, reconcile.KindUnknownToUs, reconcile.KindDoublePayment} {
		if run.ByKind[k] > 0 {
			fmt.Fprintln(out, "CRITICAL divergences: see GET /v1/reconcile/divergences?severity=critical&status=open")
			return exitError{Code: 3}
		}
	}
	return nil
}

// printRunSummary prints what a run did.
func printRunSummary(w io.Writer, r reconcile.Run) {
	if r.ID == "" {
		return
	}
	took := ""
	if r.FinishedAt != nil {
		took = r.FinishedAt.Sub(r.StartedAt).Round(time.Millisecond).String()
	}
	fmt.Fprintf(w, "reconcile %s %s: %s (run %s, %s)\n", r.Provider, r.Day.Format(time.DateOnly), r.Status, r.ID, took)
	fmt.Fprintf(w, "  statement lines %d, matched %d, resolved by this run %d, deferred %d\n",
		r.StatementLines, r.Matched, r.Resolved, r.Deferred)
	fmt.Fprintf(w, "  divergences seen %d, new %d\n", r.Divergences, r.NewDivergences)
	kinds := make([]string, 0, len(r.ByKind))
	for k := range r.ByKind {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, "    %-28s %-8s %d\n", k, reconcile.Kind(k).Severity(), r.ByKind[reconcile.Kind(k)])
	}
	if len(r.Totals) > 0 {
		fmt.Fprintf(w, "  %-8s %-4s %18s %18s  %s\n", "currency", "dir", "statement", "ledger", "")
		for _, t := range r.Totals {
			mark := "ok"
			if t.Statement != t.Ledger {
				mark = "DIFFERS"
			}
			fmt.Fprintf(w, "  %-8s %-4s %18s %18s  %s\n", t.Currency, t.Direction, t.Statement, t.Ledger, mark)
		}
	}
	if r.Error != "" {
		fmt.Fprintf(w, "  error: %s\n", r.Error)
	}
}

// progressBar draws "[#####.....] done/total lines" on one terminal line.
type progressBar struct {
	w     io.Writer
	on    bool
	drawn bool
	last  time.Time
}

func (b *progressBar) update(done, total int) {
	if !b.on || total == 0 {
		return
	}
	if now := time.Now(); done < total && now.Sub(b.last) < 100*time.Millisecond && b.drawn {
		return
	} else {
		b.last = now
	}
	const width = 30
	n := done * width / total
	fmt.Fprintf(b.w, "\r[%s%s] %d/%d statement lines", strings.Repeat("#", n), strings.Repeat(".", width-n), done, total)
	b.drawn = true
}

func (b *progressBar) done() {
	if b.drawn {
		fmt.Fprintln(b.w)
	}
}
