package sim_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// reset_before: the request was written, then the connection died; nothing
// was processed, so a re-send with the same key creates the operation once.
func TestFaultResetBefore(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{})
	a := open(t, p, transfer("10.00"))
	require.NoError(t, srv.AddFault(sim.FaultRule{Kind: sim.FaultResetBefore, Reference: a.ref, Nth: 1}))

	res := a.send(p) // fresh connection: net/http does not replay it
	ex := res.Exchange
	require.Error(t, ex.Err)
	require.True(t, ex.Connected)
	require.True(t, ex.Wrote, "the whole request left before the reset")
	require.Equal(t, 1, ex.WireCalls)
	require.False(t, ex.Timeout)
	require.Zero(t, ex.StatusCode)
	require.Empty(t, srv.Operations(a.ref), "reset before processing")

	again := a.send(p)
	require.Equal(t, http.StatusOK, again.Exchange.StatusCode)
	require.Len(t, srv.Operations(a.ref), 1)
}

// docs/pitfalls.md: on a reused keep-alive connection, Go's Transport silently
// replays a POST carrying Idempotency-Key when the connection dies before
// any answer. Exchange.WireCalls shows it; the key keeps it harmless.
func TestFaultResetOnReusedConnectionIsReplayedByTransport(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{})
	warm := open(t, p, transfer("1.00"))
	require.Equal(t, http.StatusOK, warm.send(p).Exchange.StatusCode) // leaves an idle connection

	a := open(t, p, transfer("10.00"))
	require.NoError(t, srv.AddFault(sim.FaultRule{Kind: sim.FaultResetBefore, Reference: a.ref, Nth: 1}))
	res := a.send(p)
	require.Equal(t, 2, res.Exchange.WireCalls, "the transport replayed the request on a new connection")
	require.Equal(t, http.StatusOK, res.Exchange.StatusCode)
	require.Len(t, srv.Operations(a.ref), 1)
}

// hang_after: processed, then no answer: the client times out (unknown); a
// re-send with the key replays the real answer.
func TestFaultHangAfter(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{}, sim.WithHTTPSettings(providers.HTTPSettings{ConnectTimeout: time.Second,
		ReadTimeout: 200 * time.Millisecond}))
	a := open(t, p, transfer("10.00"))
	require.NoError(t, srv.AddFault(sim.FaultRule{Kind: sim.FaultHangAfter, Reference: a.ref, Nth: 1}))

	start := time.Now()
	res := a.send(p)
	ex := res.Exchange
	require.Less(t, time.Since(start), 2*time.Second)
	require.Error(t, ex.Err)
	require.True(t, ex.Timeout)
	require.True(t, ex.Wrote)
	require.Zero(t, ex.StatusCode)
	ops := srv.Operations(a.ref)
	require.Len(t, ops, 1, "processed before hanging")

	again := a.send(p)
	require.Equal(t, http.StatusOK, again.Exchange.StatusCode)
	require.Equal(t, "true", again.Exchange.Header.Get("Idempotent-Replayed"))
	require.Equal(t, ops[0].ID, again.ProviderID)
	require.Len(t, srv.Operations(a.ref), 1)
}

// hang_after with a Delay shorter than the client's patience: the
// connection is reset after the delay.
func TestFaultHangAfterBoundedDelay(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{})
	a := open(t, p, transfer("10.00"))
	require.NoError(t, srv.AddFault(sim.FaultRule{Kind: sim.FaultHangAfter, Reference: a.ref,
		Delay: sim.Duration(50 * time.Millisecond)}))
	res := a.send(p)
	require.Error(t, res.Exchange.Err)
	require.False(t, res.Exchange.Timeout)
	require.Zero(t, res.Exchange.StatusCode)
	require.Len(t, srv.Operations(a.ref), 1)
}

