// Package replica sends reads that may be a little stale (balances, ledger
// entries, exports, statements, the console's books) to a streaming replica
// of saldo's database, and says in each answer how far behind it may be.
//
// # What the lag means
//
// Every Interval the package samples the primary's WAL insert position
// (pg_current_wal_insert_lsn() less a page header it sits just past, taken
// at local time t; see insertPositionSQL) and then the
// replica's replay position (pg_last_wal_replay_lsn()). A commit was
// acknowledged only after its commit record was inserted, so once the
// replica has replayed past the position sampled at t, it holds every commit
// acknowledged before t. The newest such t is the replica's horizon; the lag
// of an answer is the time from the horizon to the moment the answer was
// chosen: "this answer holds every write acknowledged more than lag ago".
// It is an upper bound, exact to the sampling interval, and it is right on
// an idle primary (no writes: the replica replays up to the sampled position
// and the lag stays near zero, where now() - pg_last_xact_replay_timestamp()
// would grow without end). Only when no sample is old enough (the replica
// is further behind than the samples kept) does the package fall back on the
// commit timestamp of the last replayed transaction.
//
// # When the primary answers instead
//
// A read goes to the primary, counted in saldo_replica_fallbacks_total by
// reason, when:
//   - unavailable: the last measurement failed (the replica is down, refuses
//     connections, does not answer within the timeout) or the server is not
//     in recovery (promoted: it no longer follows the primary);
//   - lagging: the lag is beyond MaxLag (measurements that stop coming in
//     make the lag grow, so a stuck replica is left too);
//   - failed: the replica's answer was a 404 or a 5xx (the replica died
//     between two measurements, a query was cancelled by a recovery conflict,
//     or the row is not there yet): that answer is dropped unsent and the
//     request is served again on the primary, so a replica never causes an
//     error or a false "not found".
//
// Only GETs that read are routed (Route); a request that writes, or that
// must see what its caller just wrote, never calls Route and reads the
// primary.
package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// LagHeader is the response header of every answer served from the replica:
// the lag in seconds, e.g. "0.105" (see the package doc).
const LagHeader = "Saldo-Replica-Lag"

// Defaults.
const (
	DefaultMaxLag   = 5 * time.Second
	DefaultInterval = 100 * time.Millisecond
)

// Fallback reasons (label values of saldo_replica_fallbacks_total).
const (
	ReasonUnavailable = "unavailable"
	ReasonLagging     = "lagging"
	ReasonFailed      = "failed"
)

// Config configures Reads. Primary and Replica are required.
type Config struct {
	Primary *pgxpool.Pool
	Replica *pgxpool.Pool
	// MaxLag: a replica further behind is not read (default DefaultMaxLag).
	MaxLag time.Duration
	// Interval between two measurements of the lag (default
	// DefaultInterval). Each costs one tiny query on each server.
	Interval time.Duration
	// Timeout of one measurement (default 1s, at least Interval).
	Timeout time.Duration
	Logger  *slog.Logger
}

// Reads routes reads to the replica while it is fresh enough. A nil *Reads
// routes nothing: every read goes to the primary.
type Reads struct {
	cfg Config
	mu  sync.Mutex
	st  state
	// down is cancelled when a measurement finds the replica unusable
	// (a new one is made when it is usable again): it ends the tries in
	// flight on it, which would otherwise wait on a replica that stopped
	// answering without closing its connections (mu).
	down     context.Context
	markDown context.CancelFunc
	samples  []sample // refresher goroutine only
	stop     chan struct{}
	done     chan struct{}

	nReads     atomic.Uint64
	nFallbacks [3]atomic.Uint64 // by reasons' index

	reads     prometheus.Counter
	fallbacks *prometheus.CounterVec
	lagGauge  prometheus.GaugeFunc
	upGauge   prometheus.GaugeFunc
}

// state is the last measurement.
type state struct {
	measured bool
	ok       bool      // the replica answered and is in recovery
	horizon  time.Time // the replica holds every commit acknowledged before it (zero: unknown)
	problem  string    // why not ok, for the log
}

type sample struct {
	at  time.Time
	lsn int64
}

