package ledger

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

func samples(t *testing.T, outcome string) uint64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, postDuration.WithLabelValues(outcome).(prometheus.Histogram).Write(&m))
	return m.GetHistogram().GetSampleCount()
}

// Each write is observed once, under the label of its outcome.
func TestObservePostLabelsOutcomes(t *testing.T) {
	cases := []struct {
		outcome string
		tx      Transaction
		err     error
	}{
		{"posted", Transaction{}, nil},
		{"replayed", Transaction{Replayed: true}, nil},
		{"refused", Transaction{}, &InsufficientFundsError{}},
		{"error", Transaction{}, errors.New("connection reset")},
	}
	for _, c := range cases {
		before := samples(t, c.outcome)
		observePost(time.Now(), c.tx, c.err)
		require.Equal(t, before+1, samples(t, c.outcome), c.outcome)
	}
}