// unavailable: 503 and nothing processed or stored.
func TestFaultUnavailable(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{})
	a := open(t, p, transfer("10.00"))
	require.NoError(t, srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: a.ref, Nth: 1}))
	res := a.send(p)
	require.Equal(t, http.StatusServiceUnavailable, res.Exchange.StatusCode)
	require.NoError(t, res.Exchange.Err)
	require.True(t, res.Exchange.Wrote)
	require.Empty(t, srv.Operations(a.ref))

	again := a.send(p)
	require.Equal(t, http.StatusOK, again.Exchange.StatusCode)
	require.Empty(t, again.Exchange.Header.Get("Idempotent-Replayed"), "the 503 was not stored")
	require.Len(t, srv.Operations(a.ref), 1)
}

// rate_limit: 429 with Retry-After, nothing processed.
func TestFaultRateLimit(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{})
	a := open(t, p, transfer("10.00"))
	require.NoError(t, srv.AddFault(sim.FaultRule{Kind: sim.FaultRateLimit, Reference: a.ref, Nth: 1,
		RetryAfter: sim.Duration(2 * time.Second)}))
	res := a.send(p)
	require.Equal(t, http.StatusTooManyRequests, res.Exchange.StatusCode)
	require.Equal(t, 2*time.Second, res.Exchange.RetryAfter)
	require.Equal(t, providers.RefineRateLimited, res.Refinement)
	require.Empty(t, srv.Operations(a.ref))
	require.Equal(t, http.StatusOK, a.send(p).Exchange.StatusCode)
}

// slow: the answer comes late but normal.
func TestFaultSlow(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{})
	a := open(t, p, transfer("10.00"))
	require.NoError(t, srv.AddFault(sim.FaultRule{Kind: sim.FaultSlow, Reference: a.ref,
		Delay: sim.Duration(150 * time.Millisecond)}))
	start := time.Now()
	res := a.send(p)
	require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
	require.Equal(t, http.StatusOK, res.Exchange.StatusCode)
	require.Equal(t, providers.StateSucceeded, res.State)
}

// slow past the client's read timeout: the client sees a timeout, yet the
// operation was processed (the PSP kept working).
func TestFaultSlowPastReadTimeout(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{}, sim.WithHTTPSettings(providers.HTTPSettings{ConnectTimeout: time.Second,
		ReadTimeout: 100 * time.Millisecond}))
	a := open(t, p, transfer("10.00"))
	require.NoError(t, srv.AddFault(sim.FaultRule{Kind: sim.FaultSlow, Reference: a.ref,
		Delay: sim.Duration(300 * time.Millisecond)}))
	res := a.send(p)
	require.True(t, res.Exchange.Timeout)
	require.Zero(t, res.Exchange.StatusCode)
	require.Eventually(t, func() bool { return len(srv.Operations(a.ref)) == 1 }, 30*time.Second, 5*time.Millisecond)
}

// lookup_fail: a lookup answers 500: not "not found".
func TestFaultLookupFail(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{})
	a := open(t, p, transfer("10.00"))
	require.Equal(t, http.StatusOK, a.send(p).Exchange.StatusCode)
	require.NoError(t, srv.AddFault(sim.FaultRule{Kind: sim.FaultLookupFail, Reference: a.ref, Times: 1}))

	lr, err := p.Lookup(context.Background(), providers.OpPixTransfer, a.ref)
	require.NoError(t, err)
	require.Equal(t, http.StatusInternalServerError, lr.Exchange.StatusCode)
	require.False(t, lr.Found)

	lr, err = p.Lookup(context.Background(), providers.OpPixTransfer, a.ref)
	require.NoError(t, err)
	require.True(t, lr.Found, "Times: 1 fired once")
}

// Rules match on operation and fire on the nth matching call only.
func TestFaultNthAndOperationMatch(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{Faults: []sim.FaultRule{
		{Kind: sim.FaultUnavailable, Operation: providers.OpCardCharge, Nth: 2},
	}})
	codes := []int{}
	for range 3 {
		codes = append(codes, open(t, p, cardCharge("5.00", "tok_visa")).send(p).Exchange.StatusCode)
	}
	require.Equal(t, []int{200, 503, 200}, codes)
	require.Equal(t, http.StatusOK, open(t, p, transfer("1.00")).send(p).Exchange.StatusCode)
	_ = srv
}

