package attempts

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// BreakerConfig configures the circuit breakers, one per provider and
// operation, that keep saldo from calling a provider that is down
// (issue 20). Over the last Window, when at least MinCalls calls were made
// and at least FailureRate of them could not get an answer (not sent:
// connect refused, DNS, TLS; unknown: timeouts, cuts, 5xx), the circuit
// opens: no call is made for OpenFor, and attempts due to call wait (they
// are snoozed, never failed). Then it is half-open: one probe call goes
// out; an answer closes the circuit, another failure opens it again.
// Definitive answers (succeeded, failed, processing, 409, 429) show the
// provider is up. Lookups are never held back: they are how unknowns end.
//
// A call whose credentials the provider refused (OutcomeAuthRefused: 401,
// 403) opens its circuit at once, whatever the window holds: one refusal
// is a diagnosis, not a statistic, and every later call would be refused
// the same way until an operator acts. The circuit is the provider's and
// that operation's, like any other: a wrong or revoked key (401) opens
// each operation's circuit at that operation's first refused call (one
// refused request per operation, nothing processed), while a key lacking
// one permission (403, e.g. a restricted key without payouts) holds only
// the operations it cannot do, and new work for them routes to the next
// provider of their route. The half-open probe after OpenFor tells when
// the key works again.
//
// The zero BreakerConfig turns the breakers off.
type BreakerConfig struct {
	Window      time.Duration
	MinCalls    int
	FailureRate float64
	OpenFor     time.Duration
}

func (c BreakerConfig) enabled() bool {
	return c.Window > 0 && c.MinCalls > 0 && c.FailureRate > 0 && c.OpenFor > 0
}

// CircuitState is a breaker's state.
type CircuitState string

// Circuit states.
const (
	CircuitClosed   CircuitState = "closed"
	CircuitOpen     CircuitState = "open"
	CircuitHalfOpen CircuitState = "half_open"
)

// circuitGauge: 0 closed, 1 half-open, 2 open, by provider and operation
// (bounded: the configured providers times the known operations).
var circuitGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "saldo_provider_circuit_state",
	Help: "Circuit breaker state per provider and operation: 0 closed, 1 half-open, 2 open.",
}, []string{"provider", "operation"})

// BreakerCollectors returns the breakers' metrics, for a registry.
func BreakerCollectors() []prometheus.Collector { return []prometheus.Collector{circuitGauge} }

type circuitKey struct{ provider, operation string }

type circuit struct {
	state    CircuitState
	calls    []callMark // within the window, oldest first
	openedAt time.Time
	probing  bool      // half-open: the probe call is out
	probeAt  time.Time // when it was let out (a probe that never reports is replaced after OpenFor)
}

type callMark struct {
	at     time.Time
	failed bool
}

// breakers holds every circuit of a Service (process-local state).
type breakers struct {
	cfg   BreakerConfig
	clock Clock
	log   *slog.Logger

	mu       sync.Mutex
	circuits map[circuitKey]*circuit
	open     int // circuits not closed, for a cheap "all closed" check
}

func newBreakers(cfg BreakerConfig, clock Clock, log *slog.Logger) *breakers {
	return &breakers{cfg: cfg, clock: clock, log: log, circuits: map[circuitKey]*circuit{}}
}

// allClosed reports whether no circuit is open or half-open (Execute's
// fast path needs no per-attempt check then).
func (b *breakers) allClosed() bool {
	if !b.cfg.enabled() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open == 0
}

