package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/replica"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/providers/stripe"
)

func init() {
	register(command{
		Name:    "serve",
		Summary: "run saldo in production: the API and/or the workers (configured by flags and SALDO_* env)",
		Run:     runServe,
	})
}

// envOr returns the environment variable's value or def.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

// envDefaults reads typed SALDO_* defaults for flags, collecting a problem
// for each malformed value instead of silently using the default.
type envDefaults struct{ problems []string }

func (e *envDefaults) duration(name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		e.problems = append(e.problems, fmt.Sprintf("%s=%q is not a duration (e.g. 30s)", name, v))
		return def
	}
	return d
}

func (e *envDefaults) int(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.problems = append(e.problems, fmt.Sprintf("%s=%q is not a whole number", name, v))
		return def
	}
	return n
}

func (e *envDefaults) float(name string, def float64) float64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		e.problems = append(e.problems, fmt.Sprintf("%s=%q is not a number", name, v))
		return def
	}
	return f
}

// newLogger builds the process logger: JSON in production, text in dev.
func newLogger(format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: json or text", format)
}

func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	env := &envDefaults{}
	dbURL := databaseURL(fs)
	// Its default is read after parsing, never shown by -h: the URL may
	// carry a password.
	readURL := fs.String("read-database-url", "",
		"PostgreSQL URL of a streaming replica of --database-url: balance, statement, ledger, export and console "+
			"book reads go to it while it is within --read-max-lag (default $SALDO_READ_DATABASE_URL)")
	readMaxLag := fs.Duration("read-max-lag", env.duration("SALDO_READ_MAX_LAG", replica.DefaultMaxLag),
		"reads go to the primary while the replica may be further behind than this ($SALDO_READ_MAX_LAG)")
	listen := fs.String("listen", envOr("SALDO_LISTEN", "127.0.0.1:8080"),
		"API listen address; /metrics is served here too unless --metrics-listen is set, and asks for an operator, auditor "+
			"or admin API key (bearer, or the password of HTTP Basic): no key 401, a merchant's key 403 ($SALDO_LISTEN)")
	metricsListen := fs.String("metrics-listen", os.Getenv("SALDO_METRICS_LISTEN"),
		"serve GET /metrics on this address, without authentication, instead of on --listen: bind it to a private "+
			"address only the scraper reaches ($SALDO_METRICS_LISTEN)")
	roles := fs.String("roles", envOr("SALDO_ROLES", "api,workers"), "what this process runs: api, workers or both ($SALDO_ROLES)")
	maxWorkers := fs.Int("max-workers", env.int("SALDO_MAX_WORKERS", defaultMaxWorkers), "River workers ($SALDO_MAX_WORKERS)")
	jobsKept := fs.Duration("completed-jobs-kept", env.duration("SALDO_COMPLETED_JOBS_KEPT", engine.DefaultCompletedJobsKept),
		"how long River keeps a completed job before deleting it; a payout's history is its attempt's events ($SALDO_COMPLETED_JOBS_KEPT)")
	simURL := fs.String("sim-url", os.Getenv("SALDO_SIM_URL"), "base URL of a simulated PSP (saldo sim-provider) ($SALDO_SIM_URL)")
	simName := fs.String("sim-name", envOr("SALDO_SIM_NAME", "sim"), "provider name of the simulated PSP ($SALDO_SIM_NAME)")
	pixf := registerPixFlags(fs, env)
	stripef := registerStripeFlags(fs, env)
	routeSpec := fs.String("route", os.Getenv("SALDO_ROUTES"), "provider of each operation, as operation=provider pairs "+
		"separated by commas, e.g. card_charge=stripe,pix_charge=pix,pix_transfer=pix; operations without a route go to "+
		"the only configured provider; refunds always go to their charge's provider ($SALDO_ROUTES)")
	acceptIdentity := fs.String("accept-provider-identity", os.Getenv("SALDO_ACCEPT_PROVIDER_IDENTITY"),
		"provider names, separated by commas, whose recorded account (which account at which PSP the name means) may be "+
			"replaced by the configured one: refused while one of their attempts is open (R16) ($SALDO_ACCEPT_PROVIDER_IDENTITY)")
	connect := fs.Duration("provider-connect-timeout", env.duration("SALDO_PROVIDER_CONNECT_TIMEOUT", 3*time.Second),
		"provider connect timeout: short, fail fast when the provider is down (R3)")
	read := fs.Duration("provider-read-timeout", env.duration("SALDO_PROVIDER_READ_TIMEOUT", 30*time.Second),
		"provider read timeout: generous, a short one manufactures unknowns (R3)")
	retryMax := fs.Int("payout-max-attempts", env.int("SALDO_PAYOUT_MAX_ATTEMPTS", 3),
		"attempts per payout, the first included: a payout whose attempt the provider proves it never did (or fails with its own "+
			"'try again' code) gets its next attempt by itself, the reserve held; 1 turns this off ($SALDO_PAYOUT_MAX_ATTEMPTS)")
	retryWithin := fs.Duration("payout-retry-within", env.duration("SALDO_PAYOUT_RETRY_WITHIN", 24*time.Hour),
		"no new attempt of a payout once this long has passed since it was created ($SALDO_PAYOUT_RETRY_WITHIN)")
	retryBackoff := fs.Duration("payout-retry-backoff", env.duration("SALDO_PAYOUT_RETRY_BACKOFF", 30*time.Second),
		"wait before a payout's second attempt calls; doubled for each later one ($SALDO_PAYOUT_RETRY_BACKOFF)")
	breakerWindow := fs.Duration("breaker-window", env.duration("SALDO_BREAKER_WINDOW", time.Minute),
		"circuit breaker per provider and operation: the window its calls are counted over; 0 turns the breakers off ($SALDO_BREAKER_WINDOW)")
	breakerMin := fs.Int("breaker-min-calls", env.int("SALDO_BREAKER_MIN_CALLS", 10),
		"calls in the window before a circuit may open ($SALDO_BREAKER_MIN_CALLS)")
	breakerRate := fs.Float64("breaker-failure-rate", env.float("SALDO_BREAKER_FAILURE_RATE", 0.5),
		"share of calls without an answer (not sent, unknown) that opens a circuit ($SALDO_BREAKER_FAILURE_RATE)")
	breakerOpen := fs.Duration("breaker-open-for", env.duration("SALDO_BREAKER_OPEN_FOR", 30*time.Second),
		"how long an open circuit holds calls back before one probe goes out ($SALDO_BREAKER_OPEN_FOR)")
	resolveSpec := fs.String("resolve-schedule", envOr("SALDO_RESOLVE_SCHEDULE", "30s,1m,2m,5m,10m,30m"),
		"delays before each lookup of an unknown attempt, separated by commas; the last repeats (R15) ($SALDO_RESOLVE_SCHEDULE)")
	maxLookups := fs.Int("max-lookups", env.int("SALDO_MAX_LOOKUPS", 60),
		"answered lookups of an unknown attempt before it goes to the review queue (R18) ($SALDO_MAX_LOOKUPS)")
	unansweredReview := fs.Duration("unanswered-review-after", env.duration("SALDO_UNANSWERED_REVIEW_AFTER", 24*time.Hour),
		"an attempt whose lookups have gone unanswered this long in a row goes to the review queue (R18) ($SALDO_UNANSWERED_REVIEW_AFTER)")
	processingReview := fs.Duration("processing-review-after", env.duration("SALDO_PROCESSING_REVIEW_AFTER", 24*time.Hour),
		"an attempt the provider keeps reporting as processing this long goes to the review queue, unless the provider "+
			"said it ends later (see --processing-expected-margin) ($SALDO_PROCESSING_REVIEW_AFTER)")
	processingMargin := fs.Duration("processing-expected-margin", env.duration("SALDO_PROCESSING_EXPECTED_MARGIN",
		attempts.DefaultProcessingExpectedMargin),
		"an attempt still processing past the end its provider stated (a Stripe payout's arrival date, a Pix cob's expiry; "+
			"capped at 30 days after it began processing) plus this margin goes to the review queue ($SALDO_PROCESSING_EXPECTED_MARGIN)")
	staleCall := fs.Duration("stale-call-after", env.duration("SALDO_STALE_CALL_AFTER", 5*time.Minute),
		"a call started this long ago with nothing recorded is unknown; must exceed the longest provider call by at least 1s: "+
			"connect + TLS handshake (5s) + read, or with a Pix PSP the attempt job timeout (that + 30s), since a Pix call "+
			"may fetch a token and re-send after a 401; refused otherwise ($SALDO_STALE_CALL_AFTER)")
	shutdown := fs.Duration("shutdown-timeout", env.duration("SALDO_SHUTDOWN_TIMEOUT", 0),
		"graceful shutdown budget (default: the longest provider call, connect + TLS + read, plus 10s)")
	startupWait := fs.Duration("startup-wait", env.duration("SALDO_STARTUP_WAIT", time.Minute),
		"how long to keep retrying at start-up while the database is unreachable or restarting ($SALDO_STARTUP_WAIT)")
	notifyPrivate := fs.Bool("notify-allow-private", os.Getenv("SALDO_NOTIFY_ALLOW_PRIVATE") == "true",
		"let merchant notification URLs reach loopback and private addresses ($SALDO_NOTIFY_ALLOW_PRIVATE=true); off in production: SSRF")
	logFormat := fs.String("log-format", envOr("SALDO_LOG_FORMAT", "json"), "json or text ($SALDO_LOG_FORMAT)")
	logLevel := fs.String("log-level", envOr("SALDO_LOG_LEVEL", "info"), "debug, info, warn or error ($SALDO_LOG_LEVEL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *readURL == "" {
		*readURL = os.Getenv("SALDO_READ_DATABASE_URL")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	log, err := newLogger(*logFormat, *logLevel)
	if err != nil {
		return err
	}
	problems := env.problems
	u, err := dbURL()
	if err != nil {
		problems = append(problems, err.Error())
	}
	runAPI, runWorkers := false, false
	for _, r := range strings.Split(*roles, ",") {
		switch strings.TrimSpace(r) {
		case "api":
			runAPI = true
		case "workers":
			runWorkers = true
		default:
			problems = append(problems, fmt.Sprintf("--roles: unknown role %q (api, workers)", r))
		}
	}
	if !runAPI && !runWorkers {
		problems = append(problems, "--roles: name at least one of api, workers")
	}
	routes, err := providers.ParseRoutes(*routeSpec)
	if err != nil {
		problems = append(problems, "--route: "+err.Error())
	}
	// Each configured adapter adds itself to provs (after the checks).
	var configured []string
	if *simURL != "" {
		configured = append(configured, *simName)
	}
	if pixf.enabled() {
		configured = append(configured, *pixf.name)
		problems = append(problems, pixf.problems()...)
		if *simURL != "" && *simName == *pixf.name {
			problems = append(problems, "--sim-name and --pix-name must differ")
		}
	}
	if stripef.enabled() {
		configured = append(configured, stripe.Name)
		problems = append(problems, stripef.problems()...)
		if (*simURL != "" && *simName == stripe.Name) || (pixf.enabled() && *pixf.name == stripe.Name) {
			problems = append(problems, fmt.Sprintf("--sim-name and --pix-name must not be %q with Stripe configured", stripe.Name))
		}
	}
	if len(configured) == 0 {
		problems = append(problems, "no provider configured: pass --sim-url (or SALDO_SIM_URL) of a saldo sim-provider, "+
			"--pix-base-url / --pix-send-base-url of a Pix PSP, or --stripe-api-key (SALDO_STRIPE_API_KEY)")
	}
	if *connect <= 0 || *read <= 0 {
		problems = append(problems, "provider timeouts must be positive")
	}
	// The longest one exchange with a provider can take: connect, TLS
	// handshake, read (providers.Client cuts it there).
	longestCall := *connect + providers.DefaultTLSHandshakeTimeout + *read
	// A job outlives the longest exchange it makes, so River never cuts a
	// one-exchange call off (which would only make it unknown, but costs a
	// lookup).
	jobTimeout := longestCall + jobTimeoutSlack
	if problem := staleCallProblem(*staleCall, *connect, *read, jobTimeout, pixf.enabled(), *pixf.name); problem != "" {
		problems = append(problems, problem)
	}
	if *shutdown == 0 {
		*shutdown = longestCall + 10*time.Second
	}
	if *maxWorkers <= 0 {
		problems = append(problems, "--max-workers must be positive")
	}
	if *jobsKept <= 0 {
		problems = append(problems, "--completed-jobs-kept must be positive")
	}
	if *readMaxLag <= 0 {
		problems = append(problems, "--read-max-lag must be positive")
	}
	if *readURL != "" {
		if _, err := parseDatabaseURL(*readURL); err != nil {
			problems = append(problems, "--read-database-url: not a PostgreSQL URL")
		}
	}
	// !(rate > 0 && rate <= 1): NaN passes "rate <= 0 || rate > 1" and
	// turned the breakers off (found by review).
	if *breakerWindow < 0 || *breakerMin < 1 || !(*breakerRate > 0 && *breakerRate <= 1) || *breakerOpen <= 0 {
		problems = append(problems, "--breaker-window must not be negative, --breaker-min-calls at least 1, "+
			"--breaker-failure-rate in (0, 1], --breaker-open-for positive")
	}
	var resolveSchedule []time.Duration
	for part := range strings.SplitSeq(*resolveSpec, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil || d <= 0 {
			problems = append(problems, fmt.Sprintf("--resolve-schedule: %q is not a positive duration", strings.TrimSpace(part)))
			continue
		}
		resolveSchedule = append(resolveSchedule, d)
	}
	if *maxLookups < 1 || *unansweredReview <= 0 || *processingReview <= 0 {
		problems = append(problems, "--max-lookups must be at least 1, --unanswered-review-after and --processing-review-after positive")
	}
	if *processingMargin <= 0 {
		problems = append(problems, "--processing-expected-margin must be positive")
	}
	if *retryMax < 1 || *retryWithin < 0 || *retryBackoff < 0 {
		problems = append(problems, "--payout-max-attempts must be at least 1, --payout-retry-within and --payout-retry-backoff not negative")
	}
	var accept []string
	for n := range strings.SplitSeq(*acceptIdentity, ",") {
		if n = strings.TrimSpace(n); n != "" {
			accept = append(accept, n)
		}
	}
	if len(problems) > 0 {
		return errors.New("refusing to start:\n  " + strings.Join(problems, "\n  "))
	}

	settings := providers.HTTPSettings{ConnectTimeout: *connect, ReadTimeout: *read}
	var provs []providers.Provider
	if *simURL != "" {
		capCtx, cancel := context.WithTimeout(ctx, *connect+*read)
		caps, err := sim.FetchCapabilities(capCtx, *simURL, settings)
		cancel()
		if err != nil {
			return fmt.Errorf("refusing to start: provider %s at %s: %w", *simName, *simURL, err)
		}
		secret := os.Getenv("SALDO_SIM_WEBHOOK_SECRET")
		if secret == "" && caps.Webhooks {
			log.Warn("SALDO_SIM_WEBHOOK_SECRET is empty: every webhook from the provider will be refused (401); " +
				"attempts still resolve by lookup")
		}
		provs = append(provs, sim.NewProvider(*simURL, sim.WithName(*simName), sim.WithHTTPSettings(settings),
			sim.WithCapabilities(caps), sim.WithWebhookSecret(secret)))
	}
	if pixf.enabled() {
		p, err := pixf.build(settings, log)
		if err != nil {
			return fmt.Errorf("refusing to start: %w", err)
		}
		provs = append(provs, p)
	}
	if stripef.enabled() {
		p, err := stripef.build(settings, log)
		if err != nil {
			return fmt.Errorf("refusing to start: %w", err)
		}
		provs = append(provs, p)
	}
	byName := map[string]providers.Provider{}
	for _, p := range provs {
		byName[p.Name()] = p
	}
	if err := routes.Check(byName); err != nil {
		return fmt.Errorf("refusing to start: --route: %w", err)
	}
	// Operations without a route go to the only provider; with several,
	// each operation saldo should originate needs a route.
	var fallback string
	if len(provs) == 1 {
		fallback = provs[0].Name()
	}
	log.Info("starting saldo", "roles", *roles, "listen", *listen, "providers", configured, "routes", routes.String(),
		"default_provider", fallback)
	return runProcess(ctx, processConfig{
		DatabaseURL: u, ReadDatabaseURL: *readURL, ReadMaxLag: *readMaxLag, Listen: *listen, MetricsListen: *metricsListen, RunAPI: runAPI, RunWorkers: runWorkers,
		Providers: provs, AcceptProviderIdentity: accept, Command: "serve", PayoutProvider: fallback, ChargeProvider: fallback, Routes: routes,
		PayoutRetry: payouts.RetryPolicy{MaxAttempts: *retryMax, Within: *retryWithin, Backoff: *retryBackoff},
		MaxWorkers:  *maxWorkers, CompletedJobsKept: *jobsKept, NotifyDenyPrivate: !*notifyPrivate,
		Attempts: attempts.Config{StaleCallAfter: *staleCall, JobTimeout: jobTimeout,
			ResolveSchedule: resolveSchedule, MaxLookups: *maxLookups, UnansweredReviewAfter: *unansweredReview,
			ProcessingReviewAfter: *processingReview, ProcessingExpectedMargin: *processingMargin,
			Breaker: attempts.BreakerConfig{Window: *breakerWindow, MinCalls: *breakerMin, FailureRate: *breakerRate,
				OpenFor: *breakerOpen}},
		ShutdownTimeout: *shutdown, StartupWait: *startupWait, Logger: log,
	})
}

