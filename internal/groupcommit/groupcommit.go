// Package groupcommit runs concurrent requests in batches: the requests
// that arrive while a batch is being written become the next batch, so many
// callers share one database transaction and a handful of set-based
// statements (docs/decisions/0002-batching-whole-operations.md).
//
// A Batcher keeps no goroutine while idle: the first request after a quiet
// spell starts a flusher, and a flusher that finds the queue empty exits. So
// a Batcher needs no Close, and a Service that owns one can be dropped.
package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// batchSize and fallbacks are every Batcher's metrics, labelled by its name.
var (
	batchSize = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "saldo_groupcommit_batch_size",
		Help:    "Requests per group-commit batch, by batcher.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
	}, []string{"batcher"})
	fallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "saldo_groupcommit_fallbacks_total",
		Help: "Batches rolled back and redone one request at a time, by batcher.",
	}, []string{"batcher"})
)

// Collectors returns the group-commit metrics, for a registry.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{batchSize, fallbacks}
}

// Result is one request's answer.
type Result[Res any] struct {
	Value Res
	Err   error
}

// Func writes a batch and answers it: exactly one Result per request, in
// the order of reqs. ctx carries the values of the first request's context
// (River's client, loggers) but not its cancellation: one caller giving up
// must not cut the others' transaction short.
type Func[Req, Res any] func(ctx context.Context, reqs []Req) []Result[Res]

// Options of a Batcher. Zero values take the defaults.
type Options struct {
	// Name labels the Batcher's metrics (for example "payouts_open").
	Name string
	// MaxBatch bounds a batch (default 64).
	MaxBatch int
	// Flushers is how many batches may be written at once (default 2): while
	// one commits, the next fills.
	Flushers int
	// Linger, when positive, is how long a flusher waits for a batch to
	// fill before writing one smaller than MaxBatch, when the batch before
	// held more than one request (a lone caller does not wait).
	Linger time.Duration
}

// Batcher batches requests to a Func.
type Batcher[Req, Res any] struct {
	run      Func[Req, Res]
	maxBatch int
	flushers int
	linger   time.Duration

	mu        sync.Mutex
	queue     []*item[Req, Res]
	running   int
	lastBatch int // size of the last batch taken (under mu), kept while idle

	batches, requests, fallbacks atomic.Int64
	sizes                        prometheus.Observer
	fallbackCounter              prometheus.Counter
}

// Stats counts what a Batcher has run.
type Stats struct {
	Batches   int64 // calls of the Func
	Requests  int64 // requests in them
	Fallbacks int64 // batches the Func redid one request at a time (Fallback)
}

// PerBatch is the mean batch size.
func (s Stats) PerBatch() float64 {
	if s.Batches == 0 {
		return 0
	}
	return float64(s.Requests) / float64(s.Batches)
}

// Stats returns the counts so far.
func (b *Batcher[Req, Res]) Stats() Stats {
	return Stats{Batches: b.batches.Load(), Requests: b.requests.Load(), Fallbacks: b.fallbacks.Load()}
}

// Fallback counts a batch that its Func rolled back and redid one request
// at a time (Stats.Fallbacks, saldo_groupcommit_fallbacks_total).
func (b *Batcher[Req, Res]) Fallback() {
	b.fallbacks.Add(1)
	b.fallbackCounter.Inc()
}

type item[Req, Res any] struct {
	ctx  context.Context
	req  Req
	done chan Result[Res]
}

// New returns a Batcher running batches through run.
func New[Req, Res any](o Options, run Func[Req, Res]) *Batcher[Req, Res] {
	if o.MaxBatch <= 0 {
		o.MaxBatch = 64
	}
	if o.Flushers <= 0 {
		o.Flushers = 2
	}
	return &Batcher[Req, Res]{run: run, maxBatch: o.MaxBatch, flushers: o.Flushers, linger: o.Linger,
		sizes: batchSize.WithLabelValues(o.Name), fallbackCounter: fallbacks.WithLabelValues(o.Name)}
}

// Do queues req and waits for its answer. A request whose ctx has ended by
// the time its batch is formed is answered with ctx's error and left out.
// If ctx ends while the batch holding the request is being written, Do
// returns ctx's error at once and the request may or may not take effect:
// callers make their requests idempotent (keys) so that asking again tells.
func (b *Batcher[Req, Res]) Do(ctx context.Context, req Req) (Res, error) {
	it := &item[Req, Res]{ctx: ctx, req: req, done: make(chan Result[Res], 1)}
	b.mu.Lock()
	b.queue = append(b.queue, it)
	if b.running < b.flushers {
		b.running++
		go b.flush()
	}
	b.mu.Unlock()
	select {
	case r := <-it.done:
		return r.Value, r.Err
	case <-ctx.Done():
		var zero Res
		return zero, ctx.Err()
	}
}

// flush writes batches until the queue is empty.
func (b *Batcher[Req, Res]) flush() {
	for {
		b.mu.Lock()
		if b.linger > 0 && b.lastBatch > 1 && len(b.queue) > 0 && len(b.queue) < b.maxBatch {
			// Let the batch fill: the callers that just got their answers
			// are about to ask again. Only under concurrency (the last
			// batch had company): a lone caller never waits.
			b.mu.Unlock()
			time.Sleep(b.linger)
			b.mu.Lock()
		}
		n := min(len(b.queue), b.maxBatch)
		if n == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		b.lastBatch = n
		batch := make([]*item[Req, Res], n)
		copy(batch, b.queue)
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.mu.Unlock()
		b.write(batch)
	}
}

func (b *Batcher[Req, Res]) write(batch []*item[Req, Res]) {
	live := batch[:0]
	for _, it := range batch {
		if err := it.ctx.Err(); err != nil {
			it.done <- Result[Res]{Err: err}
			continue
		}
		live = append(live, it)
	}
	if len(live) == 0 {
		return
	}
	b.batches.Add(1)
	b.requests.Add(int64(len(live)))
	b.sizes.Observe(float64(len(live)))
	reqs := make([]Req, len(live))
	for i, it := range live {
		reqs[i] = it.req
	}
	var results []Result[Res]
	func() {
		defer func() {
			if p := recover(); p != nil {
				// A panic in a batch is a bug; it becomes every caller's
				// error (as River turns a worker's panic into a failed job)
				// instead of killing the process from a goroutine no caller
				// owns.
				results = nil
				err := &PanicError{Value: p, Stack: debug.Stack()}
				for range live {
					results = append(results, Result[Res]{Err: err})
				}
			}
		}()
		results = b.run(context.WithoutCancel(live[0].ctx), reqs)
	}()
	for i, it := range live {
		if i < len(results) {
			it.done <- results[i]
		} else {
			it.done <- Result[Res]{Err: errShortAnswer}
		}
	}
}

// PanicError is every caller's error when the Func panicked on their batch.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("groupcommit: batch panicked: %v", e.Value) }

var errShortAnswer = errors.New("groupcommit: batch function answered fewer requests than it was given")