// allow reports whether a call to provider for operation may go out now,
// and otherwise how long to wait. A half-open circuit lets one probe out.
func (b *breakers) allow(provider, operation string) (bool, time.Duration) {
	if !b.cfg.enabled() {
		return true, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.circuits[circuitKey{provider, operation}]
	if c == nil || c.state == CircuitClosed {
		return true, 0
	}
	now := b.clock.Now()
	if c.state == CircuitOpen {
		if wait := c.openedAt.Add(b.cfg.OpenFor).Sub(now); wait > 0 {
			return false, wait
		}
		b.set(provider, operation, c, CircuitHalfOpen, "open for its time: one probe call may go")
	}
	if c.probing && now.Sub(c.probeAt) < b.cfg.OpenFor {
		return false, b.cfg.OpenFor / 4
	}
	c.probing, c.probeAt = true, now
	return true, 0
}

// isOpen reports whether new work should route around provider for
// operation (open, or half-open with its probe out).
func (b *breakers) isOpen(provider, operation string) bool {
	if !b.cfg.enabled() {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.circuits[circuitKey{provider, operation}]
	return c != nil && c.state != CircuitClosed &&
		(c.state == CircuitOpen && b.clock.Now().Before(c.openedAt.Add(b.cfg.OpenFor)) || c.probing)
}

// record counts one call's outcome.
func (b *breakers) record(provider, operation string, o Outcome) {
	if !b.cfg.enabled() {
		return
	}
	failed := o == OutcomeNotSent || o == OutcomeUnknown
	refused := o == OutcomeAuthRefused
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	k := circuitKey{provider, operation}
	c := b.circuits[k]
	if c == nil {
		c = &circuit{state: CircuitClosed}
		b.circuits[k] = c
	}
	switch c.state {
	case CircuitHalfOpen:
		if !c.probing {
			return // a call that started before the circuit opened
		}
		c.probing = false
		if failed || refused {
			c.openedAt = now
			b.set(provider, operation, c, CircuitOpen, "the probe call failed: open again")
			return
		}
		c.calls = c.calls[:0]
		b.set(provider, operation, c, CircuitClosed, "the probe call got an answer: closed")
		return
	case CircuitOpen:
		return // calls that started before it opened
	}
	if refused {
		c.openedAt = now
		b.set(provider, operation, c, CircuitOpen, "the provider refused saldo's credentials")
		return
	}
	c.calls = append(c.calls, callMark{at: now, failed: failed})
	cut := 0
	for cut < len(c.calls) && now.Sub(c.calls[cut].at) > b.cfg.Window {
		cut++
	}
	c.calls = c.calls[cut:]
	if len(c.calls) < b.cfg.MinCalls {
		return
	}
	n := 0
	for _, m := range c.calls {
		if m.failed {
			n++
		}
	}
	if float64(n)/float64(len(c.calls)) >= b.cfg.FailureRate {
		c.openedAt = now
		b.set(provider, operation, c, CircuitOpen, "too many calls without an answer")
	}
}

// set moves c to state (under mu), keeping the open count, the gauge and
// the log.
func (b *breakers) set(provider, operation string, c *circuit, state CircuitState, why string) {
	if c.state == state {
		return
	}
	if c.state == CircuitClosed {
		b.open++
	}
	if state == CircuitClosed {
		b.open--
	}
	from := c.state
	c.state = state
	circuitGauge.WithLabelValues(provider, operation).Set(map[CircuitState]float64{
		CircuitClosed: 0, CircuitHalfOpen: 1, CircuitOpen: 2}[state])
	level := slog.LevelWarn
	if state == CircuitClosed {
		level = slog.LevelInfo
	}
	b.log.Log(context.Background(), level, "provider circuit "+string(state), "provider", provider,
		"operation", operation, "from", from, "why", why)
}

// CircuitOpen reports whether new operations should route around provider
// for op: its circuit is open (or half-open with its probe out).
func (s *Service) CircuitOpen(provider, op string) bool { return s.breakers.isOpen(provider, op) }

// Circuit returns the state of the circuit of provider and op.
func (s *Service) Circuit(provider, op string) CircuitState {
	s.breakers.mu.Lock()
	defer s.breakers.mu.Unlock()
	if c := s.breakers.circuits[circuitKey{provider, op}]; c != nil {
		return c.state
	}
	return CircuitClosed
}

// CircuitStatus is one circuit's state, for operators.
type CircuitStatus struct {
	Provider  string
	Operation string
	State     CircuitState
	// Calls and Failed in the breaker's window (closed circuits).
	Calls, Failed int
	// OpenedAt: when it last opened (zero if never).
	OpenedAt time.Time
}

// Circuits lists the circuit of every configured provider and operation it
// supports, sorted, as this process sees them (the breakers are per
// process).
func (s *Service) Circuits() []CircuitStatus {
	names := slices.Sorted(maps.Keys(s.providers))
	b := s.breakers
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []CircuitStatus
	for _, name := range names {
		for _, op := range s.providers[name].Capabilities().Operations {
			cs := CircuitStatus{Provider: name, Operation: string(op), State: CircuitClosed}
			if c := b.circuits[circuitKey{name, string(op)}]; c != nil {
				cs.State, cs.OpenedAt, cs.Calls = c.state, c.openedAt, len(c.calls)
				for _, m := range c.calls {
					if m.failed {
						cs.Failed++
					}
				}
			}
			out = append(out, cs)
		}
	}
	return out
}