// New starts measuring the replica's lag (one goroutine) and returns the
// router; Close stops it. The first measurement is made before New returns,
// so the first request already knows whether the replica is usable.
func New(cfg Config) (*Reads, error) {
	if cfg.Primary == nil || cfg.Replica == nil {
		return nil, errors.New("replica: Config.Primary and Config.Replica are required")
	}
	if cfg.MaxLag <= 0 {
		cfg.MaxLag = DefaultMaxLag
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	cfg.Timeout = max(cfg.Timeout, cfg.Interval)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	rd := &Reads{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}
	rd.down, rd.markDown = context.WithCancel(context.Background())
	rd.reads = prometheus.NewCounter(prometheus.CounterOpts{Name: "saldo_replica_reads_total",
		Help: "Requests answered from the read replica."})
	rd.fallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "saldo_replica_fallbacks_total",
		Help: "Requests routed to the read replica but answered by the primary, by reason: unavailable, lagging, failed."},
		[]string{"reason"})
	for _, r := range reasons {
		rd.fallbacks.WithLabelValues(r)
	}
	rd.lagGauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "saldo_replica_lag_seconds",
		Help: "How far behind the read replica may be (every commit acknowledged longer ago is on it); -1 when unknown."},
		func() float64 {
			lag, known := rd.Lag()
			if !known {
				return -1
			}
			return lag.Seconds()
		})
	rd.upGauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "saldo_replica_up",
		Help: "1 when the last measurement of the read replica succeeded and it is a standby, else 0."},
		func() float64 {
			rd.mu.Lock()
			defer rd.mu.Unlock()
			if rd.st.ok {
				return 1
			}
			return 0
		})
	rd.refresh()
	go rd.loop()
	return rd, nil
}

var reasons = [3]string{ReasonUnavailable, ReasonLagging, ReasonFailed}

// Stats counts the routed requests since New.
type Stats struct {
	// Reads answered from the replica.
	Reads uint64
	// Fallbacks answered by the primary, by reason.
	Fallbacks map[string]uint64
}

// Stats returns the counts (the same as the metrics).
func (rd *Reads) Stats() Stats {
	s := Stats{Reads: rd.nReads.Load(), Fallbacks: map[string]uint64{}}
	for i, r := range reasons {
		s.Fallbacks[r] = rd.nFallbacks[i].Load()
	}
	return s
}

func (rd *Reads) fallback(reason string) {
	for i, r := range reasons {
		if r == reason {
			rd.nFallbacks[i].Add(1)
		}
	}
	rd.fallbacks.WithLabelValues(reason).Inc()
}

// Collectors are the router's metrics, for a Prometheus registry.
func (rd *Reads) Collectors() []prometheus.Collector {
	return []prometheus.Collector{rd.reads, rd.fallbacks, rd.lagGauge, rd.upGauge}
}

// Close stops the measurements. It does not close the pools.
func (rd *Reads) Close() {
	if rd == nil {
		return
	}
	select {
	case <-rd.stop:
	default:
		close(rd.stop)
	}
	<-rd.done
}

// MaxLag is the configured bound.
func (rd *Reads) MaxLag() time.Duration { return rd.cfg.MaxLag }

// Lag is how far behind the replica may be now, and whether that is known
// (false: the replica is unavailable or no horizon is known).
func (rd *Reads) Lag() (time.Duration, bool) {
	rd.mu.Lock()
	st := rd.st
	rd.mu.Unlock()
	if !st.ok || st.horizon.IsZero() {
		return 0, false
	}
	return max(time.Since(st.horizon), 0), true
}

func (rd *Reads) loop() {
	defer close(rd.done)
	t := time.NewTicker(rd.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-rd.stop:
			return
		case <-t.C:
			rd.refresh()
		}
	}
}

// refresh makes one measurement and publishes it.
func (rd *Reads) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), rd.cfg.Timeout)
	defer cancel()
	rd.publish(rd.measure(ctx))
}

// publish makes st the state routed reads see; a replica found unusable
// ends the tries in flight on it (they are served again on the primary).
func (rd *Reads) publish(st state) {
	rd.mu.Lock()
	prev := rd.st
	rd.st = st
	if !st.ok {
		rd.markDown()
	} else if rd.down.Err() != nil {
		rd.down, rd.markDown = context.WithCancel(context.Background())
	}
	rd.mu.Unlock()
	switch {
	case st.ok && (!prev.measured || !prev.ok):
		rd.cfg.Logger.Info("replica: reads go to the read replica", "max_lag", rd.cfg.MaxLag.String())
	case !st.ok && (!prev.measured || prev.ok || prev.problem != st.problem):
		rd.cfg.Logger.Warn("replica: read replica unusable; reads go to the primary", "problem", st.problem)
	}
}

