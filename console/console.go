// Package console is saldo's web console (issue 18): server-rendered pages
// under /console for operators (the review queue, an attempt's timeline and
// its manual resolution), auditors (the ledger explorer, audit
// verification), admins, and merchants (their own balances and movements).
//
// Pages are html/template with embedded templates and CSS: no front-end
// build step and no JavaScript at all (every page works with scripts off,
// and the Content-Security-Policy forbids inline scripts anyway).
//
// The console reads and writes through the same service calls the API uses
// (attempts.Service.ReviewQueue/Get/Events/ResolveManually, payouts.Get,
// charges.Get, ledger.ListPostings/ListTransactions/BalanceAt,
// ledger.MerchantBalances, audit.Run); it never re-implements a business
// rule. Roles are the API's (package api): a page or form is open to the
// roles the equivalent API route allows, see the table in docs/console.md.
//
// # Sessions
//
// A user signs in by pasting an API key; the console exchanges it for a
// session cookie (HttpOnly, SameSite=Strict, Secure unless Config.Insecure,
// Max-Age = SessionTTL). Sessions are stored server-side in PostgreSQL
// (table console_sessions, migrations/00070_console.sql) rather than as an
// HMAC-signed cookie: signing out, revoking the API key or deleting the row
// ends a session at once on every saldo process, no signing secret has to be
// configured and shared by a fleet, and every request re-reads the key's
// role and revocation. The cookie holds a random 256-bit token; only its
// sha256 is stored.
//
// # CSRF
//
// Every form carries a CSRF token: the session's own random token (stored
// with the session), compared in constant time; before sign-in, a
// double-submit token in a separate SameSite=Strict cookie. A POST without
// the right token is 403 and does nothing. SameSite=Strict and an Origin
// check (when the browser sends one) are further layers, not the defence.
package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
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
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Clock tells the time (tests move it).
type Clock interface{ Now() time.Time }

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Config configures the console. Pool, Attempts and Payouts are required.
type Config struct {
	Pool     *pgxpool.Pool
	Attempts *attempts.Service
	Payouts  *payouts.Service
	// Charges, optional, adds the charge pages.
	Charges *charges.Service
	// Clock defaults to the wall clock. Sessions, ages and "now" read it.
	Clock  Clock
	Logger *slog.Logger
	// Insecure drops the Secure attribute of cookies, for saldo dev and
	// tests over plain http on loopback. Never in production.
	Insecure bool
	// SessionTTL is how long a session lasts after sign-in (default 8h).
	SessionTTL time.Duration
	// UnknownAfter: an unknown attempt older than this is listed in the
	// review queue even when it is not flagged (default 15m).
	UnknownAfter time.Duration
	// QueuePageSize is how many flagged and how many old unknown attempts
	// a page of the review queue lists (default 100).
	QueuePageSize int
	// Reads, optional, serves the books pages (merchants, a merchant's
	// balances and movements, ledger accounts, an account's entries, a
	// transaction, their CSVs) and the charts from a streaming replica while
	// it is fresh enough, with the Saldo-Replica-Lag header (package
	// internal/replica). Sessions, the review queue, attempts, payouts,
	// charges, reconciliation and every form read the primary.
	Reads *replica.Reads
}

// Prefix is where the console is mounted.
const Prefix = "/console"

// Console is the console's http.Handler (serve it at Prefix and Prefix+"/").
type Console struct {
	cfg   Config
	pool  *pgxpool.Pool
	att   *attempts.Service
	pay   *payouts.Service
	ch    *charges.Service
	clock Clock
	log   *slog.Logger
	pages map[string]*template.Template
	mux   *http.ServeMux
}

// New builds the console.
func New(cfg Config) (*Console, error) {
	if cfg.Pool == nil || cfg.Attempts == nil || cfg.Payouts == nil {
		return nil, errors.New("console: Config.Pool, Config.Attempts and Config.Payouts are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = wallClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 8 * time.Hour
	}
	if cfg.UnknownAfter <= 0 {
		cfg.UnknownAfter = 15 * time.Minute
	}
	if cfg.QueuePageSize <= 0 || cfg.QueuePageSize > 500 {
		cfg.QueuePageSize = 100
	}
	c := &Console{cfg: cfg, pool: cfg.Pool, att: cfg.Attempts, pay: cfg.Payouts, ch: cfg.Charges,
		clock: cfg.Clock, log: cfg.Logger}
	if err := c.parseTemplates(); err != nil {
		return nil, err
	}
	c.routes()
	return c, nil
}

// ServeHTTP serves /console/...
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Mounted inside another chi router (saldo serve), a chi route context
	// is in r; the console routes with its own ServeMux and ignores it.
	if r.Context().Value(chi.RouteCtxKey) != nil {
		r = r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, nil))
	}
	securityHeaders(w)
	if !strings.HasPrefix(r.URL.Path, Prefix+"/static/") {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		slot := new(string)
		r = r.WithContext(context.WithValue(r.Context(), keySlot{}, slot))
		w = sw
		defer func() {
			c.log.InfoContext(r.Context(), "console: request", "method", r.Method, "path", r.URL.Path, "status", sw.status,
				"duration", time.Since(start), "key_id", *slot)
		}()
	}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			c.log.ErrorContext(r.Context(), "console: panic", "path", r.URL.Path, "panic", v)
			http.Error(w, "internal error", http.StatusInternalServerError)
		}
	}()
	if !cleanRequest(r) {
		c.renderError(w, r, nil, http.StatusBadRequest,
			"The address must be UTF-8 without NUL characters, with a query string that parses.")
		return
	}
	c.mux.ServeHTTP(w, r)
}

