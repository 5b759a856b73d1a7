package sim_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// R14: the first response for a key is replayed; the money moves once.
func TestReplayOfFirstResponse(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{Balances: map[string]string{"BRL": "100.00"}})
	a := open(t, p, transfer("10.00"))

	first := a.send(p)
	require.Equal(t, http.StatusOK, first.Exchange.StatusCode)
	require.Equal(t, providers.StateSucceeded, first.State)
	require.NotEmpty(t, first.ProviderID)
	require.Empty(t, first.Exchange.Header.Get("Idempotent-Replayed"))

	second := a.send(p)
	require.Equal(t, http.StatusOK, second.Exchange.StatusCode)
	require.Equal(t, "true", second.Exchange.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first.ProviderID, second.ProviderID)
	require.Equal(t, first.Exchange.Body, second.Exchange.Body)

	ops := srv.Operations(a.ref)
	require.Len(t, ops, 1)
	require.Equal(t, a.key, ops[0].IdempotencyKey)
	require.Equal(t, "90.00", srv.Balance("BRL"))
	require.Empty(t, srv.Duplicates())
}

// R14: a 500 is replayed too; the operation exists and only a lookup says so.
func TestReplayOf500(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{})
	a := open(t, p, transfer("10.00"))
	require.NoError(t, srv.AddFault(sim.FaultRule{Kind: sim.FaultErrorAfter, Reference: a.ref, Nth: 1}))

	first := a.send(p)
	require.Equal(t, http.StatusInternalServerError, first.Exchange.StatusCode)
	require.NoError(t, first.Exchange.Err)
	require.Empty(t, first.ProviderID)

	second := a.send(p)
	require.Equal(t, http.StatusInternalServerError, second.Exchange.StatusCode, "the stored 500 is replayed")
	require.Equal(t, "true", second.Exchange.Header.Get("Idempotent-Replayed"))

	ops := srv.Operations(a.ref)
	require.Len(t, ops, 1, "processed once, before the 500")
	require.Equal(t, providers.StateSucceeded, ops[0].State)

	lr, err := p.Lookup(context.Background(), providers.OpPixTransfer, a.ref)
	require.NoError(t, err)
	require.True(t, lr.Found)
	require.Equal(t, ops[0].ID, lr.ProviderID)
	require.Equal(t, providers.StateSucceeded, lr.State)
}

// R5: the same key with another payload is refused and creates nothing.
func TestKeyReusedWithDifferentPayload(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{})
	a := open(t, p, transfer("10.00"))
	require.Equal(t, http.StatusOK, a.send(p).Exchange.StatusCode)

	other, err := p.EncodePayload(transfer("10.01"), a.ref)
	require.NoError(t, err)
	res := p.Submit(context.Background(), providers.SubmitRequest{Operation: a.op, IdempotencyKey: a.key,
		Reference: a.ref, Payload: other})
	require.Equal(t, http.StatusBadRequest, res.Exchange.StatusCode)
	require.Equal(t, providers.RefineKeyMisuse, res.Refinement)
	require.Equal(t, "idempotency_key_mismatch", res.FailureCode)
	require.Len(t, srv.Operations(a.ref), 1)
}

// R14: after KeyLifetime a re-send with the same key is a NEW operation.
func TestKeyExpiryCreatesNewOperation(t *testing.T) {
	t.Parallel()
	clock := sim.NewManualClock(t0)
	srv, p := setup(t, sim.Config{Clock: clock.Now, KeyLifetime: time.Hour})
	require.Equal(t, time.Hour, p.Capabilities().KeyLifetime)
	a := open(t, p, transfer("10.00"))
	first := a.send(p)
	require.Equal(t, http.StatusOK, first.Exchange.StatusCode)

	clock.Advance(time.Hour - time.Second)
	replay := a.send(p)
	require.Equal(t, first.ProviderID, replay.ProviderID)
	require.Len(t, srv.Operations(a.ref), 1)

	clock.Advance(time.Second)
	again := a.send(p)
	require.Equal(t, http.StatusOK, again.Exchange.StatusCode)
	require.Empty(t, again.Exchange.Header.Get("Idempotent-Replayed"))
	require.NotEqual(t, first.ProviderID, again.ProviderID, "the key expired: a second payment")
	require.Len(t, srv.Operations(a.ref), 2)
	require.Equal(t, []string{a.ref}, srv.Duplicates())
}

// R20: without idempotency keys every re-send is a new operation.
func TestNoIdempotencyModeDuplicates(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{NoIdempotency: true})
	caps := p.Capabilities()
	require.False(t, caps.IdempotencyKeys)
	require.Zero(t, caps.KeyLifetime)

	a := open(t, p, payout("25.00"))
	r1, r2 := a.send(p), a.send(p)
	require.Equal(t, http.StatusOK, r1.Exchange.StatusCode)
	require.Equal(t, http.StatusOK, r2.Exchange.StatusCode)
	require.NotEqual(t, r1.ProviderID, r2.ProviderID)
	ops := srv.Operations(a.ref)
	require.Len(t, ops, 2)
	for _, o := range ops {
		require.Empty(t, o.IdempotencyKey, "no key was sent or used")
	}
	require.Equal(t, []string{a.ref}, srv.Duplicates())
}

