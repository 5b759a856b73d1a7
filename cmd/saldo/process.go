package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"riverqueue.com/riverui"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/console"
	"github.com/saldo/saldo/internal/dbfault"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/groupcommit"
	"github.com/saldo/saldo/internal/replica"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/migrations"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/reconcile"
)

// processConfig is one saldo process: which roles it runs and with what.
// defaultMaxWorkers is --max-workers' default. Workers are cheap (they wait
// in group-commit batches without a connection) and batches grow with them:
// with 50, River's workers, not the database, capped payouts/s.
const defaultMaxWorkers = 200

type processConfig struct {
	DatabaseURL string
	// OwnsDatabase: saldo dev's throwaway database, where the process
	// connects as the tables' owner by design. Otherwise the process warns
	// at start when its role may write the ledger's tables directly.
	OwnsDatabase bool
	// ReadDatabaseURL, when set, is a streaming replica the API and the
	// console read stale-tolerant pages from (package internal/replica),
	// while it is within ReadMaxLag (default replica.DefaultMaxLag).
	ReadDatabaseURL string
	ReadMaxLag      time.Duration
	Listen          string // HTTP address (the API, or /metrics and /healthz for workers only); empty: none
	// MetricsListen, when set, serves GET /metrics on its own listener,
	// without authentication, and not on Listen, so the API's clients never
	// reach it. Unset, /metrics is on Listen behind an operations key
	// (metricsReaders).
	MetricsListen string
	RunAPI        bool
	RunWorkers    bool
	Providers     []providers.Provider
	// AcceptProviderIdentity names the providers whose recorded account
	// may be replaced by the configured one, when none of their attempts
	// is open (--accept-provider-identity, checkProviderIdentities).
	AcceptProviderIdentity []string
	// IdentityWait bounds each provider's answer to which account it is
	// configured for (default defaultIdentityWait).
	IdentityWait time.Duration
	// PayoutProvider and ChargeProvider name providers among Providers,
	// for the operations Routes does not route.
	PayoutProvider, ChargeProvider string
	// Routes names the provider of each operation (engine.Config.Routes).
	Routes providers.Routes
	// PayoutRetry is engine.Config.PayoutRetry.
	PayoutRetry payouts.RetryPolicy
	MaxWorkers  int
	// CompletedJobsKept is engine.Config.CompletedJobsKept.
	CompletedJobsKept time.Duration
	// NotifyDenyPrivate: merchant notification URLs may not reach
	// loopback or private addresses (no SSRF into the platform's network).
	NotifyDenyPrivate bool
	Attempts          attempts.Config
	ShutdownTimeout   time.Duration
	// StartupWait bounds how long start-up retries while the database is
	// unreachable (dbfault.Unavailable): a restart of PostgreSQL, or a
	// connection cut while River starts, delays start-up instead of ending
	// the process. Zero: one try.
	StartupWait time.Duration
	Logger      *slog.Logger
	// Command names the saldo command running the process ("serve",
	// "dev"), for the records it leaves.
	Command string
	// ConsoleInsecure serves the console's cookies without Secure (saldo
	// dev, plain http on loopback).
	ConsoleInsecure bool
	// Ready, optional, is called once the API listens (and workers run),
	// with the engine and the API's base URL.
	Ready func(ctx context.Context, e *engine.Engine, baseURL string) error
}

