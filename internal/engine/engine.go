// Package engine wires saldo's packages into one running system: the
// database pool, the providers, the attempts core, payouts (with refunds),
// charges, outbound notifications, daily reconciliation, and the River
// client whose workers submit and resolve attempts, poll Pix charges,
// deliver notifications and reconcile each provider's day. `saldo serve`, `saldo
// dev`, the benchmarks and end-to-end tests all build it the same way.
package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/reconcile"
)

// NotifyQueue is the River queue merchant notification deliveries run on,
// apart from the attempts' submits and lookups on the default queue and
// with its own, smaller worker count (Config.NotifyWorkers): a delivery
// waits on a merchant's endpoint (up to connect + read timeout, and 15
// tries per event), so endpoints that accept connections and never answer
// would otherwise hold every shared worker and stall every merchant's
// payouts. Deliveries enqueued on the default queue before it existed are
// still worked there.
const NotifyQueue = "notifications"

// Config configures an Engine.
type Config struct {
	// Pool is the database; the engine does not close it.
	Pool *pgxpool.Pool
	// Providers available to attempts, by their Name().
	Providers []providers.Provider
	// PayoutProvider names the provider outgoing money uses when Routes
	// names none for its operation.
	PayoutProvider string
	// ChargeProvider names the provider charges go through when Routes
	// names none for their operation (default PayoutProvider).
	ChargeProvider string
	// Routes names the provider of each operation (card charges to one
	// PSP, Pix to another); operations without a route use PayoutProvider
	// or ChargeProvider. Every route must name a configured provider that
	// supports its operation: New refuses anything else. Refunds are not
	// routed: they go to the provider of their charge.
	Routes providers.Routes
	// PayoutRetry opens a payout's next attempt by itself after a transient
	// failure, the reserve held (payouts.RetryPolicy; zero: never).
	PayoutRetry payouts.RetryPolicy
	// Charges tunes the charges service; Pool, Attempts, Provider, Clock
	// and Logger are filled in by the engine.
	Charges charges.Config
	// Notifications tunes outbound merchant notifications (R24); Pool,
	// Clock and Logger are filled in by the engine.
	Notifications api.NotifierConfig
	// Clock for attempts and payouts; default the wall clock.
	Clock  attempts.Clock
	Logger *slog.Logger
	// RunWorkers: this process works River jobs. False makes an insert-only
	// engine (an API-only process).
	RunWorkers bool
	// MaxWorkers is the River worker count of the default queue. Default 50.
	MaxWorkers int
	// NotifyWorkers is the worker count of NotifyQueue, where merchant
	// notification deliveries run. Default MaxWorkers/10, at least 2.
	NotifyWorkers int
	// FetchPollInterval of River's producer. Default River's (1s); tests and
	// benchmarks use a few milliseconds.
	FetchPollInterval time.Duration
	// FetchCooldown is the least time between two fetches of River's
	// producer (default 10ms, River's own is 100ms). Each fetch takes at most
	// as many jobs as there are free workers, so it bounds submits per
	// second: MaxWorkers per cooldown. Group commit makes a submit cheap
	// enough for River's 100ms to be the ceiling.
	FetchCooldown time.Duration
	// CompletedJobsKept is how long River keeps a completed job before its
	// cleaner deletes it (default DefaultCompletedJobsKept; River's own is
	// 24 h). Discarded and cancelled jobs keep River's defaults (7 days,
	// 24 h): they are the ones worth reading later.
	CompletedJobsKept time.Duration
	// NoRiverReindex turns River's daily REINDEX of its job indexes off:
	// only the tables' owner may reindex, and a process serving as the
	// application role (docs/runbook.md, "Two database roles") would log
	// its refusal every night. The owner reindexes instead.
	NoRiverReindex bool
	// Attempts lets the caller tune the attempts core; Pool, Providers,
	// Clock and Logger are filled in by the engine.
	Attempts attempts.Config
	// Metrics for attempts, optional.
	Metrics *attempts.Metrics
	// Reconcile tunes daily reconciliation (R19): SettleMargin, StaleAfter,
	// OnAlert; Pool, Attempts, Providers, Clock and Logger are filled in by
	// the engine. A daily job per provider that publishes statements.
	Reconcile reconcile.Config
	// Register, optional, adds more workers (charges, notifications) and is
	// called with the built services before the River client is created.
	Register func(e *Engine, w *river.Workers) error
}