// Random faults and ids are a function of the seed and the request sequence.
func TestRandomFaultsAreDeterministic(t *testing.T) {
	t.Parallel()
	run := func(seed int64) (codes []int, ids []string) {
		srv, p := setup(t, sim.Config{Seed: seed, Random: sim.FaultProfile{Unavailable: 0.3, RateLimit: 0.2, ErrorAfter: 0.1}})
		for i := range 40 {
			ref := fmt.Sprintf("ref%04d", i)
			body, err := p.EncodePayload(transfer("1.00"), ref)
			require.NoError(t, err)
			res := p.Submit(context.Background(), providers.SubmitRequest{Operation: providers.OpPixTransfer,
				IdempotencyKey: "key" + ref, Reference: ref, Payload: body})
			codes = append(codes, res.Exchange.StatusCode)
		}
		for _, o := range srv.AllOperations() {
			ids = append(ids, o.ID)
		}
		return codes, ids
	}
	c1, ids1 := run(7)
	c2, ids2 := run(7)
	c3, _ := run(8)
	require.Equal(t, c1, c2)
	require.Equal(t, ids1, ids2)
	require.NotEqual(t, c1, c3)
	require.Contains(t, c1, 503)
	require.Contains(t, c1, 429)
	require.Contains(t, c1, 500)
	require.Contains(t, c1, 200)
}

func TestFaultScriptFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "faults.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"rules": [
		{"kind": "slow", "operation": "pix_transfer", "delay": "20ms"},
		{"kind": "rate_limit", "reference": "abc", "nth": 2, "retry_after": "3s"},
		{"kind": "lookup_fail", "times": 2}
	]}`), 0o600))
	rules, err := sim.LoadFaults(path)
	require.NoError(t, err)
	require.Len(t, rules, 3)
	require.Equal(t, sim.Duration(20*time.Millisecond), rules[0].Delay)
	require.Equal(t, 2, rules[1].Nth)

	rules, err = sim.ParseFaults([]byte(`[{"kind":"error_after"}]`))
	require.NoError(t, err)
	require.Len(t, rules, 1)

	for _, bad := range []string{
		`[{"kind":"explode"}]`,
		`[{"kind":"slow","delay":5}]`,
		`[{"kind":"slow","bogus":1}]`,
		`[{"kind":"lookup_fail","on":"submit"}]`,
		`[{"kind":"slow","operation":"teleport"}]`,
		`{"rules": [{"kind":"slow","nth":-1}]}`,
		`not json`,
	} {
		_, err := sim.ParseFaults([]byte(bad))
		require.Error(t, err, bad)
	}

	prof, err := sim.ParseFaultProfile("error_after=0.02, reset_before=0.01")
	require.NoError(t, err)
	require.Equal(t, 0.02, prof.ErrorAfter)
	require.Equal(t, 0.01, prof.ResetBefore)
	_, err = sim.ParseFaultProfile("error_after=2")
	require.Error(t, err)
	_, err = sim.ParseFaultProfile("meteor=0.1")
	require.Error(t, err)
}

// Close ends a hanging request at once.
func TestCloseEndsHangs(t *testing.T) {
	t.Parallel()
	srv := sim.NewServer(sim.Config{Faults: []sim.FaultRule{{Kind: sim.FaultHangAfter}}}).Start()
	p := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: time.Minute}))
	a := open(t, p, transfer("1.00"))
	done := make(chan providers.SubmitResult, 1)
	go func() { done <- a.send(p) }()
	require.Eventually(t, func() bool { return len(srv.Operations(a.ref)) == 1 }, 30*time.Second, time.Millisecond)
	start := time.Now()
	srv.Close()
	res := <-done
	require.Less(t, time.Since(start), 5*time.Second)
	require.Error(t, res.Exchange.Err)
}
