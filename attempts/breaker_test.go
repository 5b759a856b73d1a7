package attempts

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Issue 20: a circuit opens on too many calls without an answer, holds
// calls back for OpenFor, lets one probe out half-open, and closes on an
// answer or opens again on a failure. Definitive answers count as the
// provider being up.
func TestBreakerOpensHalfOpensAndCloses(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := newBreakers(BreakerConfig{Window: time.Minute, MinCalls: 4, FailureRate: 0.5, OpenFor: 30 * time.Second},
		clock, slog.New(slog.NewTextHandler(io.Discard, nil)))
	const p, op = "psp", "pix_transfer"
	require.True(t, b.allClosed())
	b.record(p, op, OutcomeSucceeded)
	b.record(p, op, OutcomeFailed) // a decline: the provider answered
	b.record(p, op, OutcomeUnknown)
	require.True(t, b.allClosed(), "3 calls: below MinCalls")
	b.record(p, op, OutcomeNotSent)
	require.False(t, b.allClosed(), "2 of 4 without an answer: open")
	require.Equal(t, CircuitOpen, b.circuits[circuitKey{p, op}].state)
	ok, wait := b.allow(p, op)
	require.False(t, ok)
	require.Equal(t, 30*time.Second, wait)
	require.True(t, b.isOpen(p, op))
	ok, _ = b.allow(p, "card_charge")
	require.True(t, ok, "circuits are per operation")
	ok, _ = b.allow("other", op)
	require.True(t, ok, "and per provider")

	clock.Advance(30 * time.Second)
	ok, _ = b.allow(p, op)
	require.True(t, ok, "half-open: one probe")
	ok, _ = b.allow(p, op)
	require.False(t, ok, "only one")
	b.record(p, op, OutcomeUnknown)
	require.Equal(t, CircuitOpen, b.circuits[circuitKey{p, op}].state, "the probe failed: open again")

	clock.Advance(31 * time.Second)
	ok, _ = b.allow(p, op)
	require.True(t, ok)
	b.record(p, op, OutcomeRateLimited) // an answer
	require.Equal(t, CircuitClosed, b.circuits[circuitKey{p, op}].state)
	require.True(t, b.allClosed())

	// Old failures leave the window.
	for range 3 {
		b.record(p, op, OutcomeUnknown)
	}
	clock.Advance(2 * time.Minute)
	b.record(p, op, OutcomeUnknown)
	require.True(t, b.allClosed(), "the first three are out of the window")
}

// A probe that never reports (its executor died) is replaced after OpenFor.
func TestBreakerLostProbeIsReplaced(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := newBreakers(BreakerConfig{Window: time.Minute, MinCalls: 1, FailureRate: 1, OpenFor: 10 * time.Second},
		clock, slog.New(slog.NewTextHandler(io.Discard, nil)))
	b.record("psp", "refund", OutcomeUnknown)
	clock.Advance(10 * time.Second)
	ok, _ := b.allow("psp", "refund")
	require.True(t, ok)
	clock.Advance(5 * time.Second)
	ok, _ = b.allow("psp", "refund")
	require.False(t, ok)
	clock.Advance(5 * time.Second)
	ok, _ = b.allow("psp", "refund")
	require.True(t, ok, "a new probe once the lost one is OpenFor old")
}

// While a provider's circuit is open, an attempt due to call waits (it is
// snoozed, stays pending, nothing is sent, nothing fails); after OpenFor its
// probe call goes out and closes the circuit.
func TestOpenCircuitHoldsSendsBack(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{plan: []behaviour{behave500NoRecord}, tune: func(c *Config) {
		c.Breaker = BreakerConfig{Window: time.Minute, MinCalls: 2, FailureRate: 1, OpenFor: 30 * time.Second}
	}})
	for range 2 {
		a := h.open(newSubject())
		res, err := h.svc.Execute(h.ctx, a.ID)
		require.NoError(t, err)
		require.True(t, res.Sent)
		require.Equal(t, StatusUnknown, res.Attempt.Status)
	}
	require.Equal(t, CircuitOpen, h.svc.Circuit("fake", "pix_transfer"))
	a := h.open(newSubject())
	res, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, res.Sent)
	require.Positive(t, res.RetryIn)
	require.Equal(t, StatusPending, res.Attempt.Status)
	require.Zero(t, h.get(a.ID).CallCount, "no call started")
	require.Equal(t, 2, h.psp.totalSubmits())

	h.psp.setPlan(behaveOK)
	h.clock.Advance(30 * time.Second)
	res, err = h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.True(t, res.Sent)
	require.Equal(t, StatusSucceeded, res.Attempt.Status)
	require.Equal(t, CircuitClosed, h.svc.Circuit("fake", "pix_transfer"))
	h.requireNoViolations()
}

// Issue 14: one call whose credentials the provider refused opens that
// provider's circuit for the operation at once (no MinCalls: every later
// call would be refused too), leaves its other operations and other
// providers alone, and a refused probe opens it again.
func TestBreakerOpensAtOnceOnRefusedCredentials(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := newBreakers(BreakerConfig{Window: time.Minute, MinCalls: 50, FailureRate: 0.5, OpenFor: 30 * time.Second},
		clock, slog.New(slog.NewTextHandler(io.Discard, nil)))
	const p, op = "stripe", "bank_payout"
	b.record(p, op, OutcomeSucceeded)
	b.record(p, op, OutcomeAuthRefused)
	require.Equal(t, CircuitOpen, b.circuits[circuitKey{p, op}].state, "one refusal opens it")
	require.True(t, b.isOpen(p, op))
	require.False(t, b.isOpen(p, "card_charge"), "a 403 on payouts says nothing of charges")
	require.False(t, b.isOpen("pix", op))
	clock.Advance(30 * time.Second)
	ok, _ := b.allow(p, op)
	require.True(t, ok, "half-open: one probe")
	b.record(p, op, OutcomeAuthRefused)
	require.Equal(t, CircuitOpen, b.circuits[circuitKey{p, op}].state, "still refused: open again")
	clock.Advance(30 * time.Second)
	ok, _ = b.allow(p, op)
	require.True(t, ok)
	b.record(p, op, OutcomeProcessing)
	require.Equal(t, CircuitClosed, b.circuits[circuitKey{p, op}].state, "the key works again: closed")
}