// jobTimeoutSlack is how much an attempt job's timeout exceeds the longest
// provider exchange.
const jobTimeoutSlack = 30 * time.Second

// staleCallMargin is how much --stale-call-after must exceed the longest
// provider call by. call_started_at is stamped before the mark that lets
// the call go out commits (a group commit: milliseconds), and the sweeper
// or resolver comparing it with its own clock may run on another host
// (NTP keeps them within milliseconds). The bound itself is already a hard
// one: every exchange is cut at connect + TLS + read by a context deadline,
// and the 5s TLS budget counts even for a plain-http provider. A second
// covers both; the provider's consistency window (R16), counted after
// stale-call-after before a "not found" fails anything, comes on top.
const staleCallMargin = time.Second

// staleCallProblem says why staleCall is too short, or "". The sweeper
// turns a call started staleCall ago, with nothing recorded, unknown, and
// the resolver counts a lookup's "not found" from call_started_at +
// staleCall for a call in flight (attempts' notFoundFailure): both take
// staleCall as the longest a call can last. A call that outlasts it could
// reach the provider after a "not found" that failed its attempt and freed
// its reserve with its fate unknown (R11, R16, R22).
//
// A sim or Stripe call (Submit) is one exchange, cut at connect + TLS
// handshake + read. A Pix call may be four: an OAuth2 token, the request,
// and after a 401 a new token and the request again (pix.Provider.do),
// each cut at connect + TLS + read; only the job's timeout, which cancels
// the call's context, bounds them together.
func staleCallProblem(staleCall, connect, read, jobTimeout time.Duration, pixConfigured bool, pixName string) string {
	if connect <= 0 || read <= 0 {
		return "" // refused on its own
	}
	longest := connect + providers.DefaultTLSHandshakeTimeout + read
	what := fmt.Sprintf("connect %s + TLS handshake %s + read %s", connect, providers.DefaultTLSHandshakeTimeout, read)
	if pixConfigured {
		what = fmt.Sprintf("the attempt job timeout, %s + %s: a call to the Pix PSP %q may fetch an OAuth2 token and, "+
			"after a 401, a new token and send again, cut only by the job's timeout", longest, jobTimeout-longest, pixName)
		longest = jobTimeout
	}
	if least := longest + staleCallMargin; staleCall < least {
		return fmt.Sprintf("--stale-call-after / $SALDO_STALE_CALL_AFTER (%s) must exceed the longest provider call, %s (%s), "+
			"by at least %s: set it to at least %s, or a call still in flight could be taken as stale, and its attempt failed "+
			"with its fate unknown", staleCall, longest, what, staleCallMargin, least)
	}
	return ""
}