// runProcess runs saldo until ctx ends (the first SIGINT/SIGTERM), then shuts
// down gracefully: stop accepting requests, let in-flight requests and
// provider calls finish and record their results, stop River. A second
// signal stops at once; attempts stay safe (a call in flight becomes unknown
// and is resolved by lookup).
func runProcess(ctx context.Context, pc processConfig) error {
	log := pc.Logger
	// Signals are counted here: the first one also cancels ctx (main's
	// NotifyContext) and starts the graceful stop; the second forces it.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	force := make(chan struct{})
	go func() {
		n := 0
		for range sigs {
			if n++; n == 2 {
				close(force)
				return
			}
		}
	}()

	poolCfg, err := parseDatabaseURL(pc.DatabaseURL)
	if err != nil {
		return fmt.Errorf("database URL: %w", err)
	}
	if pc.MaxWorkers <= 0 {
		pc.MaxWorkers = defaultMaxWorkers
	}
	// A River worker executing an attempt holds no connection while it waits
	// in a group-commit batch; a batch holds one. The rest serve API requests,
	// resolvers, webhooks and River itself.
	poolCfg.MaxConns = int32(max(int(poolCfg.MaxConns), min(pc.MaxWorkers/4+10, 40)))
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	err = untilDatabase(ctx, log, pc.StartupWait, "ping", func(ctx context.Context) error {
		pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return pool.Ping(pingCtx)
	})
	if err != nil {
		return fmt.Errorf("database unreachable: %w", err)
	}
	// The ledger's balance and shape are checked by its write functions
	// (migration 00100); only privileges keep other writers out. River
	// reindexes its job indexes daily, which only their owner may.
	privs, err := migrations.CallerPrivileges(ctx, pool)
	if err != nil {
		log.Warn("could not read the database role's privileges", "err", err)
	}
	if privs.LedgerWritable && !pc.OwnsDatabase {
		log.Warn("saldo connects as a role that may write the ledger's tables directly, around the checks of its write functions: "+
			"run 'saldo migrate --app-role ROLE' as the tables' owner and serve as ROLE (docs/runbook.md, \"Two database roles\")",
			"role", privs.Role)
	}
	if err == nil && !privs.OwnsRiver {
		log.Info("River's daily reindex is left to the owner of its tables (docs/runbook.md, \"Two database roles\")")
	}

	// Before any worker, sender or resolver starts: each provider name
	// still means the account it meant (R4, R8, R16).
	// The names are held for the life of the process, so that no other
	// process re-points one while this one runs (providerNameLocks).
	names := make([]string, 0, len(pc.Providers))
	for _, p := range pc.Providers {
		names = append(names, p.Name())
	}
	// A database still settling at start-up (--startup-wait) is waited
	// for here too: each name's check is one transaction, so a retry after
	// a cut connection, even one whose COMMIT was lost, finds what it
	// wrote and agrees with it. A refusal is never retried.
	var locks *providerNameLocks
	err = untilDatabase(ctx, log, pc.StartupWait, "provider identity", func(ctx context.Context) error {
		l, err := holdProviderNames(ctx, pool, names)
		if err != nil {
			return err
		}
		if err := checkProviderIdentities(ctx, identityCheck{Pool: pool, Providers: pc.Providers,
			Accept: pc.AcceptProviderIdentity, Wait: pc.IdentityWait, Actor: processActor(pc.Command), Log: log,
			Locks: l}); err != nil {
			l.Close()
			return err
		}
		locks = l
		return nil
	})
	if err != nil {
		return err
	}
	defer locks.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := attempts.NewMetrics()
	reg.MustRegister(metrics.Collectors()...)
	reg.MustRegister(ledger.Collectors()...)
	reg.MustRegister(groupcommit.Collectors()...)
	reg.MustRegister(attempts.BreakerCollectors()...)

	// Daily reconciliation (R19): when a day is reconciled and when an open
	// attempt is reported stale ($SALDO_RECONCILE_SETTLE_MARGIN, default 2h;
	// $SALDO_RECONCILE_STALE_AFTER, default 24h).
	renv := &envDefaults{}
	rcfg := reconcile.Config{SettleMargin: renv.duration("SALDO_RECONCILE_SETTLE_MARGIN", 2*time.Hour),
		StaleAfter: renv.duration("SALDO_RECONCILE_STALE_AFTER", 24*time.Hour)}
	if len(renv.problems) > 0 {
		return errors.New("refusing to start:\n  " + strings.Join(renv.problems, "\n  "))
	}
	e, err := engine.New(engine.Config{
		Pool: pool, Providers: pc.Providers, PayoutProvider: pc.PayoutProvider, ChargeProvider: pc.ChargeProvider,
		Routes: pc.Routes, PayoutRetry: pc.PayoutRetry,
		Logger: log, RunWorkers: pc.RunWorkers, MaxWorkers: pc.MaxWorkers, CompletedJobsKept: pc.CompletedJobsKept,
		Attempts: pc.Attempts, Metrics: metrics,
		Notifications: api.NotifierConfig{HTTP: providers.HTTPSettings{DenyPrivateNetworks: pc.NotifyDenyPrivate}},
		Reconcile:     rcfg, NoRiverReindex: !privs.OwnsRiver,
	})
	if err != nil {
		return err
	}
	// saldo_reconcile_divergences{provider,kind}, counted at each scrape.
	reg.MustRegister(e.Reconcile.Collector())
	if pc.RunWorkers {
		// River's Start stops what it started when it fails, so it can be
		// called again. ctx (the first signal) interrupts the start only:
		// once started, River stops when e.Stop says, below, so a signal
		// does not cancel the provider calls in flight (engine.Start).
		if err := untilDatabase(ctx, log, pc.StartupWait, "river", e.Start); err != nil {
			return fmt.Errorf("river: %w", err)
		}
		log.Info("workers started", "max_workers", pc.MaxWorkers)
		// An early return below (a listener that fails, Ready's error)
		// stops River at once; after the graceful stop this is a no-op.
		defer e.Stop(canceledContext()) //nolint:errcheck
	}

	var srv *http.Server
	serveErr := make(chan error, 2)
	var metricsSrv *http.Server
	if pc.MetricsListen != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		ln, err := net.Listen("tcp", pc.MetricsListen)
		if err != nil {
			return fmt.Errorf("metrics listen %s: %w", pc.MetricsListen, err)
		}
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
			WriteTimeout: 60 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		defer metricsSrv.Close() //nolint:errcheck // a no-op after the Shutdown below; closes it on an early return
		go func() { serveErr <- metricsSrv.Serve(ln) }()
		log.Info("metrics listening", "addr", ln.Addr().String())
	}

	if pc.Listen != "" {
		// An API process serves the API, /metrics and the River UI; a
		// workers-only process still serves /metrics and /healthz, so every
		// process of a fleet can be scraped. /metrics on Listen asks for an
		// operations key (metricsReaders).
		var handler http.Handler
		if pc.RunAPI {
			reads, closeReads, err := openReads(pool, pc, log)
			if err != nil {
				return err
			}
			defer closeReads()
			if reads != nil {
				reg.MustRegister(reads.Collectors()...)
			}
			handler, err = buildHTTP(e, reads, reg, log, pc.MetricsListen == "", !pc.NotifyDenyPrivate, pc.ConsoleInsecure)
			if err != nil {
				return err
			}
		} else {
			mux := http.NewServeMux()
			if pc.MetricsListen == "" {
				// No API here, but the API's keys: an api.Server only
				// authenticates them.
				keys, err := api.New(api.Config{Pool: e.Pool, Payouts: e.Payouts, Attempts: e.Attempts, Logger: log})
				if err != nil {
					return err
				}
				mux.Handle("GET /metrics", guardedMetrics(keys, reg))
			}
			mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
			})
			handler = mux
		}
		ln, err := net.Listen("tcp", pc.Listen)
		if err != nil {
			return fmt.Errorf("listen %s: %w", pc.Listen, err)
		}
		srv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
			WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		go func() { serveErr <- srv.Serve(ln) }()
		log.Info("api listening", "addr", ln.Addr().String(), "api", pc.RunAPI)
		if pc.Ready != nil {
			if err := pc.Ready(ctx, e, "http://"+ln.Addr().String()); err != nil {
				_ = srv.Close()
				return err
			}
		}
	} else if pc.Ready != nil {
		if err := pc.Ready(ctx, e, ""); err != nil {
			return err
		}
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http: %w", err)
		}
	}
	log.Info("shutting down: finishing in-flight requests and provider calls (signal again to stop at once)")
	timeout := pc.ShutdownTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	stopCtx, cancelStop := context.WithTimeout(context.Background(), timeout)
	defer cancelStop()
	go func() {
		select {
		case <-force:
			log.Warn("second signal: stopping at once")
			cancelStop()
		case <-stopCtx.Done():
		}
	}()
	// River stops fetching now and lets its running jobs finish, beside the
	// HTTP servers' own graceful stop, within the same budget; at its end
	// (or on a second signal) running jobs are cancelled.
	riverStopped := make(chan error, 1)
	if pc.RunWorkers {
		go func() { riverStopped <- e.Stop(stopCtx) }()
	} else {
		riverStopped <- nil
	}
	var errs []error
	if srv != nil {
		if err := srv.Shutdown(stopCtx); err != nil {
			errs = append(errs, srv.Close())
		}
	}
	if metricsSrv != nil {
		if err := metricsSrv.Shutdown(stopCtx); err != nil {
			errs = append(errs, metricsSrv.Close())
		}
	}
	if err := <-riverStopped; err != nil {
		errs = append(errs, err)
	}
	log.Info("stopped")
	return errors.Join(errs...)
}