// IdempotencyRetention is how long the API keeps finished idempotent
// requests for replay (at least 24 hours, as the API documents).
const IdempotencyRetention = 24 * time.Hour

// DefaultCompletedJobsKept is how long River keeps completed jobs unless
// Config.CompletedJobsKept says otherwise. A payout's history is its
// attempt's events, not its River jobs; at a thousand payouts a second,
// River's own 24 h would keep about 90 million completed submit jobs, with
// their seven indexes. Submit and resolver jobs are unique among live
// states only, and the daily reconciliation job skips a day a job already
// reconciled, so deleting completed jobs never lets work run twice.
const DefaultCompletedJobsKept = time.Hour

// Engine is a wired saldo.
type Engine struct {
	Pool      *pgxpool.Pool
	Attempts  *attempts.Service
	Payouts   *payouts.Service
	Charges   *charges.Service
	Notifier  *api.Notifier
	Reconcile *reconcile.Service
	Providers map[string]providers.Provider
	River     *river.Client[pgx.Tx]
	Logger    *slog.Logger
	Clock     attempts.Clock
	// Periodic jobs added by Register functions.
	Periodic []*river.PeriodicJob

	// cancelRun ends the context River runs on (Start, Stop).
	cancelRun context.CancelFunc
}

// New builds the services and the River client (not started).
func New(cfg Config) (*Engine, error) {
	if cfg.Pool == nil {
		return nil, errors.New("engine: Config.Pool is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = attempts.SystemClock{}
	}
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = 50
	}
	if cfg.NotifyWorkers <= 0 {
		cfg.NotifyWorkers = max(2, cfg.MaxWorkers/10)
	}
	byName := map[string]providers.Provider{}
	for _, p := range cfg.Providers {
		if _, dup := byName[p.Name()]; dup {
			return nil, fmt.Errorf("engine: provider %q configured twice", p.Name())
		}
		byName[p.Name()] = p
	}
	if err := cfg.Routes.Check(byName); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	ac := cfg.Attempts
	ac.Pool, ac.Providers, ac.Clock, ac.Logger, ac.Metrics = cfg.Pool, byName, cfg.Clock, cfg.Logger, cfg.Metrics
	att, err := attempts.New(ac)
	if err != nil {
		return nil, err
	}
	nc := cfg.Notifications
	nc.Pool, nc.Clock, nc.Logger = cfg.Pool, cfg.Clock, cfg.Logger
	if nc.MaxInFlightPerMerchant <= 0 {
		// A quarter of the delivery workers: a merchant whose endpoints
		// hang holds at most that many; the others serve everyone else.
		nc.MaxInFlightPerMerchant = max(1, cfg.NotifyWorkers/4)
	}
	nc.Queue = cmp.Or(nc.Queue, NotifyQueue)
	notifier, err := api.NewNotifier(nc)
	if err != nil {
		return nil, err
	}
	cc := cfg.Charges
	cc.Pool, cc.Attempts, cc.Clock, cc.Logger = cfg.Pool, att, cfg.Clock, cfg.Logger
	cc.Provider, cc.Routes = cmp.Or(cfg.ChargeProvider, cfg.PayoutProvider), cfg.Routes
	cc.OnFinal, cc.OnFinalMany, cc.OnDiverged = notifier.ChargeFinal, notifier.ChargesFinal, notifier.ChargeDiverged
	ch, err := charges.New(cc)
	if err != nil {
		return nil, err
	}
	po, err := payouts.New(payouts.Config{Pool: cfg.Pool, Attempts: att, Provider: cfg.PayoutProvider, Routes: cfg.Routes, Retry: cfg.PayoutRetry,
		Clock: cfg.Clock, Logger: cfg.Logger, Charges: ch, OnFinal: notifier.PayoutFinal,
		OnFinalMany: notifier.PayoutsFinal, OnDiverged: notifier.PayoutDiverged})
	if err != nil {
		return nil, err
	}
	rcfg := cfg.Reconcile
	rcfg.Pool, rcfg.Attempts, rcfg.Providers, rcfg.Clock, rcfg.Logger = cfg.Pool, att, byName, cfg.Clock, cfg.Logger
	rec, err := reconcile.New(rcfg)
	if err != nil {
		return nil, err
	}
	e := &Engine{Pool: cfg.Pool, Attempts: att, Payouts: po, Charges: ch, Notifier: notifier, Reconcile: rec,
		Providers: byName, Logger: cfg.Logger, Clock: cfg.Clock}

	workers := river.NewWorkers()
	att.AddWorkers(workers)
	ch.AddWorkers(workers)
	notifier.AddWorkers(workers)
	api.AddWorkers(workers, cfg.Pool, cfg.Logger)
	rec.AddWorkers(workers)
	e.Periodic = append(e.Periodic, api.PeriodicJobs(IdempotencyRetention)...)
	e.Periodic = append(e.Periodic, rec.PeriodicJobs()...)
	if cfg.Register != nil {
		if err := cfg.Register(e, workers); err != nil {
			return nil, err
		}
	}
	// A job whose process died stays "running" until River rescues it; the
	// attempts sweeper leaves attempts with a running submit job alone, so
	// the rescue must come soon after the longest job could have ended.
	jobTimeout := cmp.Or(cfg.Attempts.JobTimeout, attempts.DefaultJobTimeout)
	rc := &river.Config{Logger: cfg.Logger, Workers: workers, RescueStuckJobsAfter: jobTimeout + time.Minute,
		CompletedJobRetentionPeriod: cmp.Or(cfg.CompletedJobsKept, DefaultCompletedJobsKept)}
	if cfg.NoRiverReindex {
		rc.ReindexerIndexNames = []string{}
	}
	if cfg.RunWorkers {
		rc.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.MaxWorkers}}
		if nc.Queue != river.QueueDefault {
			rc.Queues[nc.Queue] = river.QueueConfig{MaxWorkers: cfg.NotifyWorkers}
		}
		rc.PeriodicJobs = append(att.PeriodicJobs(), e.Periodic...)
		rc.FetchCooldown = cmp.Or(cfg.FetchCooldown, 10*time.Millisecond)
		if cfg.FetchPollInterval > 0 {
			rc.FetchPollInterval = cfg.FetchPollInterval
			rc.FetchCooldown = min(cfg.FetchPollInterval, rc.FetchCooldown)
		}
	}
	client, err := river.NewClient(riverpgxv5.New(cfg.Pool), rc)
	if err != nil {
		return nil, fmt.Errorf("engine: river client: %w", err)
	}
	att.SetRiverClient(client)
	notifier.SetRiverClient(client)
	e.River = client
	return e, nil
}

