package payouts_test

import (
	"fmt"
	"sync/atomic"
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

// BenchmarkCreatePayoutParallel is BenchmarkCreatePayout with 16 callers per
// core at once: their opening transactions are group-committed (compare
// ns/op with BenchmarkCreatePayout, measured in the same run).
func BenchmarkCreatePayoutParallel(b *testing.B) { benchParallel(b, false) }

// BenchmarkPayoutEndToEndParallel is BenchmarkPayoutEndToEnd with 16
// callers per core: opens, first sends and records are group-committed.
func BenchmarkPayoutEndToEndParallel(b *testing.B) { benchParallel(b, true) }

// benchParallel creates payouts from 16 goroutines per core and, with
// execute, makes each one's provider call and records it.
func benchParallel(b *testing.B, execute bool) {
	e := setupB(b)
	var n atomic.Int64
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := e.pix("0.01")
			req.ClientKey = fmt.Sprint(n.Add(1))
			p, err := e.svc.CreatePayout(e.ctx, req)
			if err == nil && execute {
				_, err = e.att.Execute(e.ctx, *p.CurrentAttemptID)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}
