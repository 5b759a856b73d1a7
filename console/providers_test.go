package console_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// Issue 20: the providers page shows each provider's circuit per operation;
// after calls without an answer, pix_transfer's circuit shows open.
func TestProvidersPageShowsCircuits(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true, breaker: attempts.BreakerConfig{Window: time.Minute, MinCalls: 2,
		FailureRate: 1, OpenFor: time.Minute}})
	op := e.client()
	op.signIn(e.secret["operator"])
	res, body := op.get("/console/providers")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "pix_transfer")
	require.NotContains(t, body, `circuit-open`)

	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable}))
	for range 2 {
		p, err := e.e.Payouts.CreatePayout(e.ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
			Amount: money.MustParse("1.00", "BRL"), Destination: pixDestination()})
		require.NoError(t, err)
		r, err := e.e.Attempts.Execute(e.ctx, *p.CurrentAttemptID)
		require.NoError(t, err)
		require.Equal(t, attempts.StatusUnknown, r.Attempt.Status)
	}
	res, body = op.get("/console/providers")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `<td>pix_transfer</td><td class="circuit-open">open</td>`)

	m := e.client()
	m.signIn(e.secret["m1"])
	res, _ = m.get("/console/providers")
	require.NotEqual(t, http.StatusOK, res.StatusCode, "merchants do not see providers")
}
