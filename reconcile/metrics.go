package reconcile

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// divergencesDesc is saldo_reconcile_divergences{provider,kind}: the open
// divergences, read from the database at each scrape (so an operator's
// resolution in another process shows at once). Labels are bounded: the
// configured providers that publish statements, and the fixed kinds.
var divergencesDesc = prometheus.NewDesc("saldo_reconcile_divergences",
	"Open reconciliation divergences by provider and kind (alert on any critical kind: paid_but_failed, unknown_to_us, double_payment).",
	[]string{"provider", "kind"}, nil)

// Collector returns the service's Prometheus collector, for registration.
func (s *Service) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Service }

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- divergencesDesc }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	provs := c.s.Providers()
	if len(provs) == 0 {
		return
	}
	counts, err := c.s.OpenCounts(context.Background())
	if err != nil {
		c.s.log.Warn("reconcile: metrics: open divergences not counted", "error", err)
		ch <- prometheus.NewInvalidMetric(divergencesDesc, err)
		return
	}
	for _, p := range provs {
		for _, k := range Kinds {
			ch <- prometheus.MustNewConstMetric(divergencesDesc, prometheus.GaugeValue, float64(counts[p][k]), p, string(k))
		}
	}
}

// OpenCounts counts the open divergences by provider and kind.
func (s *Service) OpenCounts(ctx context.Context) (map[string]map[Kind]int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT provider, kind, count(*) FROM reconcile_divergences WHERE status = 'open'
		GROUP BY provider, kind`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]map[Kind]int{}
	for rows.Next() {
		var p string
		var k Kind
		var n int
		if err := rows.Scan(&p, &k, &n); err != nil {
			return nil, err
		}
		if out[p] == nil {
			out[p] = map[Kind]int{}
		}
		out[p][k] = n
	}
	return out, rows.Err()
}
