package reconcile

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/pgtext"
	"github.com/saldo/saldo/internal/sqlcols"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers"
)

// Kind is a kind of divergence.
type Kind string

// The kinds (see the package documentation).
const (
	KindResolved          Kind = "resolved_by_reconciliation"
	KindPaidButFailed     Kind = "paid_but_failed"
	KindUnknownToUs       Kind = "unknown_to_us"
	KindDoublePayment     Kind = "double_payment"
	KindMissingAtProvider Kind = "missing_at_provider"
	KindAmountMismatch    Kind = "amount_mismatch"
	KindLedgerTotals      Kind = "ledger_totals"
	KindStaleOpen         Kind = "stale_open"
	// KindUnreadableLine: a statement line saldo cannot read (text
	// PostgreSQL cannot store, or a currency saldo does not know). It is
	// reported on its own, matched to no attempt and counted in no total;
	// the other lines of the day are reconciled.
	KindUnreadableLine Kind = "unreadable_line"
)

// Kinds lists every kind, in the order reports show them.
var Kinds = []Kind{KindPaidButFailed, KindUnknownToUs, KindDoublePayment, KindUnreadableLine, KindMissingAtProvider,
	KindAmountMismatch, KindLedgerTotals, KindStaleOpen, KindResolved}

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool {
	_, ok := severities[k]
	return ok
}

// Severity of a divergence. Critical is the highest: money moved that the
// ledger says did not, or moved twice.
type Severity string

// Severities.
const (
	SeverityCritical Severity = "critical"
	SeverityHigh     Severity = "high"
	SeverityMedium   Severity = "medium"
	SeverityInfo     Severity = "info"
)

var severities = map[Kind]Severity{
	KindResolved: SeverityInfo, KindPaidButFailed: SeverityCritical, KindUnknownToUs: SeverityCritical,
	KindDoublePayment: SeverityCritical, KindMissingAtProvider: SeverityHigh, KindAmountMismatch: SeverityHigh,
	KindLedgerTotals: SeverityHigh, KindStaleOpen: SeverityMedium, KindUnreadableLine: SeverityCritical,
}

// Severity of k.
func (k Kind) Severity() Severity { return severities[k] }

// Errors.
var (
	// ErrUnknownProvider: no provider of that name is configured.
	ErrUnknownProvider = errors.New("reconcile: unknown provider")
	// ErrNoStatements: the provider does not publish statements.
	ErrNoStatements = errors.New("reconcile: provider has no statements")
	// ErrDayNotClosed: the day has not ended (plus the settle margin).
	ErrDayNotClosed = errors.New("reconcile: the day has not closed yet")
	// ErrNotFound: no divergence or run with that id.
	ErrNotFound = errors.New("reconcile: not found")
	// ErrInvalid: bad input (filter, cursor, reason).
	ErrInvalid = errors.New("reconcile: invalid input")
)

// Config configures a Service.
type Config struct {
	Pool     *pgxpool.Pool
	Attempts *attempts.Service
	// Providers whose statements are reconciled, by name.
	Providers map[string]providers.Provider
	Clock     attempts.Clock
	Logger    *slog.Logger
	// SettleMargin: a day is reconciled this long after it ended (UTC),
	// so late statement lines are in. Default 2h.
	SettleMargin time.Duration
	// StaleAfter: an attempt unknown, or open and in review, longer than
	// this is reported (stale_open). Default 24h.
	StaleAfter time.Duration
	// OnAlert, optional, is called after a run stored a new critical
	// divergence.
	OnAlert func(Divergence)
	// Queue of the daily job; default River's default queue.
	Queue string
	// JobTimeout bounds one run made by the job. Default 30 minutes.
	JobTimeout time.Duration
}

// Service reconciles statements.
type Service struct {
	cfg   Config
	pool  *pgxpool.Pool
	att   *attempts.Service
	clock attempts.Clock
	log   *slog.Logger
}

// New builds a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Pool == nil || cfg.Attempts == nil {
		return nil, errors.New("reconcile: Config.Pool and Config.Attempts are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = attempts.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SettleMargin <= 0 {
		cfg.SettleMargin = 2 * time.Hour
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 24 * time.Hour
	}
	if cfg.JobTimeout <= 0 {
		cfg.JobTimeout = 30 * time.Minute
	}
	if cfg.Providers == nil {
		cfg.Providers = map[string]providers.Provider{}
	}
	return &Service{cfg: cfg, pool: cfg.Pool, att: cfg.Attempts, clock: cfg.Clock, log: cfg.Logger}, nil
}

