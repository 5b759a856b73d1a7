// Package api is saldo's HTTP API: a chi router with API-key authentication
// by role, idempotent POSTs, RFC 9457 problem+json errors, provider webhooks
// and outbound notifications (R24). docs/openapi.yaml describes it and is
// served at /openapi.yaml; the tests validate every request and response
// they make against it.
//
// # Roles
//
// Every /v1 route except provider webhooks needs "Authorization: Bearer
// sk_...". A key has one role:
//
//   - merchant: one merchant's own balances, payouts, splits and
//     notification endpoints. Another merchant's resources are 404, never
//     403, so a key cannot probe which ids exist.
//   - auditor: read-only, everything (merchants, balances, payouts, the
//     ledger with CSV export, attempts, the review queue, reconciliation
//     divergences with CSV export). Any POST is 403.
//   - operator: attempts, the review queue and manual resolution, and
//     reconciliation divergences and their resolution (the operator id
//     recorded is the key id).
//   - admin: merchants, keys, funding adjustments, and anything a merchant
//     key can do on any merchant.
//
// # Idempotency
//
// A POST with an Idempotency-Key header is run at most once per (API key,
// Idempotency-Key) pair; routes that move money require the header. See
// idempotency.go for the exact semantics and the 24 hour retention.
package api

import (
	"context"
	_ "embed"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/pgtext"
	"github.com/saldo/saldo/internal/replica"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
)

// OpenAPI is the OpenAPI 3 document of this API (docs/openapi.yaml links to
// this file).
//
//go:embed openapi.yaml
var OpenAPI []byte

// Clock tells the time (tests move it).
type Clock interface{ Now() time.Time }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// WebhookHandler is given a verified provider event before the attempts
// core is. It reports whether it handled the event (handled == false passes
// it on). Charges plug in here: Config.WebhookHandlers =
// []WebhookHandler{chargesService.HandleProviderEvent}.
type WebhookHandler func(ctx context.Context, provider string, ev providers.WebhookEvent) (handled bool, err error)

// Config configures a Server. Pool, Payouts and Attempts are required.
type Config struct {
	Pool     *pgxpool.Pool
	Payouts  *payouts.Service
	Attempts *attempts.Service
	// Charges, optional, adds the charge and refund routes and is offered
	// every webhook event first (charges.HandleProviderEvent).
	Charges *charges.Service
	// Providers by name, for webhook verification (ParseWebhook).
	Providers map[string]providers.Provider
	// WebhookHandlers are tried in order for each verified webhook event;
	// when none handles it, the event resolves an attempt by reference
	// (attempts.ResolveByReference, source webhook).
	WebhookHandlers []WebhookHandler
	Logger          *slog.Logger
	// Clock defaults to the wall clock. Webhook timestamps are checked
	// against it.
	Clock Clock
	// MaxBodyBytes bounds request bodies (default 1 MiB); larger is 413.
	MaxBodyBytes int64
	// IdempotencyLease is how long a running idempotent request holds its
	// key before a retry may take it over (the request is presumed dead).
	// Default 1 minute; it must exceed the longest request.
	IdempotencyLease time.Duration
	// IdempotencyRetention is how long finished idempotent requests are
	// kept for replay (at least and by default 24 hours).
	IdempotencyRetention time.Duration
	// AllowPrivateNotificationURLs lets merchants register notification
	// URLs on loopback, private and link-local addresses. Off (the default),
	// such URLs are refused at registration (and the Notifier's
	// DenyPrivateNetworks refuses them again when dialled). For saldo dev
	// and tests, whose receivers listen on loopback; never in production
	// (server-side request forgery into the platform's network).
	AllowPrivateNotificationURLs bool
	// AuthCacheTTL is how long a successful API key lookup is reused
	// without asking the database (default DefaultAuthCacheTTL; negative:
	// every request looks its key up). A key revoked through this server
	// stops at once; revoked elsewhere (saldo keys revoke, another API
	// process), within this time.
	AuthCacheTTL time.Duration
	// Reads, optional, sends the reads that may be a little stale (balances,
	// the merchant statement, the ledger's entries, balances at an instant
	// and CSV export) to a streaming replica while it is fresh enough, with
	// the Saldo-Replica-Lag header on each answer it serves (package
	// internal/replica). Authentication, scoping and every other route read
	// the primary. Nil: everything reads Pool.
	Reads *replica.Reads
}

