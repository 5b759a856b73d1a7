package attempts

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the attempts core's Prometheus collectors. Build with
// NewMetrics, pass in Config.Metrics and register Collectors() with your
// registry. A nil *Metrics records nothing.
type Metrics struct {
	// Calls counts provider calls by kind, provider and outcome class.
	Calls *prometheus.CounterVec
	// Transitions counts status changes by kind, provider and new status.
	Transitions *prometheus.CounterVec
	// ReviewFlagged counts attempts sent to human review (the alert metric).
	ReviewFlagged *prometheus.CounterVec
	// Conflicts counts provider answers contradicting a final status.
	Conflicts *prometheus.CounterVec
	// Divergences counts provider successes reported for attempts resolved
	// failed: money may have left while the reserve went back (alert on
	// any increase; the attempt is in the review queue and audit verify
	// reports it). A subset of Conflicts.
	Divergences *prometheus.CounterVec
	// Mismatches counts provider reports (webhook, lookup, poll) naming one
	// of our references with another provider, operation, amount or
	// currency (alert on any increase; the attempt goes to review), by the
	// field that differed.
	Mismatches *prometheus.CounterVec
	// AuthRefused counts calls whose credentials the provider refused
	// (OutcomeAuthRefused: 401, 403), by provider and operation: alert on
	// any increase, an operator must fix the provider's key or permissions.
	AuthRefused *prometheus.CounterVec
	// Lookups counts lookups by reference by kind, provider and what they
	// found: found, not_found, or unanswered (a transport error, 5xx, 429:
	// proves nothing; a rising share says the provider's lookups are down).
	Lookups *prometheus.CounterVec
	// OldestUnknownAge is the age in seconds of the oldest unknown attempt.
	OldestUnknownAge prometheus.Gauge
	// ReviewQueueSize is the number of attempts in review: open ones, and
	// failed ones a provider later reported succeeded (diverged).
	ReviewQueueSize prometheus.Gauge
	// ResolverLag is how overdue, in seconds, the most overdue lookup is.
	ResolverLag prometheus.Gauge
}

// NewMetrics builds the collectors (names prefixed saldo_attempts_, and
// saldo_provider_auth_refused_total, which is about a provider's
// configuration rather than an attempt).
func NewMetrics() *Metrics {
	labels := []string{"kind", "provider"}
	return &Metrics{
		Calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "saldo_attempts_calls_total",
			Help: "Provider calls by outcome class."}, append(labels, "outcome")),
		Transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "saldo_attempts_transitions_total",
			Help: "Attempt status transitions by new status."}, append(labels, "status")),
		ReviewFlagged: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "saldo_attempts_review_flagged_total",
			Help: "Attempts flagged for human review (alert on increase)."}, labels),
		Conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "saldo_attempts_final_conflicts_total",
			Help: "Provider answers that contradict a final attempt status (reconcile)."}, labels),
		Divergences: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "saldo_attempts_divergences_total",
			Help: "Provider successes reported for attempts resolved failed (alert: money may have left after the reserve was released)."}, labels),
		Mismatches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "saldo_attempts_report_mismatches_total",
			Help: "Provider reports contradicting the attempt's provider, operation, amount or currency (alert; sent to review)."},
			append(labels, "field")),
		AuthRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "saldo_provider_auth_refused_total",
			Help: "Provider calls refused for saldo's credentials (401, 403): nothing processed, the attempt waits (alert on increase)."},
			[]string{"provider", "operation"}),
		Lookups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "saldo_attempts_lookups_total",
			Help: "Lookups by reference by what they found (found, not_found, unanswered: a transport error, 5xx or 429 that proves nothing)."},
			append(labels, "outcome")),
		OldestUnknownAge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "saldo_attempts_oldest_unknown_age_seconds",
			Help: "Age of the oldest unknown attempt, refreshed by the sweeper."}),
		ReviewQueueSize: prometheus.NewGauge(prometheus.GaugeOpts{Name: "saldo_attempts_review_queue_size",
			Help: "Attempts waiting for human review (open, or failed and diverged), refreshed by the sweeper."}),
		ResolverLag: prometheus.NewGauge(prometheus.GaugeOpts{Name: "saldo_attempts_resolver_lag_seconds",
			Help: "How overdue the most overdue lookup is, refreshed by the sweeper."}),
	}
}

// Collectors returns every collector, for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Calls, m.Transitions, m.ReviewFlagged, m.Conflicts, m.Divergences, m.Mismatches,
		m.AuthRefused, m.Lookups, m.OldestUnknownAge, m.ReviewQueueSize, m.ResolverLag}
}

func (m *Metrics) call(a Attempt, o Outcome) {
	if m != nil {
		m.Calls.WithLabelValues(string(a.Kind), a.Provider, string(o)).Inc()
	}
}

// lookup counts a lookup of a by what it found (class).
func (m *Metrics) lookup(a Attempt, class lookupClass) {
	if m != nil {
		outcome := string(class)
		if !class.answered() {
			outcome = "unanswered"
		}
		m.Lookups.WithLabelValues(string(a.Kind), a.Provider, outcome).Inc()
	}
}

func (m *Metrics) authRefused(a Attempt) {
	if m != nil {
		m.AuthRefused.WithLabelValues(a.Provider, a.Operation).Inc()
	}
}

func (m *Metrics) transition(a Attempt) {
	if m != nil {
		m.Transitions.WithLabelValues(string(a.Kind), a.Provider, string(a.Status)).Inc()
	}
}

func (m *Metrics) reviewFlagged(a Attempt) {
	if m != nil {
		m.ReviewFlagged.WithLabelValues(string(a.Kind), a.Provider).Inc()
	}
}

func (m *Metrics) conflict(a Attempt) {
	if m != nil {
		m.Conflicts.WithLabelValues(string(a.Kind), a.Provider).Inc()
	}
}

func (m *Metrics) divergence(a Attempt) {
	if m != nil {
		m.Divergences.WithLabelValues(string(a.Kind), a.Provider).Inc()
	}
}

func (m *Metrics) mismatch(a Attempt, field string) {
	if m != nil {
		m.Mismatches.WithLabelValues(string(a.Kind), a.Provider, field).Inc()
	}
}
