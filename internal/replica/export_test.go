package replica

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// NewUsable returns a router that takes the replica for usable with no lag,
// without measuring it (no goroutine): tests of Route against a replica that
// fails between two measurements.
func NewUsable(primary, rep *pgxpool.Pool) *Reads {
	rd := &Reads{cfg: Config{Primary: primary, Replica: rep, MaxLag: DefaultMaxLag, Interval: DefaultInterval,
		Timeout: time.Second, Logger: slog.New(slog.DiscardHandler)}, stop: make(chan struct{}), done: make(chan struct{})}
	rd.reads = prometheus.NewCounter(prometheus.CounterOpts{Name: "saldo_replica_reads_total"})
	rd.fallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "saldo_replica_fallbacks_total"}, []string{"reason"})
	rd.st = state{measured: true, ok: true, horizon: time.Now().Add(time.Hour)}
	rd.down, rd.markDown = context.WithCancel(context.Background())
	close(rd.done)
	return rd
}

// SetUnavailable publishes a failed measurement, as the refresher does when
// the replica stops answering.
func (rd *Reads) SetUnavailable() {
	rd.publish(state{measured: true, problem: "test: the replica stopped answering"})
}