// Start starts River's workers (when configured to run them). ctx bounds
// the start only: once River runs, ending ctx does not stop it; Stop does.
//
// River treats the end of its start context as StopAndCancel (without a
// SoftStopTimeout it cancels every running job's context at once), and
// callers pass the context the first SIGTERM cancels: every provider call
// on the wire at a deploy would be cut off and recorded unknown, although
// the shutdown budget would have let it finish and record its real answer
// (R1, R11; docs/pitfalls.md, "River's start context is its jobs'
// context"). So River runs on a context the caller's cancellation does not
// reach once Start has returned, and Stop stops it softly, then hard at
// its context's end.
func (e *Engine) Start(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// While River starts, ctx still interrupts it (a signal during a
	// start-up that waits for the database).
	unhook := context.AfterFunc(ctx, cancel)
	err := e.River.Start(runCtx)
	unhook()
	if err != nil {
		cancel()
		return err
	}
	e.cancelRun = cancel
	return nil
}

// Stop stops River gracefully: it fetches no more jobs, and running jobs
// (in-flight provider calls) finish and record their results; ctx bounds
// the wait, after which running jobs are cancelled (a hard stop: attempts
// stay safe, a call in flight becomes unknown and is resolved by lookup).
func (e *Engine) Stop(ctx context.Context) error {
	err := e.River.Stop(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		err = e.River.StopAndCancel(context.Background())
	}
	if e.cancelRun != nil {
		e.cancelRun()
	}
	return err
}