// DefaultAuthCacheTTL is the default Config.AuthCacheTTL.
const DefaultAuthCacheTTL = time.Second

// DefaultMaxBodyBytes is the default request body limit.
const DefaultMaxBodyBytes = 1 << 20

// MinIdempotencyRetention is the shortest time an idempotency key is kept.
const MinIdempotencyRetention = 24 * time.Hour

// Server is the API. It is an http.Handler.
type Server struct {
	cfg     Config
	pool    *pgxpool.Pool
	payouts *payouts.Service
	att     *attempts.Service
	clock   Clock
	log     *slog.Logger
	router  chi.Router
	keys    *keyCache
	// reads routes a stale-tolerant GET to the replica: r.With(s.reads.Route).
	// Its handler reads through s.db(r).
	reads *replica.Reads
}

// New builds the API handler. Mount it at the root of a listener (it serves
// /healthz, /readyz, /openapi.yaml and /v1/...). The wiring saldo serve
// needs:
//
//	notifier, _ := api.NewNotifier(api.NotifierConfig{Pool: pool})
//	pay, _ := payouts.New(payouts.Config{..., OnFinal: notifier.PayoutFinal})
//	workers := river.NewWorkers()
//	notifier.AddWorkers(workers)                   // notification delivery
//	api.AddWorkers(workers, pool, logger)          // idempotency cleanup
//	riverCfg.PeriodicJobs = append(riverCfg.PeriodicJobs, api.PeriodicJobs(24*time.Hour)...)
//	notifier.SetRiverClient(client)
//	srv, _ := api.New(api.Config{Pool: pool, Payouts: pay, Attempts: att,
//		Charges: ch, Providers: byName, Logger: logger})
//
// With Config.Charges set, charges' webhook handler is offered every event
// first; do not also list it in WebhookHandlers.
func New(cfg Config) (*Server, error) {
	if cfg.Pool == nil || cfg.Payouts == nil || cfg.Attempts == nil {
		return nil, errors.New("api: Config.Pool, Config.Payouts and Config.Attempts are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.AuthCacheTTL == 0 {
		cfg.AuthCacheTTL = DefaultAuthCacheTTL
	}
	if cfg.IdempotencyLease <= 0 {
		cfg.IdempotencyLease = time.Minute
	}
	if cfg.IdempotencyRetention < MinIdempotencyRetention {
		cfg.IdempotencyRetention = MinIdempotencyRetention
	}
	if cfg.Providers == nil {
		cfg.Providers = map[string]providers.Provider{}
	}
	if cfg.Charges != nil {
		cfg.WebhookHandlers = append([]WebhookHandler{cfg.Charges.HandleProviderEvent}, cfg.WebhookHandlers...)
	}
	s := &Server{cfg: cfg, pool: cfg.Pool, payouts: cfg.Payouts, att: cfg.Attempts, clock: cfg.Clock, log: cfg.Logger,
		reads: cfg.Reads, keys: &keyCache{ttl: cfg.AuthCacheTTL}}
	s.router = s.routes()
	return s, nil
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

func (s *Server) routes() chi.Router {
	r := chi.NewRouter()
	r.Use(s.recoverer, s.accessLog, s.guard)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.problem(w, r, errNotFound)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		s.problem(w, r, errMethodNotAllowed)
	})
	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Get("/openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(OpenAPI)
	})

	// Provider webhooks authenticate by signature, not by API key.
	r.Post("/v1/webhooks/{provider}", s.webhook)

	r.Route("/v1", func(r chi.Router) {
		r.Use(s.authenticate)

		r.With(s.allow(RoleAdmin), s.idempotent(false)).Post("/keys", s.createKey)
		r.With(s.allow(RoleAdmin)).Get("/keys", s.listKeys)
		r.With(s.allow(RoleAdmin), s.idempotent(false)).Post("/keys/{key_id}/revoke", s.revokeKey)

		r.With(s.allow(RoleAdmin), s.idempotent(false)).Post("/merchants", s.createMerchant)
		r.With(s.allow(RoleAdmin, RoleAuditor)).Get("/merchants", s.listMerchants)

		r.Route("/merchants/{merchant_id}", func(r chi.Router) {
			r.Use(s.merchantScope)
			read := s.allow(RoleMerchant, RoleAdmin, RoleAuditor)
			write := s.allow(RoleMerchant, RoleAdmin)

			r.With(read).Get("/", s.getMerchant)
			r.With(read, s.reads.Route).Get("/balances", s.balances)
			r.With(read, s.reads.Route).Get("/statement", s.statement)

			r.With(write, s.idempotent(true)).Post("/payouts", s.createPayout)
			r.With(write, s.idempotent(true)).Post("/pix-transfers", s.createPixTransfer)
			r.With(read).Get("/payouts", s.listPayouts)
			r.With(read).Get("/payouts/{payout_id}", s.getPayout)
			r.With(write, s.idempotent(true)).Post("/payouts/{payout_id}/retry", s.retryPayout)

			r.With(write, s.idempotent(true)).Post("/splits", s.createSplit)
			r.With(read).Get("/splits/{split_id}", s.getSplit)

			r.With(s.allow(RoleAdmin), s.idempotent(true)).Post("/fundings", s.createFunding)

			if s.cfg.Charges != nil {
				r.With(write, s.idempotent(true)).Post("/charges", s.createCharge)
				r.With(read).Get("/charges", s.listCharges)
				r.With(read).Get("/charges/{charge_id}", s.getCharge)
				r.With(write, s.idempotent(true)).Post("/charges/{charge_id}/refunds", s.createRefund)
			}

			r.With(write, s.idempotent(false)).Post("/notification-endpoints", s.createNotificationEndpoint)
			r.With(read).Get("/notification-endpoints", s.listNotificationEndpoints)
			r.With(write, s.idempotent(false)).Post("/notification-endpoints/{endpoint_id}/disable", s.disableNotificationEndpoint)
		})

		r.Route("/ledger", func(r chi.Router) {
			r.Use(s.allow(RoleAuditor, RoleAdmin))
			// Every ledger read may come from the replica. On the routes, not
			// with Use: a path none matches is a 404 the replica is not
			// asked for (it counted as a replica failure).
			rr := r.With(s.reads.Route)
			rr.Get("/transactions", s.listTransactions)
			rr.Get("/transactions/{transaction_id}", s.getTransaction)
			rr.Get("/postings", s.listPostings)
			rr.Get("/balance", s.balanceAt)
			rr.Get("/export.csv", s.exportCSV)
			rr.Get("/seal", s.ledgerSeal)
		})

		ops := s.allow(RoleOperator, RoleAuditor, RoleAdmin)
		r.With(ops).Get("/attempts/{attempt_id}", s.getAttempt)
		r.With(ops).Get("/review-queue", s.reviewQueue)
		r.With(s.allow(RoleOperator), s.idempotent(true)).Post("/attempts/{attempt_id}/resolution", s.resolveAttempt)
		r.With(s.allow(RoleOperator), s.idempotent(true)).Post("/attempts/{attempt_id}/divergence-settlement", s.settleDivergence)

		// Reconciliation divergences (handlers_reconcile.go; issue 16, R19).
		r.With(ops).Get("/reconcile/divergences", s.listDivergences)
		r.With(ops).Get("/reconcile/divergences.csv", s.exportDivergencesCSV)
		r.With(ops).Get("/reconcile/divergences/{divergence_id}", s.getDivergence)
		r.With(s.allow(RoleOperator), s.idempotent(false)).Post("/reconcile/divergences/{divergence_id}/resolution", s.resolveDivergence)
		r.With(ops).Get("/reconcile/runs", s.listRuns)
		r.With(ops).Get("/reconcile/runs/{run_id}", s.getRun)
	})
	return r
}