// Providers lists the names of the configured providers that publish
// statements, sorted.
func (s *Service) Providers() []string {
	var out []string
	for n, p := range s.cfg.Providers {
		if p.Capabilities().Statements {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// RunOptions tunes one run.
type RunOptions struct {
	// TriggeredBy is stored on the run: job, cli, test, an operator id.
	TriggeredBy string
	// Progress, optional, is called as statement lines are processed.
	Progress func(done, total int)
}

// Totals is the ledger side of one currency and direction of a day.
type Totals struct {
	Currency  string `json:"currency"`
	Direction string `json:"direction"` // out (settled) or in (credited)
	Statement string `json:"statement"`
	Ledger    string `json:"ledger"`
	Lines     int    `json:"lines"`
}

// Run is one persisted reconciliation run.
type Run struct {
	ID             string
	Provider       string
	Day            time.Time
	Status         string // running, succeeded, failed
	TriggeredBy    string
	StartedAt      time.Time
	FinishedAt     *time.Time
	StatementLines int
	Matched        int
	Resolved       int
	Divergences    int
	NewDivergences int
	Deferred       int
	Totals         []Totals
	Error          string
	// ByKind counts the divergences this run saw, by kind.
	ByKind map[Kind]int
}

// Day is the UTC calendar day containing t, at 00:00 UTC.
func Day(t time.Time) time.Time {
	u := t.UTC()
	return time.Date(u.Year(), u.Month(), u.Day(), 0, 0, 0, 0, time.UTC)
}

func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// line is one statement line with its amount parsed.
type line struct {
	providers.StatementEntry
	amount decimal.Decimal
	ok     bool // amount parsed
	// anon identifies a line without a provider id: its statement's day, a
	// hash of its fields and its occurrence among identical lines of that
	// day (set by statement).
	anon string
}

func (l line) moved() bool { return l.State == providers.StateSucceeded }

// version is what a line says about its operation: operation, amount,
// currency and state. Lines of one provider operation (one provider id)
// with one version are one operation listed twice (a page repeated); with
// more, the statement contradicts itself (conflicts).
func (l line) version() string {
	amount := l.Amount
	if l.ok {
		amount = l.amount.String()
	}
	return strings.Join([]string{string(l.Operation), amount, strings.ToUpper(l.Currency), string(l.State)}, "\x00")
}

// opKey names the provider operation of the line: "id:" and its provider
// id, or, for a line without one, "line:" and its day, hash and occurrence,
// so two anonymous lines are never taken for one operation.
func (l line) opKey() string {
	if l.ProviderID != "" {
		return "id:" + l.ProviderID
	}
	return "line:" + l.anon
}

// opFingerprint is the fingerprint of a divergence about one provider
// operation that moved money (unknown_to_us, paid_but_failed, a
// double_payment's extra operation): "ref:<reference>|id:<provider id>",
// or the operation's key alone for a line without a reference. The
// operation is part of it, so a second operation under a reference whose
// first divergence was resolved is a new divergence, not a seen_count bump
// of the resolved one (R19).
//
// Until 2026-12 these fingerprints were "ref:<reference>" (or "id:<id>",
// which lines without a reference still get). Rows stored under the old
// form stay as they are: a re-run of a day reconciled before the change
// stores the same divergence again under the new form (a second row, open,
// alerting once more if critical). We chose that over rewriting or
// matching old rows: it can only show a known divergence twice, never hide
// one, and it needs neither a data migration nor a guess at which old row
// a multi-operation finding was. The same holds for a fingerprint longer
// than the column (store keeps sha256:<hex> of it, since 2026-12; before,
// its first 500 bytes) and for a double payment met while its attempt was
// open (before 2026-12 one "ref:<reference>|<op>,<op>" row).
func opFingerprint(ref string, l line) string {
	if ref == "" {
		return l.opKey()
	}
	return "ref:" + ref + "|" + l.opKey()
}

func (l line) side() map[string]any {
	return map[string]any{"operation": l.Operation, "reference": l.Reference, "provider_id": l.ProviderID,
		"state": l.State, "amount": l.Amount, "currency": l.Currency, "at": l.At.UTC().Format(time.RFC3339Nano)}
}

func linesSide(ls []line) map[string]any {
	out := make([]map[string]any, 0, len(ls))
	for _, l := range ls {
		out = append(out, l.side())
	}
	return map[string]any{"lines": out}
}

// ours is what saldo says about one attempt.
type ours struct {
	ID          uuid.UUID
	Kind        attempts.Kind
	Direction   string
	SubjectID   string
	Provider    string
	Operation   string
	Reference   string
	Status      attempts.Status
	ProviderID  string
	Review      bool
	Diverged    bool
	ResolvedAt  *time.Time
	ResolvedBy  string
	UnknownAt   *time.Time
	ReviewAt    *time.Time
	CreatedAt   time.Time
	Amount      decimal.Decimal
	HasAmount   bool
	Currency    string
	AmountText  string
	SubjectDesc string
}

func (o ours) side() map[string]any {
	m := map[string]any{"attempt_id": o.ID.String(), "kind": o.Kind, "subject_id": o.SubjectID,
		"provider": o.Provider, "operation": o.Operation, "reference": o.Reference, "status": o.Status,
		"provider_id": o.ProviderID, "review": o.Review, "created_at": o.CreatedAt.UTC().Format(time.RFC3339Nano)}
	if o.HasAmount {
		m["amount"], m["currency"] = o.Amount.String(), o.Currency
	}
	if o.ResolvedAt != nil {
		m["resolved_at"], m["resolved_by"] = o.ResolvedAt.UTC().Format(time.RFC3339Nano), o.ResolvedBy
	}
	return m
}

const oursColumns = `a.id, a.kind, a.direction, a.subject_id, a.provider, a.operation, a.reference, a.status,
	coalesce(a.provider_id, ''), a.review, a.diverged_at IS NOT NULL, a.resolved_at, coalesce(a.resolved_by, ''),
	a.unknown_at, a.review_at, a.created_at, coalesce(p.amount, c.amount)::text, coalesce(p.currency, c.currency, '')`

// oursFrom joins an attempt to the amount of its payout or charge (the
// tables' own, read-only).
const oursFrom = ` FROM attempts a
	LEFT JOIN payouts p ON a.direction = 'out' AND p.id = a.subject_id
	LEFT JOIN charges c ON a.direction = 'in' AND c.id = a.subject_id `

func scanOurs(rows pgx.Rows) (ours, error) {
	var o ours
	var amount *string
	err := rows.Scan(&o.ID, &o.Kind, &o.Direction, &o.SubjectID, &o.Provider, &o.Operation, &o.Reference, &o.Status,
		&o.ProviderID, &o.Review, &o.Diverged, &o.ResolvedAt, &o.ResolvedBy, &o.UnknownAt, &o.ReviewAt, &o.CreatedAt,
		&amount, &o.Currency)
	if err != nil {
		return o, err
	}
	if amount != nil {
		if d, err := decimal.NewFromString(*amount); err == nil {
			o.Amount, o.HasAmount = d, true
		}
	}
	return o, nil
}

func (s *Service) queryOurs(ctx context.Context, where string, args ...any) ([]ours, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+oursColumns+oursFrom+where, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ours
	for rows.Next() {
		o, err := scanOurs(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

const chunk = 1000

// byReference loads the attempts of provider with these references. Only
// provider's: a line of one provider under the reference of another's
// attempt is money that no attempt of that provider knows (unknown_to_us),
// never a confirmation of the other provider's attempt.
func (s *Service) byReference(ctx context.Context, provider string, refs []string) (map[string]ours, error) {
	return s.refQuery(ctx, `WHERE a.provider = $1 AND a.reference = ANY ($2)`, provider, refs)
}

// ofOtherProviders loads the attempts of providers other than provider with
// these references, to name them in an unknown_to_us divergence.
func (s *Service) ofOtherProviders(ctx context.Context, provider string, refs []string) (map[string]ours, error) {
	return s.refQuery(ctx, `WHERE a.provider <> $1 AND a.reference = ANY ($2)`, provider, refs)
}

func (s *Service) refQuery(ctx context.Context, where, provider string, refs []string) (map[string]ours, error) {
	out := map[string]ours{}
	for i := 0; i < len(refs); i += chunk {
		list, err := s.queryOurs(ctx, where, provider, refs[i:min(i+chunk, len(refs))])
		if err != nil {
			return nil, err
		}
		for _, o := range list {
			out[o.Reference] = o
		}
	}
	return out, nil
}

// byProviderID loads the attempts of provider with these provider ids.
func (s *Service) byProviderID(ctx context.Context, provider string, ids []string) (map[string]ours, error) {
	out := map[string]ours{}
	for i := 0; i < len(ids); i += chunk {
		list, err := s.queryOurs(ctx, `WHERE a.provider = $1 AND a.provider_id = ANY ($2)`, provider, ids[i:min(i+chunk, len(ids))])
		if err != nil {
			return nil, err
		}
		for _, o := range list {
			out[o.ProviderID] = o
		}
	}
	return out, nil
}

// finding is one divergence a run saw, before it is stored.
type finding struct {
	kind        Kind
	day         time.Time
	fingerprint string
	reference   string
	providerID  string
	attempt     *ours
	currency    string
	detail      string
	provider    any
	our         any
	// resolvedReason: stored already resolved by reconciliation.
	resolvedReason string
}

// runState is what one run accumulates.
type runState struct {
	run        Run
	prov       providers.Provider
	statements map[time.Time][]line
	// unreadable: the lines of each statement fetched that saldo cannot
	// read (see unreadable), kept out of statements.
	unreadable map[time.Time][]refused
	// conflicted: the operations (line.opKey) the day's statement lists
	// more than once with different versions (conflicts).
	conflicted map[string]bool
}

// refused is a statement line saldo cannot read, and why.
type refused struct {
	providers.StatementEntry
	why string
	// key identifies it among the statement's lines (see statement).
	key string
}

// Run reconciles provider's statement of the UTC day containing day. The
// day must have ended at least SettleMargin ago. The run is persisted; a
// failure (statement unavailable, database) is stored on it and returned.
func (s *Service) Run(ctx context.Context, provider string, day time.Time, opts RunOptions) (Run, error) {
	prov, ok := s.cfg.Providers[provider]
	if !ok {
		if p, found := s.att.Provider(provider); found {
			prov, ok = p, true
		}
	}
	if !ok {
		return Run{}, fmt.Errorf("%w: %q", ErrUnknownProvider, provider)
	}
	if !prov.Capabilities().Statements {
		return Run{}, fmt.Errorf("%w: %s", ErrNoStatements, provider)
	}
	d := Day(day)
	now := s.clock.Now()
	if closes := d.Add(24 * time.Hour).Add(s.cfg.SettleMargin); now.Before(closes) {
		return Run{}, fmt.Errorf("%w: %s of %s can be reconciled from %s (settle margin %s)", ErrDayNotClosed,
			d.Format(time.DateOnly), provider, closes.Format(time.RFC3339), s.cfg.SettleMargin)
	}
	if opts.TriggeredBy == "" {
		opts.TriggeredBy = "unknown"
	}
	st := &runState{prov: prov, statements: map[time.Time][]line{}, unreadable: map[time.Time][]refused{},
		conflicted: map[string]bool{},
		run: Run{ID: newID("rr_"), Provider: provider, Day: d, Status: "running", TriggeredBy: opts.TriggeredBy,
			StartedAt: now, ByKind: map[Kind]int{}}}
	if _, err := s.pool.Exec(ctx, `INSERT INTO reconcile_runs (id, provider, day, status, triggered_by, started_at)
		VALUES ($1, $2, $3, 'running', $4, $5)`, st.run.ID, provider, d, storedText(opts.TriggeredBy, 200), now); err != nil {
		return st.run, fmt.Errorf("reconcile: record run: %w", err)
	}
	s.log.InfoContext(ctx, "reconcile: run started", "run_id", st.run.ID, "provider", provider, "day", d.Format(time.DateOnly))
	err := s.run(ctx, st, opts)
	fctx := context.WithoutCancel(ctx)
	fin := s.clock.Now()
	st.run.FinishedAt = &fin
	st.run.Status = "succeeded"
	errText := ""
	if err != nil {
		st.run.Status, errText = "failed", storedText(err.Error(), 2000)
		st.run.Error = errText
	}
	totals, _ := json.Marshal(st.run.Totals)
	if st.run.Totals == nil {
		totals = []byte("[]")
	}
	if _, ferr := s.pool.Exec(fctx, `UPDATE reconcile_runs SET status = $2, finished_at = $3, statement_lines = $4,
		matched = $5, resolved = $6, divergences = $7, new_divergences = $8, deferred = $9, totals = $10, error = $11
		WHERE id = $1`, st.run.ID, st.run.Status, fin, st.run.StatementLines, st.run.Matched, st.run.Resolved,
		st.run.Divergences, st.run.NewDivergences, st.run.Deferred, totals, sqlcols.Nullable(errText)); ferr != nil {
		err = errors.Join(err, fmt.Errorf("reconcile: finish run: %w", ferr))
	}
	if err != nil {
		s.log.ErrorContext(ctx, "reconcile: run failed", "run_id", st.run.ID, "provider", provider,
			"day", d.Format(time.DateOnly), "error", err)
		return st.run, err
	}
	s.log.InfoContext(ctx, "reconcile: run finished", "run_id", st.run.ID, "provider", provider,
		"day", d.Format(time.DateOnly), "lines", st.run.StatementLines, "matched", st.run.Matched,
		"resolved", st.run.Resolved, "divergences", st.run.Divergences, "new", st.run.NewDivergences,
		"deferred", st.run.Deferred)
	return st.run, nil
}

// statement fetches (once per run) the statement of day d.
func (s *Service) statement(ctx context.Context, st *runState, d time.Time) ([]line, error) {
	if ls, ok := st.statements[d]; ok {
		return ls, nil
	}
	entries, err := st.prov.Statement(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("reconcile: statement of %s for %s: %w", st.run.Provider, d.Format(time.DateOnly), err)
	}
	ls := make([]line, 0, len(entries))
	seen := map[string]int{}
	for _, e := range entries {
		if why := unreadable(e); why != "" {
			// Kept out of the matching and the totals, never dropped: the
			// run of its day reports it (unreadable_line). Its text reaches
			// no query as a parameter: PostgreSQL would refuse it and fail
			// the whole run, every retry (R19).
			h := sha256.Sum256([]byte(strings.Join([]string{string(e.Operation), e.Reference, e.ProviderID,
				string(e.State), e.Amount, e.Currency, e.At.UTC().Format(time.RFC3339Nano)}, "\x00")))
			k := "unreadable:" + hex.EncodeToString(h[:16])
			if e.ProviderID == "" {
				k = "unreadable:" + d.Format(time.DateOnly) + ":" + hex.EncodeToString(h[:16])
			}
			seen[k]++
			st.unreadable[d] = append(st.unreadable[d], refused{StatementEntry: e, why: why, key: fmt.Sprintf("%s#%d", k, seen[k])})
			continue
		}
		l := line{StatementEntry: e}
		if a, err := decimal.NewFromString(e.Amount); err == nil {
			l.amount, l.ok = a, true
		}
		if e.ProviderID == "" {
			h := sha256.Sum256([]byte(strings.Join([]string{string(e.Operation), e.Reference, string(e.State), e.Amount,
				e.Currency, e.At.UTC().Format(time.RFC3339Nano)}, "\x00")))
			k := d.Format(time.DateOnly) + ":" + hex.EncodeToString(h[:12])
			seen[k]++
			l.anon = fmt.Sprintf("%s#%d", k, seen[k])
		}
		ls = append(ls, l)
	}
	st.statements[d] = ls
	return ls, nil
}

// unreadable says why saldo cannot take e as a statement line, "" when it
// can: a text field PostgreSQL cannot store (NUL, invalid UTF-8; the
// statement is the provider's text, like a webhook's, R17), a currency
// that is not an ISO currency saldo knows (it would be stored as one, and
// reach the divergences export), or a state other than succeeded,
// processing and failed (every adapter maps its provider's statuses to
// those; another may say money moved, and must not pass as "nothing
// moved").
func unreadable(e providers.StatementEntry) string {
	for _, f := range []struct{ name, v string }{{"operation", string(e.Operation)}, {"reference", e.Reference},
		{"provider id", e.ProviderID}, {"state", string(e.State)}, {"amount", e.Amount}, {"currency", e.Currency}} {
		if !pgtext.Valid(f.v) {
			return "its " + f.name + " holds NUL or invalid UTF-8"
		}
	}
	if _, err := money.LookupCurrency(strings.ToUpper(e.Currency)); err != nil {
		return "its currency is not one saldo knows"
	}
	switch e.State {
	case providers.StateSucceeded, providers.StateProcessing, providers.StateFailed:
	default:
		return "its state is not one saldo knows"
	}
	return ""
}

// unreadableFinding reports r, a line of the run's day that saldo cannot
// read. Every text of the line is quoted (Go syntax: NUL as \x00, a byte
// of invalid UTF-8 as \xff), so the row names it whatever it holds; the
// reference and provider id columns hold them only when they are text.
func unreadableFinding(st *runState, r refused) finding {
	q := func(v string) string { return pgtext.Truncate(strconv.Quote(v), 300) }
	f := finding{kind: KindUnreadableLine, day: st.run.Day, fingerprint: r.key,
		detail: fmt.Sprintf("the %s statement of %s lists a line saldo cannot read (%s): operation %s, reference %s, "+
			"provider id %s, state %s, amount %s, currency %s, at %s. It is matched to no attempt and counted in no "+
			"total: ask the provider what it is; if it moved money, settle it by hand", st.run.Provider,
			st.run.Day.Format(time.DateOnly), r.why, q(string(r.Operation)), q(r.Reference), q(r.ProviderID),
			q(string(r.State)), q(r.Amount), q(r.Currency), r.At.UTC().Format(time.RFC3339)),
		provider: map[string]any{"unreadable": r.why, "line": map[string]any{"operation": q(string(r.Operation)),
			"reference": q(r.Reference), "provider_id": q(r.ProviderID), "state": q(string(r.State)), "amount": q(r.Amount),
			"currency": q(r.Currency), "at": r.At.UTC().Format(time.RFC3339Nano)}},
		our: map[string]any{}}
	if pgtext.Valid(r.Reference) {
		f.reference = r.Reference
	}
	if pgtext.Valid(r.ProviderID) {
		f.providerID = r.ProviderID
	}
	if c, err := money.LookupCurrency(strings.ToUpper(r.Currency)); err == nil && pgtext.Valid(r.Currency) {
		f.currency = c.Code()
	}
	return f
}

func (s *Service) run(ctx context.Context, st *runState, opts RunOptions) error {
	d := st.run.Day
	lines, err := s.statement(ctx, st, d)
	if err != nil {
		return err
	}
	st.run.StatementLines = len(lines) + len(st.unreadable[d])
	// Findings are stored as soon as they are known (a group's right after
	// its matchGroup), so a failure later in the run keeps what it saw and
	// the resolved_by_reconciliation records of the attempts it resolved.
	stored := map[string]bool{}
	storeAll := func(fs []finding) error {
		for _, f := range fs {
			if k := string(f.kind) + "|" + f.fingerprint; stored[k] {
				continue // seen twice by this run (a line listed failed, and no success on any day)
			} else {
				stored[k] = true
			}
			if err := s.store(ctx, st, f); err != nil {
				return err
			}
		}
		return nil
	}
	progress := func(done int) {
		if opts.Progress != nil {
			opts.Progress(done, len(lines))
		}
	}
	progress(0)
	var bad []finding
	for _, r := range st.unreadable[d] {
		bad = append(bad, unreadableFinding(st, r))
	}
	if err := storeAll(bad); err != nil {
		return err
	}

	// Group the lines: by our reference, else by the provider's operation
	// (its id, or for a line without one the line itself).
	type group struct {
		key   string
		lines []line
	}
	var groups []*group
	byKey := map[string]*group{}
	var refs []string
	for _, l := range lines {
		key := "ref:" + l.Reference
		if l.Reference == "" {
			key = l.opKey()
		}
		g := byKey[key]
		if g == nil {
			g = &group{key: key}
			byKey[key] = g
			groups = append(groups, g)
			if l.Reference != "" {
				refs = append(refs, l.Reference)
			}
		}
		g.lines = append(g.lines, l)
	}
	found, err := s.byReference(ctx, st.run.Provider, refs)
	if err != nil {
		return err
	}
	var foreign []string
	for _, r := range refs {
		if _, ok := found[r]; !ok {
			foreign = append(foreign, r)
		}
	}
	others, err := s.ofOtherProviders(ctx, st.run.Provider, foreign)
	if err != nil {
		return err
	}
	var ids []string
	for _, g := range groups {
		if _, ok := found[g.lines[0].Reference]; ok && g.lines[0].Reference != "" {
			continue
		}
		for _, l := range g.lines {
			if l.ProviderID != "" {
				ids = append(ids, l.ProviderID)
			}
		}
	}
	byID, err := s.byProviderID(ctx, st.run.Provider, ids)
	if err != nil {
		return err
	}
	if err := storeAll(conflicts(st, lines, found, byID)); err != nil {
		return err
	}

	// intents: per (direction, subject), the references whose lines moved money.
	type intent struct {
		refs  map[string]bool
		lines []line
		att   []ours
	}
	intents := map[string]*intent{}
	var ledgerIDs []uuid.UUID
	done := 0
	for _, g := range groups {
		var a *ours
		if o, ok := found[g.lines[0].Reference]; ok && g.lines[0].Reference != "" {
			a = &o
		} else {
			for _, l := range g.lines {
				if o, ok := byID[l.ProviderID]; ok && l.ProviderID != "" {
					a = &o
					break
				}
			}
		}
		var other *ours
		if o, ok := others[g.lines[0].Reference]; ok && a == nil && g.lines[0].Reference != "" {
			other = &o
		}
		fs, resolved, err := s.matchGroup(ctx, st, g.lines, a, other)
		if err != nil {
			return err
		}
		if err := storeAll(fs); err != nil {
			return err
		}
		if resolved {
			st.run.Resolved++
		}
		if a != nil {
			st.run.Matched++
			if ownLines(g.lines, *a) {
				// Its settle or credit answers these lines; a group of
				// another operation's lines only (a second payment under
				// its reference) does not count it again.
				ledgerIDs = append(ledgerIDs, a.ID)
			}
			var moved []line
			for _, l := range g.lines {
				if l.moved() {
					moved = append(moved, l)
				}
			}
			if len(moved) > 0 {
				k := a.Direction + ":" + a.SubjectID
				in := intents[k]
				if in == nil {
					in = &intent{refs: map[string]bool{}}
					intents[k] = in
				}
				if !in.refs[a.Reference] {
					in.att = append(in.att, *a)
				}
				in.refs[a.Reference] = true
				in.lines = append(in.lines, moved...)
			}
		}
		done += len(g.lines)
		progress(done)
	}
	var findings []finding
	intentKeys := make([]string, 0, len(intents))
	for k := range intents {
		intentKeys = append(intentKeys, k)
	}
	sort.Strings(intentKeys)
	for _, k := range intentKeys {
		in := intents[k]
		if len(in.refs) < 2 {
			continue
		}
		refs := make([]string, 0, len(in.refs))
		var atts []map[string]any
		for _, a := range in.att {
			refs = append(refs, a.Reference)
			atts = append(atts, a.side())
		}
		sort.Strings(refs)
		first := in.att[0]
		findings = append(findings, finding{kind: KindDoublePayment, day: d, fingerprint: "intent:" + k,
			attempt: &first, currency: first.Currency,
			detail: fmt.Sprintf("%s %s was paid by %d provider operations under %d of its attempts' references (%s): a double payment",
				first.Kind, first.SubjectID, len(in.lines), len(in.refs), strings.Join(refs, ", ")),
			provider: linesSide(in.lines), our: map[string]any{"attempts": atts}})
	}

	ms, err := s.missing(ctx, st)
	if err != nil {
		return err
	}
	findings = append(findings, ms...)
	for _, f := range ms {
		if f.day.Equal(d) && f.attempt != nil {
			ledgerIDs = append(ledgerIDs, f.attempt.ID)
		}
	}
	ss, err := s.stale(ctx, st)
	if err != nil {
		return err
	}
	findings = append(findings, ss...)
	ts, err := s.ledgerTotals(ctx, st, lines, ledgerIDs)
	if err != nil {
		return err
	}
	findings = append(findings, ts...)
	if err := storeAll(findings); err != nil {
		return err
	}
	return s.autoResolve(ctx, st)
}

// conflicts reports each provider operation (provider id) that the day's
// lines list more than once with different versions (amount, currency,
// state, operation), and records it in st.conflicted: one amount_mismatch
// naming every line, whatever their order (R19). The statement contradicts
// itself about money that moved: saldo takes no line as the operation's
// word (matchGroup resolves no open attempt with it and compares each of
// its lines with the attempt), and the totals count each amount
// (ledgerTotals). Repeated lines that agree are one operation, as before.
func conflicts(st *runState, lines []line, found, byID map[string]ours) []finding {
	d := st.run.Day
	byOp := map[string][]line{}
	for _, l := range lines {
		if l.ProviderID != "" {
			byOp[l.opKey()] = append(byOp[l.opKey()], l)
		}
	}
	keys := make([]string, 0, len(byOp))
	for k, ls := range byOp {
		if len(ls) > 1 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []finding
	for _, k := range keys {
		ls := append([]line(nil), byOp[k]...)
		sort.SliceStable(ls, func(i, j int) bool {
			if vi, vj := ls[i].version(), ls[j].version(); vi != vj {
				return vi < vj
			}
			if ls[i].Reference != ls[j].Reference {
				return ls[i].Reference < ls[j].Reference
			}
			return ls[i].At.Before(ls[j].At)
		})
		var says []string
		seen := map[string]bool{}
		for _, l := range ls {
			if v := l.version(); !seen[v] {
				seen[v] = true
				says = append(says, fmt.Sprintf("%s %s %s %s (reference %q)", l.Operation, l.Amount, l.Currency, l.State, l.Reference))
			}
		}
		if len(says) < 2 {
			continue
		}
		st.conflicted[k] = true
		var a *ours
		for _, l := range ls {
			if o, ok := found[l.Reference]; ok && l.Reference != "" {
				a = &o
				break
			}
		}
		if o, ok := byID[ls[0].ProviderID]; ok && a == nil {
			a = &o
		}
		var our any = map[string]any{}
		currency := strings.ToUpper(ls[0].Currency)
		if a != nil {
			our, currency = a.side(), a.Currency
		}
		out = append(out, finding{kind: KindAmountMismatch, day: d, fingerprint: "versions:" + k, reference: ls[0].Reference,
			providerID: ls[0].ProviderID, attempt: a, currency: currency,
			detail: fmt.Sprintf("the %s statement of %s lists provider operation %s %d times and its lines disagree: %s. "+
				"saldo takes none of them for the operation's word (no open attempt is resolved by it; the totals count "+
				"each amount): ask the provider which is true", st.run.Provider, d.Format(time.DateOnly), ls[0].ProviderID,
				len(ls), strings.Join(says, "; ")),
			provider: linesSide(ls), our: our})
	}
	return out
}

// ownLines reports whether lines (one group) include the operation of a:
// a line with a's recorded provider id, or without an id, or any line when
// a has no provider id recorded.
func ownLines(ls []line, a ours) bool {
	for _, l := range ls {
		if a.ProviderID == "" || l.ProviderID == "" || l.ProviderID == a.ProviderID {
			return true
		}
	}
	return false
}

// matchGroup handles the statement lines of one reference (or one provider
// operation without a reference) and the attempt they match, nil when none
// (other, when not nil, is the attempt of another provider that has the
// reference). It reports the divergences and whether it resolved the
// attempt.
func (s *Service) matchGroup(ctx context.Context, st *runState, ls []line, a, other *ours) ([]finding, bool, error) {
	d := st.run.Day
	var out []finding
	ref := ls[0].Reference
	key := "ref:" + ref
	if ref == "" {
		key = ls[0].opKey()
	}
	var our any = map[string]any{}
	var att *ours
	if a != nil {
		our, att = a.side(), a
	}
	// A succeeded attempt's recorded provider id names its own operation;
	// so does an open attempt's, when a money-moving line has it, and, for
	// an open attempt that recorded none, the first money-moving line's id
	// (the operation reported to the attempts core below, which records it
	// on the attempt). A money-moving line under its reference with another
	// id is a second payment (R19), whatever day's statement lists it: one
	// double_payment per extra operation, fingerprinted by it, so the same
	// copy seen on its day and again on a later run is one divergence,
	// whether the attempt was open or succeeded when the run met it. The
	// other operation's lines are not the attempt's: the rest of the
	// matching sees only its own. (A failed attempt is left to
	// paid_but_failed below: money moved once, under an attempt saldo
	// failed. An open one whose recorded id no line has goes through the
	// attempts core, which refuses a contradicting id and sends it to
	// review.)
	ownID := ""
	if a != nil {
		switch {
		case a.Status == attempts.StatusSucceeded:
			ownID = a.ProviderID
		case a.Status.Open() && a.ProviderID != "":
			for _, l := range ls {
				if l.moved() && l.ProviderID == a.ProviderID {
					ownID = a.ProviderID
					break
				}
			}
		case a.Status.Open():
			for _, l := range ls {
				if l.moved() && l.ProviderID != "" {
					ownID = l.ProviderID
					break
				}
			}
		}
	}
	// extras: one line per other operation, reported to the attempts core
	// (reportExtras).
	var extras []line
	if ownID != "" {
		var own []line
		extra := map[string][]line{}
		var extraIDs []string
		for _, l := range ls {
			switch {
			case l.ProviderID == "" || l.ProviderID == ownID:
				own = append(own, l)
			case l.moved():
				if extra[l.ProviderID] == nil {
					extraIDs = append(extraIDs, l.ProviderID)
				}
				extra[l.ProviderID] = append(extra[l.ProviderID], l)
			}
		}
		sort.Strings(extraIDs)
		for _, id := range extraIDs {
			x := extra[id][0]
			extras = append(extras, x)
			how := fmt.Sprintf("succeeded as provider operation %s", ownID)
			if a.Status.Open() {
				how = fmt.Sprintf("was %s when this run met it (its own operation on the statement: %s); the copy is "+
					"recorded on the attempt, and is its second_operation divergence once the attempt succeeds", a.Status, ownID)
			}
			out = append(out, finding{kind: KindDoublePayment, day: d, fingerprint: opFingerprint(ref, x), reference: ref,
				providerID: id, attempt: a, currency: x.Currency,
				detail: fmt.Sprintf("the provider moved money (%s %s %s, id %s) under reference %q of %s %s, whose attempt "+
					"%s: a double payment", x.Operation, x.Amount, x.Currency, id, ref, a.Kind, a.SubjectID, how),
				provider: linesSide(ls), our: our})
		}
		// Each other operation reaches the attempts core before the own
		// line is reported, whatever becomes of that report (refused for
		// its amount, processing, a provider id the core contradicts): on
		// a succeeded attempt it is its second_operation divergence at
		// once; on an open one a note the core turns into the divergence in
		// the transaction that makes the attempt final (R9, R19). The same
		// operation seen again adds nothing.
		if err := s.reportExtras(ctx, st, *a, ownID, extras); err != nil {
			return nil, false, err
		}
		if len(own) == 0 {
			return out, false, nil
		}
		ls = own
	}
	var moved []line
	movedIDs := map[string]bool{}
	for _, l := range ls {
		if l.moved() {
			moved = append(moved, l)
			movedIDs[l.ProviderID] = true
		}
	}
	if len(movedIDs) > 1 {
		ops := make([]string, 0, len(moved))
		seen := map[string]bool{}
		for _, l := range moved {
			if k := l.opKey(); !seen[k] {
				seen[k] = true
				ops = append(ops, k)
			}
		}
		sort.Strings(ops)
		out = append(out, finding{kind: KindDoublePayment, day: d, fingerprint: key + "|" + strings.Join(ops, ","),
			reference: ref, providerID: moved[0].ProviderID, attempt: att, currency: moved[0].Currency,
			detail:   fmt.Sprintf("%d provider operations moved money under one reference %q: a double payment", len(movedIDs), ref),
			provider: linesSide(moved), our: our})
	}
	if a == nil {
		var note string
		if other != nil {
			note = fmt.Sprintf("; the reference is that of %s %s's attempt %s at provider %s (%s), which this line does not confirm",
				other.Kind, other.SubjectID, other.ID, other.Provider, other.Status)
			our = map[string]any{"attempt_of_another_provider": other.side()}
		}
		seen := map[string]bool{}
		for _, m := range moved {
			if seen[m.opKey()] {
				continue
			}
			seen[m.opKey()] = true
			out = append(out, finding{kind: KindUnknownToUs, day: d, fingerprint: opFingerprint(ref, m), reference: ref,
				providerID: m.ProviderID, currency: m.Currency,
				detail: fmt.Sprintf("the provider moved money (%s %s %s, id %s, reference %q) that no attempt of saldo at %s knows: "+
					"the ledger says it did not; never moved automatically%s", m.Operation, m.Amount, m.Currency,
					m.ProviderID, ref, st.run.Provider, note),
				provider: linesSide(ls), our: our})
		}
		return out, false, nil
	}
	// The line that speaks for the operation: a success if any, its own
	// operation's (ownID) first.
	l := ls[0]
	if len(moved) > 0 {
		l = moved[0]
		for _, m := range moved {
			if ownID != "" && m.ProviderID == ownID {
				l = m
				break
			}
		}
	}
	field, said, want := mismatch(l, *a)
	// An operation the statement lists with different versions
	// (conflicts): each of its lines is compared with the attempt, so a
	// contradicting one is found whatever the lines' order.
	conflicted := st.conflicted[l.opKey()]
	for _, m := range ls {
		if !conflicted || field != "" {
			break
		}
		if m.opKey() == l.opKey() {
			if f, sd, w := mismatch(m, *a); f != "" {
				l, field, said, want = m, f, sd, w
			}
		}
	}
	if field != "" {
		out = append(out, finding{kind: KindAmountMismatch, day: d, fingerprint: key, reference: a.Reference,
			providerID: l.ProviderID, attempt: a, currency: a.Currency,
			detail: fmt.Sprintf("the statement says %s %q for %s %s (reference %s), saldo says %q", field, said,
				a.Kind, a.SubjectID, a.Reference, want),
			provider: linesSide(ls), our: our})
	}
	if a.Status == attempts.StatusFailed && len(moved) > 0 {
		// Money moved under the reference of an attempt saldo failed,
		// whatever amount or operation the line names: the reserve went
		// back (or the charge was never credited) while the money left.
		// A mismatch found above does not make it any less critical.
		out = append(out, finding{kind: KindPaidButFailed, day: d, fingerprint: opFingerprint(ref, l), reference: a.Reference,
			providerID: l.ProviderID, attempt: a, currency: a.Currency,
			detail: fmt.Sprintf("the provider moved %s %s for %s %s (operation %s) but saldo resolved its attempt failed "+
				"(by %s) and released or never credited the money: a human settles it; nothing moves automatically",
				l.Amount, l.Currency, a.Kind, a.SubjectID, l.ProviderID, a.ResolvedBy),
			provider: linesSide(ls), our: our})
		if !a.Diverged {
			// The attempts core records the divergence on the attempt and
			// puts it in the review queue, also when the line's amount or
			// operation differs; its final status and the ledger stay as
			// they are (R9).
			if _, err := s.report(ctx, st, *a, l); err != nil && !errors.Is(err, attempts.ErrReportMismatch) &&
				!errors.Is(err, attempts.ErrProviderIDMismatch) {
				return nil, false, err
			}
		}
		return out, false, nil
	}
	if field != "" {
		if a.Status.Open() && !a.Review {
			// The attempts core checks the report too: it flags the
			// attempt for review and moves nothing.
			_, err := s.report(ctx, st, *a, l)
			if err != nil && !errors.Is(err, attempts.ErrReportMismatch) && !errors.Is(err, attempts.ErrProviderIDMismatch) {
				return nil, false, err
			}
		}
		return out, false, nil
	}
	switch {
	case a.Status.Open():
		if l.State != providers.StateSucceeded && l.State != providers.StateFailed {
			return out, false, nil
		}
		if conflicted {
			// The statement says the operation succeeded and failed:
			// not its word; the attempt stays open for its lookups or a
			// human (the conflict is reported).
			return out, false, nil
		}
		res, err := s.report(ctx, st, *a, l)
		switch {
		case errors.Is(err, attempts.ErrReportMismatch), errors.Is(err, attempts.ErrProviderIDMismatch):
			out = append(out, finding{kind: KindAmountMismatch, day: d, fingerprint: key, reference: a.Reference,
				providerID: l.ProviderID, attempt: a, currency: a.Currency,
				detail: fmt.Sprintf("the attempts core refused the statement's word for %s %s: %v (sent to review, nothing moved)",
					a.Kind, a.SubjectID, err),
				provider: linesSide(ls), our: our})
			return out, false, nil
		case err != nil:
			return nil, false, err
		}
		if res.Transitioned {
			na := *a
			na.Status, na.ResolvedBy = res.Attempt.Status, res.Attempt.ResolvedBy
			na.ResolvedAt, na.ProviderID = res.Attempt.ResolvedAt, res.Attempt.ProviderID
			out = append(out, finding{kind: KindResolved, day: d, fingerprint: "att:" + a.ID.String(), reference: a.Reference,
				providerID: l.ProviderID, attempt: a, currency: a.Currency,
				detail: fmt.Sprintf("%s %s was %s; the statement says %s: resolved %s by reconciliation run %s",
					a.Kind, a.SubjectID, a.Status, l.State, res.Attempt.Status, st.run.ID),
				provider: linesSide(ls), our: map[string]any{"before": a.side(), "after": na.side()},
				resolvedReason: fmt.Sprintf("resolved %s through the attempts core by run %s (statement of %s)",
					res.Attempt.Status, st.run.ID, d.Format(time.DateOnly))})
			return out, true, nil
		}
	case a.Status == attempts.StatusSucceeded && len(moved) == 0:
		out = append(out, finding{kind: KindMissingAtProvider, day: d, fingerprint: "att:" + a.ID.String(),
			reference: a.Reference, providerID: l.ProviderID, attempt: a, currency: a.Currency,
			detail: fmt.Sprintf("saldo's attempt for %s %s succeeded; the provider's statement lists it %s", a.Kind,
				a.SubjectID, l.State),
			provider: linesSide(ls), our: our})
		if l.State == providers.StateFailed && !a.Diverged {
			// A reversal (a payout returned, a refund failed late): the
			// attempts core records the divergence on the attempt and puts
			// it in the review queue; its final status and the ledger stay
			// as they are (R9) until a human books it.
			if _, err := s.report(ctx, st, *a, l); err != nil && !errors.Is(err, attempts.ErrReportMismatch) &&
				!errors.Is(err, attempts.ErrProviderIDMismatch) {
				return nil, false, err
			}
		}
	}
	return out, false, nil
}

// reportExtras gives the attempts core each extra operation under the
// reference of a, whose own is ownID (attempts.NoteSecondOperation). On a
// succeeded attempt the core records the second operation as a divergence
// (second_operation: review, needs_attention, *.diverged, the audit until
// an operator settles it), as a webhook or a lookup that named it first
// did. On an open one it notes it, and the transaction that makes the
// attempt final records that divergence (or, failed, paid_after_failure):
// an attempt whose own line this run cannot take (another amount: review)
// never loses its second operation. The same operation seen again, by any
// of them or by a later run, is found by its provider id and adds nothing
// (R9, R19). Its status and the ledger stay.
func (s *Service) reportExtras(ctx context.Context, st *runState, a ours, ownID string, extras []line) error {
	for _, x := range extras {
		evidence, err := lineEvidence(st, x)
		if err != nil {
			return err
		}
		_, err = s.att.NoteSecondOperation(ctx, attempts.SecondOperationInput{Besides: ownID,
			ResolveInput: attempts.ResolveInput{Reference: a.Reference, Provider: st.run.Provider, Evidence: evidence,
				Operation: x.Operation, Amount: x.Amount, Currency: x.Currency, State: x.State, ProviderID: x.ProviderID,
				Source: attempts.SourceReconciliation, Actor: st.run.ID, Reason: lineReason(st, x)}})
		if err != nil && !errors.Is(err, attempts.ErrReportMismatch) && !errors.Is(err, attempts.ErrProviderIDMismatch) {
			return err
		}
	}
	return nil
}

// report gives the attempts core the statement line l as the provider's
// word about a, through the conditional transition (R10, R17).
func (s *Service) report(ctx context.Context, st *runState, a ours, l line) (attempts.ResolveResult, error) {
	evidence, err := lineEvidence(st, l)
	if err != nil {
		return attempts.ResolveResult{}, err
	}
	return s.att.ResolveByReference(ctx, attempts.ResolveInput{Reference: a.Reference, Provider: st.run.Provider, Evidence: evidence,
		Operation: l.Operation, Amount: l.Amount, Currency: l.Currency, State: l.State, ProviderID: l.ProviderID,
		Source: attempts.SourceReconciliation, Actor: st.run.ID, Reason: lineReason(st, l)})
}

// lineEvidence is the evidence of a report of statement line l by the run.
func lineEvidence(st *runState, l line) (json.RawMessage, error) {
	return json.Marshal(map[string]any{"reconciliation_run": st.run.ID, "provider": st.run.Provider,
		"day": st.run.Day.Format(time.DateOnly), "statement_line": map[string]any{"operation": l.Operation,
			"reference": l.Reference, "provider_id": l.ProviderID, "state": l.State, "amount": l.Amount,
			"currency": l.Currency, "at": l.At.UTC()}})
}

// lineReason is the reason of a report of statement line l by the run.
func lineReason(st *runState, l line) string {
	return fmt.Sprintf("reconciliation run %s: the %s statement of %s lists %s %s %s %s %s (id %s, at %s)",
		st.run.ID, st.run.Provider, st.run.Day.Format(time.DateOnly), l.Operation, l.Reference, l.State, l.Amount,
		l.Currency, l.ProviderID, l.At.UTC().Format(time.RFC3339))
}

// mismatch compares a line with the attempt: the first field that differs,
// what the line says and what saldo says.
func mismatch(l line, a ours) (field, said, want string) {
	switch {
	case l.Operation != "" && string(l.Operation) != a.Operation:
		return "operation", string(l.Operation), a.Operation
	case !a.HasAmount:
		return "", "", ""
	case !l.ok || !l.amount.Equal(a.Amount):
		return "amount", l.Amount, a.Amount.String()
	case l.Currency != "" && !strings.EqualFold(l.Currency, a.Currency):
		return "currency", l.Currency, a.Currency
	}
	return "", "", ""
}

// missing finds our succeeded attempts that the provider lists on no
// statement of their window: the day saldo recorded them succeeded, Before
// days before it and After days after it, as the provider declares for the
// operation (providers.StatementWindow; a day either side unless it
// says otherwise: Stripe lists a payout on the day it was created, a Pix
// PSP a devolucao on the day of the Pix it returns). It judges a day once
// its window's last statement has closed: each run judges the day After
// days before its own, and any later day whose window has closed by then;
// the attempts of the other days are counted as deferred.
//
// Widening a window hides nothing: a statement line confirms only the
// attempt it names (its reference, or, for a line under no reference of
// ours, its provider id, and never an operation whose id contradicts the
// attempt's recorded one), one attempt at most per run, and no statement
// of a day before the attempt, or the charge a refund returns, was opened
// is searched (nothing of it can be listed there).
func (s *Service) missing(ctx context.Context, st *runState) ([]finding, error) {
	d := st.run.Day
	after := providers.StatementAfter(st.prov)
	now := s.clock.Now()
	first := d.AddDate(0, 0, -after)
	var days []time.Time
	for x := first; !x.After(d); x = x.AddDate(0, 0, 1) {
		if x.Equal(first) || !now.Before(x.AddDate(0, 0, after+1).Add(s.cfg.SettleMargin)) {
			days = append(days, x)
			continue
		}
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM attempts WHERE provider = $1 AND status = 'succeeded'
			AND resolved_at >= $2 AND resolved_at < $3`, st.run.Provider, x, x.AddDate(0, 0, 1)).Scan(&n); err != nil {
			return nil, err
		}
		st.run.Deferred += n
	}
	m := &matcher{s: s, st: st, claimed: map[string]uuid.UUID{}, ours: map[string]bool{}, days: map[time.Time]*dayIndex{}}
	var out []finding
	for _, x := range days {
		// Streamed in id order pages: never all of a day's attempts at once.
		after := uuid.Nil
		for {
			list, err := s.queryOurs(ctx, `WHERE a.provider = $1 AND a.status = 'succeeded' AND a.resolved_at >= $2
				AND a.resolved_at < $3 AND a.id > $4 ORDER BY a.id LIMIT $5`, st.run.Provider, x, x.AddDate(0, 0, 1), after, chunk)
			if err != nil {
				return nil, err
			}
			origins, err := s.refundOrigins(ctx, list)
			if err != nil {
				return nil, err
			}
			for _, a := range list {
				w := providers.StatementWindow(st.prov, providers.Operation(a.Operation))
				from, to := x.AddDate(0, 0, -w.Before), x.AddDate(0, 0, w.After)
				// Nothing of the attempt is listed before it (or the charge
				// it refunds) was opened; a day of slack for the provider's
				// cut-off. Never narrower than a day either side.
				origin := Day(a.CreatedAt)
				if o, ok := origins[a.ID]; ok && o.Before(origin) {
					origin = o
				}
				if lo := origin.AddDate(0, 0, -1); lo.After(from) {
					from = lo
				}
				if lo := x.AddDate(0, 0, -1); from.After(lo) {
					from = lo
				}
				ok, err := m.listed(ctx, a, x, from, to)
				if err != nil {
					return nil, err
				}
				if ok {
					continue
				}
				a := a
				var stmts []string
				for sd := from; !sd.After(to); sd = sd.AddDate(0, 0, 1) {
					stmts = append(stmts, sd.Format(time.DateOnly))
				}
				out = append(out, finding{kind: KindMissingAtProvider, day: x, fingerprint: "att:" + a.ID.String(),
					reference: a.Reference, providerID: a.ProviderID, attempt: &a, currency: a.Currency,
					detail: fmt.Sprintf("saldo's attempt for %s %s succeeded on %s; the provider lists no successful operation "+
						"for reference %s or id %q on its statements of %s to %s (%s lists a %s up to %d days before and %d after)",
						a.Kind, a.SubjectID, x.Format(time.DateOnly), a.Reference, a.ProviderID, from.Format(time.DateOnly),
						to.Format(time.DateOnly), st.run.Provider, a.Operation, w.Before, w.After),
					provider: map[string]any{"lines": []any{}, "statements": stmts},
					our:      a.side()})
			}
			if len(list) < chunk {
				break
			}
			after = list[len(list)-1].ID
		}
	}
	return out, nil
}

// refundOrigins gives, for the refunds among list, the day the charge each
// one returns was created: a provider may list a refund with that charge
// (a Pix PSP lists a devolucao on the day of the Pix it returns).
func (s *Service) refundOrigins(ctx context.Context, list []ours) (map[uuid.UUID]time.Time, error) {
	var ids []uuid.UUID
	for _, a := range list {
		if a.Direction == "out" && providers.Operation(a.Operation) == providers.OpRefund {
			ids = append(ids, a.ID)
		}
	}
	out := map[uuid.UUID]time.Time{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT a.id, c.created_at FROM attempts a
		JOIN payouts p ON p.id = a.subject_id JOIN charges c ON c.id = p.charge_id
		WHERE a.id = ANY ($1) AND a.direction = 'out'`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id uuid.UUID
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			return nil, err
		}
		out[id] = Day(at)
	}
	return out, rows.Err()
}

// matcher finds an attempt's own successful line on the statements of its
// window, for missing. Statements are fetched once per run, the nearest
// days first, and only as far as an attempt needs.
type matcher struct {
	s  *Service
	st *runState
	// claimed: the operations (line.opKey) that confirmed an attempt in
	// this run, and which; one line confirms one attempt.
	claimed map[string]uuid.UUID
	// ours: whether a reference is that of an attempt of the provider.
	ours map[string]bool
	// days: the successful lines of each statement fetched, by reference
	// and by provider id.
	days map[time.Time]*dayIndex
}

type dayIndex struct {
	byRef, byID map[string][]line
}

// index is the statement of sd's successful lines, indexed.
func (m *matcher) index(ctx context.Context, sd time.Time) (*dayIndex, error) {
	if ix, ok := m.days[sd]; ok {
		return ix, nil
	}
	ls, err := m.s.statement(ctx, m.st, sd)
	if err != nil {
		return nil, err
	}
	ix := &dayIndex{byRef: map[string][]line{}, byID: map[string][]line{}}
	for _, l := range ls {
		if !l.moved() {
			continue
		}
		ix.byRef[l.Reference] = append(ix.byRef[l.Reference], l)
		if l.ProviderID != "" {
			ix.byID[l.ProviderID] = append(ix.byID[l.ProviderID], l)
		}
	}
	m.days[sd] = ix
	return ix, nil
}

// listed reports whether a statement of from..to lists a's operation,
// looking at x, the day before and the day after first, then outwards.
func (m *matcher) listed(ctx context.Context, a ours, x, from, to time.Time) (bool, error) {
	var order []time.Time
	for _, sd := range []time.Time{x, x.AddDate(0, 0, -1), x.AddDate(0, 0, 1)} {
		if !sd.Before(from) && !sd.After(to) {
			order = append(order, sd)
		}
	}
	for i := 2; ; i++ {
		back, fwd := x.AddDate(0, 0, -i), x.AddDate(0, 0, i)
		if back.Before(from) && fwd.After(to) {
			break
		}
		if !back.Before(from) {
			order = append(order, back)
		}
		if !fwd.After(to) {
			order = append(order, fwd)
		}
	}
	for _, sd := range order {
		ix, err := m.index(ctx, sd)
		if err != nil {
			return false, err
		}
		cands := ix.byRef[a.Reference]
		if a.ProviderID != "" {
			cands = append(cands[:len(cands):len(cands)], ix.byID[a.ProviderID]...)
		}
		for _, l := range cands {
			ok, err := m.confirms(ctx, l, a)
			if err != nil {
				return false, err
			}
			if !ok {
				continue
			}
			if by, taken := m.claimed[l.opKey()]; taken && by != a.ID {
				continue
			}
			m.claimed[l.opKey()] = a.ID
			return true, nil
		}
	}
	return false, nil
}

// confirms reports whether l is a successful line of a's own operation: a
// line under a's reference (without a provider id, with a's recorded one,
// or any when a recorded none: another id under its reference is a second
// payment, which matchGroup reports), or a line with a's recorded provider
// id under no reference of another attempt of the provider (a line under
// another attempt's reference is that attempt's).
func (m *matcher) confirms(ctx context.Context, l line, a ours) (bool, error) {
	if !l.moved() {
		return false, nil
	}
	if l.Reference == a.Reference {
		return a.ProviderID == "" || l.ProviderID == "" || l.ProviderID == a.ProviderID, nil
	}
	if a.ProviderID == "" || l.ProviderID != a.ProviderID {
		return false, nil
	}
	if l.Reference == "" {
		return true, nil
	}
	known, seen := m.ours[l.Reference]
	if !seen {
		found, err := m.s.byReference(ctx, m.st.run.Provider, []string{l.Reference})
		if err != nil {
			return false, err
		}
		_, known = found[l.Reference]
		m.ours[l.Reference] = known
	}
	return !known, nil
}

// stale is the age report: attempts of the provider unknown, or open and in
// review, for longer than StaleAfter.
func (s *Service) stale(ctx context.Context, st *runState) ([]finding, error) {
	cut := s.clock.Now().Add(-s.cfg.StaleAfter)
	var out []finding
	after := uuid.Nil
	for {
		list, err := s.queryOurs(ctx, `WHERE a.provider = $1 AND a.status IN ('pending', 'unknown')
			AND ((a.status = 'unknown' AND coalesce(a.unknown_at, a.created_at) < $2) OR (a.review AND a.review_at < $2))
			AND a.id > $3 ORDER BY a.id LIMIT $4`, st.run.Provider, cut, after, chunk)
		if err != nil {
			return nil, err
		}
		for _, a := range list {
			a := a
			since, what := a.CreatedAt, "unknown"
			if a.UnknownAt != nil {
				since = *a.UnknownAt
			}
			if a.Review && a.ReviewAt != nil && (a.Status != attempts.StatusUnknown || a.ReviewAt.Before(since)) {
				since, what = *a.ReviewAt, "in review"
			}
			out = append(out, finding{kind: KindStaleOpen, day: st.run.Day, fingerprint: "att:" + a.ID.String(),
				reference: a.Reference, providerID: a.ProviderID, attempt: &a, currency: a.Currency,
				detail: fmt.Sprintf("%s %s has been %s since %s (more than %s): its money is held until a human or the provider decides",
					a.Kind, a.SubjectID, what, since.UTC().Format(time.RFC3339), s.cfg.StaleAfter),
				provider: map[string]any{}, our: a.side()})
		}
		if len(list) < chunk {
			break
		}
		after = list[len(list)-1].ID
	}
	return out, nil
}

func outgoing(op providers.Operation) bool {
	switch op {
	case providers.OpCardCharge, providers.OpPixCharge:
		return false
	}
	return true
}

// ledgerTotals compares, per currency and direction, the statement's
// succeeded totals with what the ledger settled (payout_settle, and for an
// outgoing attempt paid after it failed the hold its settlement booked as
// gone: divergence_hold_book) and credited (charge_credit, gross) for the
// attempts the day's lines name, plus the
// attempts that succeeded that day and that no statement lists (missing at
// the provider). Keyed by the statement's lines rather than by when saldo
// resolved each attempt, so an attempt resolved the next day (by a lookup,
// or by this run) is not a timing difference.
func (s *Service) ledgerTotals(ctx context.Context, st *runState, lines []line, ids []uuid.UUID) ([]finding, error) {
	d := st.run.Day
	type key struct{ cur, dir string }
	stmt := map[key]decimal.Decimal{}
	count := map[key]int{}
	// One operation listed twice alike (a page of the statement repeated:
	// the same provider id, amount, currency and state) is one operation,
	// as the matching takes it. Listed with different amounts, each
	// amount counts: the totals never pick one of the statement's
	// contradicting words (conflicts reports them), whatever their order.
	counted := map[string]bool{}
	for _, l := range lines {
		if !l.moved() || !l.ok || counted[l.opKey()+"\x00"+l.version()] {
			continue
		}
		counted[l.opKey()+"\x00"+l.version()] = true
		dir := "in"
		if outgoing(l.Operation) {
			dir = "out"
		}
		k := key{strings.ToUpper(l.Currency), dir}
		stmt[k] = stmt[k].Add(l.amount)
		count[k]++
	}
	texts := make([]string, len(ids))
	for i, id := range ids {
		texts[i] = id.String()
	}
	led := map[key]decimal.Decimal{}
	rows, err := s.pool.Query(ctx, `
		SELECT p.currency, 'out', sum(p.amount)::text
		FROM ledger_transactions t
		JOIN ledger_postings p ON p.transaction_id = t.id AND p.amount > 0
		WHERE (t.cause_kind = 'payout_settle' AND t.cause_id = ANY ($1::text[]))
		   OR (t.cause_kind = 'divergence_hold_book'
		       AND t.cause_id IN (SELECT id::text FROM attempts WHERE id = ANY ($2::uuid[]) AND direction = 'out'))
		GROUP BY p.currency
		UNION ALL
		SELECT p.currency, 'in', (-sum(p.amount))::text
		FROM ledger_transactions t
		JOIN ledger_postings p ON p.transaction_id = t.id AND p.amount < 0
		WHERE t.cause_kind = 'charge_credit'
			AND t.cause_id IN (SELECT DISTINCT subject_id FROM attempts WHERE id = ANY ($2::uuid[]) AND direction = 'in')
		GROUP BY p.currency`, texts, ids)
	if err != nil {
		return nil, fmt.Errorf("reconcile: ledger totals: %w", err)
	}
	for rows.Next() {
		var cur, dir, sum string
		if err := rows.Scan(&cur, &dir, &sum); err != nil {
			rows.Close()
			return nil, err
		}
		v, err := decimal.NewFromString(sum)
		if err != nil {
			rows.Close()
			return nil, err
		}
		led[key{cur, dir}] = v
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	keys := map[key]bool{}
	for k := range stmt {
		keys[k] = true
	}
	for k := range led {
		keys[k] = true
	}
	sorted := make([]key, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].cur != sorted[j].cur {
			return sorted[i].cur < sorted[j].cur
		}
		return sorted[i].dir > sorted[j].dir
	})
	var out []finding
	st.run.Totals = []Totals{}
	for _, k := range sorted {
		t := Totals{Currency: k.cur, Direction: k.dir, Statement: stmt[k].String(), Ledger: led[k].String(), Lines: count[k]}
		st.run.Totals = append(st.run.Totals, t)
		if stmt[k].Equal(led[k]) {
			continue
		}
		what := "settled outgoing"
		if k.dir == "in" {
			what = "credited incoming"
		}
		out = append(out, finding{kind: KindLedgerTotals, day: d,
			fingerprint: d.Format(time.DateOnly) + ":" + k.cur + ":" + k.dir, currency: k.cur,
			detail: fmt.Sprintf("%s %s on %s: the statement says %s (%d lines), the ledger %s (difference %s)",
				what, k.cur, d.Format(time.DateOnly), stmt[k].String(), count[k], led[k].String(), stmt[k].Sub(led[k]).String()),
			provider: map[string]any{"currency": k.cur, "direction": k.dir, "amount": stmt[k].String(), "lines": count[k]},
			our:      map[string]any{"currency": k.cur, "direction": k.dir, "amount": led[k].String(), "attempts": len(ids)}})
	}
	return out, nil
}

// storedText is s as text PostgreSQL stores, at most n bytes: invalid
// UTF-8 replaced, NUL written \x00, cut on a character boundary. For the
// texts saldo writes about a run (its detail, its error), which may quote
// a provider's.
func storedText(s string, n int) string {
	if !pgtext.Valid(s) {
		s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", `\x00`)
	}
	return pgtext.Truncate(s, n)
}

// maxFingerprint is the longest fingerprint the table holds (bytes; it
// counts characters, never more).
const maxFingerprint = 500

// fingerprintKey is the fingerprint stored for fp: fp itself when it fits,
// else "sha256:" and the hex SHA-256 of the whole of it. Never a prefix:
// two operations whose fingerprints share their first 500 bytes (a long
// reference) are two divergences (R19).
func fingerprintKey(fp string) string {
	if len(fp) <= maxFingerprint && pgtext.Valid(fp) {
		return fp
	}
	h := sha256.Sum256([]byte(fp))
	return "sha256:" + hex.EncodeToString(h[:])
}