// canceledContext is a context that has already ended: Engine.Stop with it
// cancels running jobs at once.
func canceledContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// metricsReaders are the roles whose keys may read /metrics on the API's
// listener: those that read operations data (GET /v1/attempts/..., the
// review queue, reconciliation). /metrics shows merchant-level activity and
// each provider's health, so a merchant's key may not, and without a key it
// is 401. A scraper sends the key as a bearer token (Prometheus's
// authorization.credentials) or as the password of HTTP Basic (basic_auth).
// On --metrics-listen, a private network port, /metrics asks for nothing.
var metricsReaders = []api.Role{api.RoleOperator, api.RoleAuditor, api.RoleAdmin}

// guardedMetrics is /metrics behind an operations key (metricsReaders).
func guardedMetrics(keys *api.Server, reg *prometheus.Registry) http.Handler {
	return keys.RequireRoles(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), metricsReaders...)
}

// buildHTTP mounts the API, /metrics behind an operations key (unless it
// has a listener of its own),
// the River UI (operators only) and the console (/console, package console).
// allowPrivate lets merchants register notification URLs on loopback and
// private addresses (saldo dev); consoleInsecure drops Secure from the
// console's cookies (saldo dev).
func buildHTTP(e *engine.Engine, reads *replica.Reads, reg *prometheus.Registry, log *slog.Logger, serveMetrics, allowPrivate, consoleInsecure bool) (http.Handler, error) {
	apiSrv, err := api.New(api.Config{Pool: e.Pool, Payouts: e.Payouts, Attempts: e.Attempts, Charges: e.Charges,
		Providers: e.Providers, Logger: log, AllowPrivateNotificationURLs: allowPrivate, Reads: reads})
	if err != nil {
		return nil, err
	}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "saldo_http_requests_total",
		Help: "HTTP requests by route pattern and status."}, []string{"method", "route", "status"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "saldo_http_request_duration_seconds",
		Help: "HTTP request latency by route pattern.", Buckets: prometheus.DefBuckets}, []string{"method", "route"})
	reg.MustRegister(requests, latency)

	ui, err := riverui.NewHandler(&riverui.HandlerOpts{Endpoints: riverui.NewEndpoints(e.River, nil),
		Logger: log, Prefix: "/ops/river"})
	if err != nil {
		return nil, fmt.Errorf("river ui: %w", err)
	}
	if err := ui.Start(context.Background()); err != nil {
		return nil, fmt.Errorf("river ui: %w", err)
	}

	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			start := time.Now()
			sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
			next.ServeHTTP(sw, req)
			route := "unmatched"
			if rc := chi.RouteContext(req.Context()); rc != nil && rc.RoutePattern() != "" {
				route = rc.RoutePattern()
			}
			method := methodLabel(req.Method)
			requests.WithLabelValues(method, route, statusLabel(sw.status)).Inc()
			latency.WithLabelValues(method, route).Observe(time.Since(start).Seconds())
		})
	})
	if serveMetrics {
		r.Handle("/metrics", guardedMetrics(apiSrv, reg))
	}
	r.Handle("/ops/river", apiSrv.RequireRoles(ui, api.RoleOperator, api.RoleAdmin))
	r.Handle("/ops/river/*", apiSrv.RequireRoles(ui, api.RoleOperator, api.RoleAdmin))
	con, err := console.New(console.Config{Pool: e.Pool, Attempts: e.Attempts, Payouts: e.Payouts, Charges: e.Charges,
		Logger: log.With("component", "console"), Insecure: consoleInsecure, Reads: reads})
	if err != nil {
		return nil, err
	}
	r.Handle(console.Prefix, con)
	r.Handle(console.Prefix+"/*", con)
	r.Handle("/*", apiSrv)
	return r, nil
}

