package attempts

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// testCounter sums every series of a counter vector.
func testCounter(v *prometheus.CounterVec) float64 {
	ch := make(chan prometheus.Metric, 100)
	v.Collect(ch)
	close(ch)
	total := 0.0
	for m := range ch {
		var pb dto.Metric
		_ = m.Write(&pb)
		total += pb.GetCounter().GetValue()
	}
	return total
}

func promGaugeValue(g prometheus.Gauge) float64 {
	var pb dto.Metric
	_ = g.Write(&pb)
	return pb.GetGauge().GetValue()
}