// The adapter sends Idempotency-Key only to a provider that honours keys.
func TestIdempotencyHeaderFollowsCapabilities(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(rec.Close)
	with := sim.NewProvider(rec.URL, sim.WithHTTPSettings(fastHTTP))
	without := sim.NewProvider(rec.URL, sim.WithHTTPSettings(fastHTTP), sim.WithConfig(sim.Config{NoIdempotency: true}))
	a := open(t, with, transfer("1.00"))
	a.send(with)
	a.send(without)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{a.key, ""}, keys)
}

// A second request with a key whose first request is still running gets 409.
func TestConflictWhileKeyInFlight(t *testing.T) {
	t.Parallel()
	// The first request holds its key 3 s (read timeout 10 s), so that the
	// second, sent once the key is in flight, still finds it there on a
	// loaded machine (1 s left little room).
	srv, p := setup(t, sim.Config{}, sim.WithHTTPSettings(providers.HTTPSettings{ConnectTimeout: time.Second,
		ReadTimeout: 10 * time.Second}))
	a := open(t, p, transfer("10.00"))
	require.NoError(t, srv.AddFault(sim.FaultRule{Kind: sim.FaultSlow, Reference: a.ref, Nth: 1,
		Delay: sim.Duration(3 * time.Second)}))

	firstDone := make(chan providers.SubmitResult, 1)
	go func() { firstDone <- a.send(p) }()
	require.Eventually(t, func() bool { return sim.KeyInFlight(srv, a.key) }, 30*time.Second, time.Millisecond)

	second := a.send(p)
	require.Equal(t, http.StatusConflict, second.Exchange.StatusCode)
	require.Equal(t, providers.RefineInFlight, second.Refinement)

	first := <-firstDone
	require.Equal(t, http.StatusOK, first.Exchange.StatusCode)
	require.Len(t, srv.Operations(a.ref), 1)

	third := a.send(p)
	require.Equal(t, first.ProviderID, third.ProviderID)
}

// Many concurrent sends of one attempt: exactly one operation, every answer
// is the replay or a 409.
func TestConcurrentSameKeyExecutesOnce(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{})
	a := open(t, p, transfer("3.00"))
	var wg sync.WaitGroup
	results := make([]providers.SubmitResult, 32)
	for i := range results {
		wg.Go(func() { results[i] = a.send(p) })
	}
	wg.Wait()
	require.Len(t, srv.Operations(a.ref), 1)
	id := srv.Operations(a.ref)[0].ID
	for _, r := range results {
		switch r.Exchange.StatusCode {
		case http.StatusOK:
			require.Equal(t, id, r.ProviderID)
		case http.StatusConflict:
			require.Equal(t, providers.RefineInFlight, r.Refinement)
		default:
			t.Fatalf("unexpected status %d", r.Exchange.StatusCode)
		}
	}
}

// R16: a fresh operation is invisible to lookups for LookupLag.
func TestLookupLag(t *testing.T) {
	t.Parallel()
	clock := sim.NewManualClock(t0)
	srv, p := setup(t, sim.Config{Clock: clock.Now, LookupLag: 30 * time.Second})
	require.GreaterOrEqual(t, p.Capabilities().ConsistencyWindow, 30*time.Second)
	require.True(t, p.Capabilities().LookupByReference)

	a := open(t, p, transfer("12.34"))
	res := a.send(p)
	require.Equal(t, http.StatusOK, res.Exchange.StatusCode)

	lr, err := p.Lookup(context.Background(), providers.OpPixTransfer, a.ref)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, lr.Exchange.StatusCode)
	require.False(t, lr.Found, "not visible yet: not proof of absence")
	require.Len(t, srv.Operations(a.ref), 1, "the oracle sees it at once")

	clock.Advance(29 * time.Second)
	lr, _ = p.Lookup(context.Background(), providers.OpPixTransfer, a.ref)
	require.False(t, lr.Found)

	clock.Advance(time.Second)
	lr, err = p.Lookup(context.Background(), providers.OpPixTransfer, a.ref)
	require.NoError(t, err)
	require.True(t, lr.Found)
	require.Equal(t, res.ProviderID, lr.ProviderID)
	require.Equal(t, providers.StateSucceeded, lr.State)
	require.Equal(t, "12.34", lr.Amount)
	require.Equal(t, "BRL", lr.Currency)

	// An unknown reference is simply not found.
	lr, _ = p.Lookup(context.Background(), providers.OpPixTransfer, newRef())
	require.False(t, lr.Found)
}

// Outgoing money may stay processing (SettleAfter) and settle by the clock.
func TestSettleAfter(t *testing.T) {
	t.Parallel()
	clock := sim.NewManualClock(t0)
	srv, p := setup(t, sim.Config{Clock: clock.Now, SettleAfter: time.Minute})
	a := open(t, p, payout("5.00"))
	res := a.send(p)
	require.Equal(t, providers.StateProcessing, res.State)
	require.Equal(t, []string(nil), srv.Duplicates())
	clock.Advance(time.Minute)
	lr, err := p.Lookup(context.Background(), providers.OpBankPayout, a.ref)
	require.NoError(t, err)
	require.Equal(t, providers.StateSucceeded, lr.State)
}