// openReads opens the read replica's pool and starts measuring its lag,
// when pc names one. A replica that does not answer is no reason not to
// start: reads go to the primary until it does (saldo_replica_up).
func openReads(primary *pgxpool.Pool, pc processConfig, log *slog.Logger) (*replica.Reads, func(), error) {
	if pc.ReadDatabaseURL == "" {
		return nil, func() {}, nil
	}
	cfg, err := parseDatabaseURL(pc.ReadDatabaseURL)
	if err != nil {
		return nil, nil, fmt.Errorf("read database URL: %w", err)
	}
	// A replica that stops answering must cost a routed read little: it is
	// dropped and served by the primary.
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	// pgx's default (4 on 2 cores) would queue dashboards behind one long
	// CSV export.
	cfg.MaxConns = max(cfg.MaxConns, 20)
	rpool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("read database: %w", err)
	}
	reads, err := replica.New(replica.Config{Primary: primary, Replica: rpool, MaxLag: pc.ReadMaxLag,
		Logger: log.With("component", "replica")})
	if err != nil {
		rpool.Close()
		return nil, nil, err
	}
	return reads, func() { reads.Close(); rpool.Close() }, nil
}

// methodLabel bounds the method label: a client may send any token as a
// method, and each would otherwise be a new time series.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
		http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// statusLabel bounds the status label to the HTTP status codes.
func statusLabel(code int) string {
	if code < 100 || code > 599 {
		return "other"
	}
	return strconv.Itoa(code)
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// untilDatabase runs step until it succeeds, fails for another reason than
// an unreachable database, or the database stays unreachable for wait (or
// ctx ends). Start-up steps are reads and River's own start, which is
// idempotent: retrying one never redoes a write.
func untilDatabase(ctx context.Context, log *slog.Logger, wait time.Duration, step string, fn func(context.Context) error) error {
	deadline := time.Now().Add(wait)
	backoff := 200 * time.Millisecond
	for {
		err := fn(ctx)
		if err == nil || !dbfault.Unavailable(err) || ctx.Err() != nil || time.Now().Add(backoff).After(deadline) {
			return err
		}
		log.Warn("database unavailable at start-up; retrying", "step", step, "error", err.Error(), "retry_in", backoff.String())
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
