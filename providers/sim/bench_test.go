package sim_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// BenchmarkSubmit measures the sim's throughput over real HTTP (loopback),
// one new transfer per call, in parallel.
func BenchmarkSubmit(b *testing.B) {
	srv := sim.NewServer(sim.Config{}).Start()
	defer srv.Close()
	p := srv.NewProvider()
	var n atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ref := fmt.Sprintf("bench%020d", n.Add(1))
			body, err := p.EncodePayload(transfer("1.00"), ref)
			if err != nil {
				b.Fatal(err)
			}
			res := p.Submit(b.Context(), providers.SubmitRequest{Operation: providers.OpPixTransfer,
				IdempotencyKey: "k" + ref, Reference: ref, Payload: body})
			if res.Exchange.StatusCode != http.StatusOK {
				b.Fatalf("status %d: %v", res.Exchange.StatusCode, res.Exchange.Err)
			}
		}
	})
	b.StopTimer()
	if d := srv.Duplicates(); len(d) != 0 {
		b.Fatalf("duplicates: %v", d)
	}
}
