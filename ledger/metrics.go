package ledger

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// postDuration is the ledger write latency: one Post or Reverse, from the
// call to its answer (inside the caller's transaction, so commit time is
// not included), or one Poster.Post from the call to its batch's commit
// (queueing included). Labelled by outcome: posted, replayed, refused,
// error.
var postDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    "saldo_ledger_post_duration_seconds",
	Help:    "Latency of one ledger write (Post or Reverse), by outcome.",
	Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
}, []string{"outcome"})

// posterBatchSize is how many transactions a Poster commit carried.
var posterBatchSize = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name:    "saldo_ledger_poster_batch_size",
	Help:    "Transactions per ledger.Poster batch (one commit).",
	Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
})

// posterFallbacks counts Poster batches that failed as a whole and were
// posted one transaction at a time (their idempotency keys replay any that
// committed). Expected zero: a silent fallback would hide a bug.
var posterFallbacks = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "saldo_ledger_poster_fallbacks_total",
	Help: "ledger.Poster batches that failed as a whole and were posted one transaction at a time.",
})

// Collectors returns the ledger's Prometheus collectors, for a registry.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{postDuration, posterBatchSize, posterFallbacks}
}

// observePost records one write's latency and outcome.
func observePost(start time.Time, tx Transaction, err error) {
	outcome := "posted"
	switch {
	case err == nil && tx.Replayed:
		outcome = "replayed"
	case errors.Is(err, ErrInsufficientFunds) || errors.Is(err, ErrIdempotencyConflict) ||
		errors.Is(err, ErrAlreadyReversed) || errors.Is(err, ErrInvalidInput) || errors.Is(err, ErrUnbalanced):
		outcome = "refused"
	case err != nil:
		outcome = "error"
	}
	postDuration.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
}