// insertPositionSQL is the primary's WAL insert position, less the page
// header it may sit just past. With nothing inserted yet on the current
// page, pg_current_wal_insert_lsn() names the first byte after the page's
// header (24 bytes; 40 at the start of a segment), where no record can end,
// while a replica that has replayed everything stops at the page boundary:
// after a segment switch (archive_timeout, pg_switch_wal) an idle primary
// stays there, and the replica would count as lagging until the next write
// (TestIdlePrimaryAfterSegmentSwitch).
// With it, the primary's cluster identity and current timeline (the first
// eight hex digits of its current WAL file's name), which the replica must
// share (followingSQL).
const insertPositionSQL = `SELECT l - CASE WHEN l % pg_size_bytes(current_setting('wal_segment_size')) = 40 THEN 40
	                     WHEN l % current_setting('wal_block_size')::bigint = 24 THEN 24 ELSE 0 END,
	       (SELECT system_identifier FROM pg_control_system()),
	       ('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::bigint
	FROM (SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint AS l) p`

// followingSQL is what the replica says of itself: in recovery, how far it
// replayed and when its last replayed commit was made, and its cluster
// identity and the timeline of its latest restartpoint. A standby of
// another cluster, or one left on an old timeline by a failover (it
// followed the old primary and holds WAL the new one never had), does not
// follow the primary, however far its replay position reaches.
const followingSQL = `SELECT pg_is_in_recovery(), (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint,
	extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp())::float8,
	(SELECT system_identifier FROM pg_control_system()), (SELECT timeline_id FROM pg_control_checkpoint())::bigint`

func (rd *Reads) measure(ctx context.Context) state {
	t0 := time.Now()
	var insertLSN, primarySystem, primaryTimeline int64
	if err := rd.cfg.Primary.QueryRow(ctx, insertPositionSQL).Scan(&insertLSN, &primarySystem, &primaryTimeline); err != nil {
		// Without the primary's position there is no horizon to measure
		// against; the primary's own trouble is reported by the primary's
		// requests, but the replica is not read without a measurement.
		return state{measured: true, problem: "primary position: " + err.Error()}
	}
	var inRecovery bool
	var replay *int64
	var replayAge *float64
	var system, timeline int64
	err := rd.cfg.Replica.QueryRow(ctx, followingSQL).Scan(&inRecovery, &replay, &replayAge, &system, &timeline)
	t1 := time.Now()
	if err != nil {
		return state{measured: true, problem: err.Error()}
	}
	switch {
	case !inRecovery || replay == nil:
		return state{measured: true, problem: "the server is not in recovery (not a standby, or promoted): it does not follow the primary"}
	case system != primarySystem:
		return state{measured: true, problem: "the server is a standby of another cluster (system identifier): it does not follow the primary"}
	case timeline != primaryTimeline:
		return state{measured: true, problem: fmt.Sprintf("the server is on timeline %d, the primary on %d (a failover, or a "+
			"restartpoint still to come): it may hold WAL the primary does not have", timeline, primaryTimeline)}
	}
	rd.samples = append(rd.samples, sample{at: t0, lsn: insertLSN})
	// Keep samples back to twice the bound: an older horizon means the
	// replica is not read anyway.
	keepFrom := t1.Add(-2 * rd.cfg.MaxLag)
	i := 0
	for i < len(rd.samples)-1 && rd.samples[i].at.Before(keepFrom) {
		i++
	}
	rd.samples = rd.samples[i:]
	if len(rd.samples) > 4096 {
		rd.samples = rd.samples[len(rd.samples)-4096:]
	}
	st := state{measured: true, ok: true}
	for j := len(rd.samples) - 1; j >= 0; j-- {
		if rd.samples[j].lsn <= *replay {
			st.horizon = rd.samples[j].at
			break
		}
	}
	if st.horizon.IsZero() && replayAge != nil {
		// Further behind than the samples kept: the last replayed commit's
		// time (on the servers' clocks) is the best bound known.
		st.horizon = t1.Add(-time.Duration(*replayAge * float64(time.Second)))
	}
	return st
}

// pick decides where a routed read goes: the replica with its lag, or the
// primary (the fallback counted).
func (rd *Reads) pick() (time.Duration, context.Context, bool) {
	rd.mu.Lock()
	st, down := rd.st, rd.down
	rd.mu.Unlock()
	if !st.ok {
		rd.fallback(ReasonUnavailable)
		return 0, nil, false
	}
	if st.horizon.IsZero() {
		rd.fallback(ReasonLagging)
		return 0, nil, false
	}
	lag := max(time.Since(st.horizon), 0)
	if lag > rd.cfg.MaxLag {
		rd.fallback(ReasonLagging)
		return 0, nil, false
	}
	return lag, down, true
}

