package sim_test

import (
	"context"
	"fmt"
	"time"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// A server that processes a transfer, then fails with 500: the re-send with
// the same key replays the 500 (R14), a lookup finds the operation, and the
// oracle counts one payment.
func Example() {
	srv := sim.NewServer(sim.Config{Seed: 1, Faults: []sim.FaultRule{{Kind: sim.FaultErrorAfter, Nth: 1}}}).Start()
	defer srv.Close()
	p := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: 5 * time.Second}))

	const ref = "3f2a6c1e9b8d4e7fa0c5d2b1e4f6a8c9"
	body, err := p.EncodePayload(providers.OperationInput{
		Operation: providers.OpPixTransfer, Amount: "150.00", Currency: "BRL",
		Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}},
	}, ref)
	if err != nil {
		panic(err)
	}
	req := providers.SubmitRequest{Operation: providers.OpPixTransfer, IdempotencyKey: "idem-1", Reference: ref, Payload: body}
	first := p.Submit(context.Background(), req)
	again := p.Submit(context.Background(), req)
	found, _ := p.Lookup(context.Background(), providers.OpPixTransfer, ref)

	fmt.Println(first.Exchange.StatusCode, again.Exchange.StatusCode, again.Exchange.Header.Get("Idempotent-Replayed"))
	fmt.Println(found.Found, found.State, found.Amount)
	fmt.Println(len(srv.Operations(ref)), "operation,", len(srv.Duplicates()), "duplicates")
	// Output:
	// 500 500 true
	// true succeeded 150.00
	// 1 operation, 0 duplicates
}
