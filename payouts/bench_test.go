package payouts_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers/sim"
)

// BenchmarkCreatePayout measures the opening transaction alone: payout row,
// attempt (key, reference, payload, submit job) and reserve, one commit.
func BenchmarkCreatePayout(b *testing.B) {
	e := setupB(b)
	b.ResetTimer()
	for i := range b.N {
		req := e.pix("0.01")
		req.ClientKey = fmt.Sprint(i)
		_, err := e.svc.CreatePayout(e.ctx, req)
		require.NoError(b, err)
	}
}

// BenchmarkPayoutEndToEnd measures open + one provider call + record
// (settle), sequentially, with the sim in process.
func BenchmarkPayoutEndToEnd(b *testing.B) {
	e := setupB(b)
	b.ResetTimer()
	for i := range b.N {
		req := e.pix("0.01")
		req.ClientKey = fmt.Sprint(i)
		p, err := e.svc.CreatePayout(e.ctx, req)
		require.NoError(b, err)
		_, err = e.att.Execute(e.ctx, *p.CurrentAttemptID)
		require.NoError(b, err)
	}
}

func setupB(b *testing.B) *env {
	return setupTB(b, sim.Config{}, "1000000.00")
}