// cleanRequest: the path and the query's names and values are UTF-8
// without NUL (PostgreSQL text refuses NUL, which would be a 500), and the
// query parses.
func cleanRequest(r *http.Request) bool {
	if !pgtext.Valid(r.URL.Path) {
		return false
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	return err == nil && cleanValues(q)
}

// cleanValues: every name and value of a query or form is clean text.
func cleanValues(vs url.Values) bool {
	for k, v := range vs {
		if !pgtext.Valid(k) {
			return false
		}
		for _, x := range v {
			if !pgtext.Valid(x) {
				return false
			}
		}
	}
	return true
}

// CSP is the Content-Security-Policy of every console answer: nothing but
// the console's own stylesheet; no script at all, no inline style, no
// framing, forms only to the console itself.
const CSP = "default-src 'self'; script-src 'none'; style-src 'self'; img-src 'self' data:; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"

func securityHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin") // "no-referrer" would make browsers send Origin: null on the console's own forms
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}

func (c *Console) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	fileServer := http.StripPrefix(Prefix+"/static/", http.FileServerFS(static))
	m.Handle("GET "+Prefix+"/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") { // no directory listings
			http.NotFound(w, r)
			return
		}
		fileServer.ServeHTTP(w, r)
	}))

	m.HandleFunc("GET "+Prefix, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
	})
	m.HandleFunc("GET "+Prefix+"/login", c.loginPage)
	m.HandleFunc("POST "+Prefix+"/login", c.login)
	m.HandleFunc("GET "+Prefix+"/login/link", c.linkPage)
	m.HandleFunc("POST "+Prefix+"/login/link", c.linkLogin)
	m.Handle("POST "+Prefix+"/logout", c.session(c.logout))

	all := []Role{RoleMerchant, RoleAuditor, RoleOperator, RoleAdmin}
	ops := []Role{RoleOperator, RoleAuditor, RoleAdmin}
	books := []Role{RoleAuditor, RoleAdmin}
	merchantRead := []Role{RoleMerchant, RoleAuditor, RoleAdmin}
	// stale: a page that may come from the read replica (its handler reads
	// through c.db).
	stale := c.cfg.Reads.Route

	m.Handle("GET "+Prefix+"/{$}", c.page(all, c.home))
	m.Handle("GET "+Prefix+"/review", c.page(ops, c.reviewQueue))
	m.Handle("GET "+Prefix+"/attempts/{id}", c.page(ops, c.attemptPage))
	m.Handle("POST "+Prefix+"/attempts/{id}/resolve", c.form([]Role{RoleOperator}, c.resolve))
	m.Handle("POST "+Prefix+"/attempts/{id}/settle-divergence", c.form([]Role{RoleOperator}, c.settleDivergence))

	m.Handle("GET "+Prefix+"/merchants", stale(c.page(books, c.merchantsPage)))
	m.Handle("GET "+Prefix+"/merchants/{mid}", stale(c.merchantPage(merchantRead, c.merchantView)))
	m.Handle("GET "+Prefix+"/merchants/{mid}/payouts/{id}", c.merchantPage(merchantRead, c.payoutPage))
	m.Handle("GET "+Prefix+"/merchants/{mid}/splits/{id}", c.merchantPage(merchantRead, c.splitPage))
	m.Handle("GET "+Prefix+"/merchants/{mid}/charges/{id}", c.merchantPage(merchantRead, c.chargePage))

	m.Handle("GET "+Prefix+"/ledger", stale(c.page(books, c.accountsPage)))
	m.Handle("GET "+Prefix+"/ledger/account", stale(c.page(books, c.accountPage)))
	m.Handle("GET "+Prefix+"/ledger/account.csv", stale(c.page(books, c.accountCSV)))
	m.Handle("GET "+Prefix+"/ledger/transactions/{id}", stale(c.page(books, c.transactionPage)))
	m.Handle("GET "+Prefix+"/ledger/transactions/{id}/csv", stale(c.page(books, c.transactionCSV)))
	m.Handle("GET "+Prefix+"/audit", c.page(books, c.auditPage))
	m.Handle("POST "+Prefix+"/audit/run", c.form(books, c.runAudit))
	m.Handle("GET "+Prefix+"/charts", stale(c.page(ops, c.chartsPage)))
	m.Handle("GET "+Prefix+"/providers", c.page(ops, c.providersPage))
	m.Handle("GET "+Prefix+"/reconcile", c.page(ops, c.reconcilePage))
	m.Handle("GET "+Prefix+"/reconcile/divergences/{id}", c.page(ops, c.divergencePage))
	m.Handle("POST "+Prefix+"/reconcile/divergences/{id}/resolve", c.form([]Role{RoleOperator}, c.resolveDivergence))

	m.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		c.renderError(w, r, nil, http.StatusNotFound, "No such page.")
	})
	c.mux = m
}

// ---- helpers ----

// db is the pool a page reads: the replica when its route is stale and the
// replica was chosen, else the primary.
func (c *Console) db(ctx context.Context) *pgxpool.Pool { return replica.DB(ctx, c.pool) }

func randomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func sha(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

func (c *Console) internal(w http.ResponseWriter, r *http.Request, s *Session, err error) {
	c.log.ErrorContext(r.Context(), "console: internal error", "path", r.URL.Path, "error", err)
	c.renderError(w, r, s, http.StatusInternalServerError, "Something went wrong; the error is in saldo's log.")
}

func limitText(s string, n int) string {
	s = strings.TrimSpace(s)
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}

func fmtDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// keySlot carries a *string the access log reads after the request: the
// key id of the session, once loaded (never the session token).
type keySlot struct{}

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

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