// db is the pool a handler reads: the replica when its route has
// s.reads.Route and the replica was chosen, else the primary.
func (s *Server) db(r *http.Request) *pgxpool.Pool { return replica.DB(r.Context(), s.pool) }

func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.ErrorContext(r.Context(), "api: panic", "method", r.Method, "path", r.URL.Path, "panic", v)
				s.problem(w, r, errors.New("panic"))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// accessLog logs one line per request: method, route, status, duration and
// the key id (never the key, never bodies).
func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		ctx := context.WithValue(r.Context(), principalSlot{}, new(Principal))
		next.ServeHTTP(sw, r.WithContext(ctx))
		p := ctx.Value(principalSlot{}).(*Principal)
		level := slog.LevelInfo
		if sw.status >= 500 {
			level = slog.LevelError
		}
		s.log.Log(r.Context(), level, "api: request", "method", r.Method, "path", r.URL.Path, "status", sw.status,
			"duration", time.Since(start), "key_id", p.KeyID, "idempotency_key_set", r.Header.Get(IdempotencyHeader) != "")
	})
}

// guard runs before routing, for every request:
//
//   - a query string that does not parse (a ';', a bad %-escape) is 400:
//     Go would drop the parameter and the filter it carried would fail open;
//   - the path and every query key and value must be UTF-8 without NUL
//     (PostgreSQL refuses both, which would be a 500);
//   - under /v1 (webhooks aside) a query parameter given twice or with an
//     empty value is refused, naming it (a filter read as its first value
//     or as no filter at all would fail open);
//   - a valid Idempotency-Key is echoed on every answer, the refusals of
//     authentication, role and scope checks included;
//   - /v1 answers are Cache-Control: no-store (they carry balances, and new
//     keys and notification secrets).
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k := r.Header.Get(IdempotencyHeader); k != "" && len(k) <= 255 && printableASCII(k) {
			w.Header().Set(IdempotencyHeader, k)
		}
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			w.Header().Set("Cache-Control", "no-store")
		}
		if !pgtext.Valid(r.URL.Path) {
			s.problem(w, r, badRequest("the path must be UTF-8 without NUL characters"))
			return
		}
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			s.problem(w, r, errInvalidQuery)
			return
		}
		// A filter given twice or empty would otherwise be read as its
		// first value or as no filter at all: a listing that fails open.
		strict := strings.HasPrefix(r.URL.Path, "/v1/") && !strings.HasPrefix(r.URL.Path, "/v1/webhooks/")
		for k, vs := range q {
			if !pgtext.Valid(k) {
				s.problem(w, r, badRequest("query parameter names must be UTF-8 without NUL characters"))
				return
			}
			for _, v := range vs {
				if !pgtext.Valid(v) {
					s.problem(w, r, invalidField(k, k+" must be UTF-8 without NUL characters"))
					return
				}
			}
			switch {
			case strict && len(vs) > 1:
				s.problem(w, r, invalidField(k, k+" is given more than once: give it once"))
				return
			case strict && vs[0] == "":
				s.problem(w, r, invalidField(k, k+" is empty: give it a value or leave it out"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Flush lets streaming handlers (CSV export) flush.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	var one int
	if err := s.pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
		s.log.WarnContext(r.Context(), "api: readyz: database unreachable", "error", err)
		s.problem(w, r, &apiError{status: http.StatusServiceUnavailable, code: "database_unavailable",
			title: "Database unavailable", detail: "the database did not answer"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