type ctxKey struct{}

// chosen is what Route puts in a request it sends to the replica.
type chosen struct {
	pool *pgxpool.Pool
	lag  time.Duration
}

// DB is the pool a routed request reads: the replica when Route chose it,
// else primary. Handlers of routed requests read through DB; everything else
// keeps using the primary.
func DB(ctx context.Context, primary *pgxpool.Pool) *pgxpool.Pool {
	if c, ok := ctx.Value(ctxKey{}).(chosen); ok {
		return c.pool
	}
	return primary
}

// FromReplica reports whether Route sent this request to the replica, and
// the lag it will answer with (LagHeader), for pages that show it.
func FromReplica(ctx context.Context) (time.Duration, bool) {
	c, ok := ctx.Value(ctxKey{}).(chosen)
	return c.lag, ok
}

// FormatLag is the LagHeader value of lag: seconds with millisecond
// precision, rounded up (the header is an upper bound).
func FormatLag(lag time.Duration) string {
	ms := (lag + time.Millisecond - 1) / time.Millisecond
	return strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64)
}

// Route is the middleware of a read that may be stale: while the replica is
// usable it serves next with DB(ctx) = the replica and sets LagHeader on the
// answer; otherwise next reads the primary. A replica answer that is a 404
// or a 5xx is dropped unsent and the request is served again on the primary
// (the handler must only read: Route is for GETs). A nil *Reads returns next.
func (rd *Reads) Route(next http.Handler) http.Handler {
	if rd == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lag, down, ok := rd.pick()
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		saved := w.Header().Clone()
		tw := &tryWriter{ResponseWriter: w, lag: lag}
		// A try that has sent nothing yet ends when a measurement finds the
		// replica unusable (and the primary answers): a replica that stops
		// answering without closing its connections would otherwise hold
		// the request until the client gives up. An answer already going
		// out (a CSV export) is left to finish.
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(down, func() {
			if !tw.sent.Load() {
				cancel()
			}
		})()
		next.ServeHTTP(tw, r.WithContext(context.WithValue(ctx, ctxKey{}, chosen{pool: rd.cfg.Replica, lag: lag})))
		if !tw.dropped {
			if !tw.decided {
				tw.decide(http.StatusOK) // a handler that wrote nothing: an empty 200
			}
			rd.nReads.Add(1)
			rd.reads.Inc()
			return
		}
		h := w.Header()
		clear(h)
		for k, v := range saved {
			h[k] = v
		}
		if r.Context().Err() != nil {
			// The client went away (or the request's time ran out) during
			// the try: not the replica's failure, and the primary would
			// fail the same way. The status alone goes out, for the log.
			w.WriteHeader(tw.status)
			return
		}
		rd.fallback(ReasonFailed)
		rd.cfg.Logger.WarnContext(r.Context(), "replica: the replica's answer was dropped; the primary answers",
			"path", r.URL.Path, "status", tw.status)
		next.ServeHTTP(w, r)
	})
}

// tryWriter holds a replica answer back until its status is known: a 404 or
// a 5xx is dropped (nothing reaches the client), anything else goes out
// with LagHeader.
type tryWriter struct {
	http.ResponseWriter
	lag     time.Duration
	decided bool
	dropped bool
	status  int
	sent    atomic.Bool // decided and kept: read by Route's AfterFunc
}

func (w *tryWriter) decide(code int) {
	if w.decided {
		return
	}
	w.decided, w.status = true, code
	if code == http.StatusNotFound || code >= 500 {
		w.dropped = true
		return
	}
	w.sent.Store(true)
	w.ResponseWriter.Header().Set(LagHeader, FormatLag(w.lag))
	w.ResponseWriter.WriteHeader(code)
}

func (w *tryWriter) WriteHeader(code int) {
	if code >= 100 && code < 200 {
		return // informational answers are not forwarded from a try
	}
	w.decide(code)
}

func (w *tryWriter) Write(b []byte) (int, error) {
	w.decide(http.StatusOK)
	if w.dropped {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Flush lets streaming handlers (CSV export) flush.
func (w *tryWriter) Flush() {
	if !w.decided || w.dropped {
		return
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *tryWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
