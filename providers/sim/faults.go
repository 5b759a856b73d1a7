package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/saldo/saldo/providers"
)

// FaultKind is one way the sim misbehaves on purpose.
type FaultKind string

// The faults. What a client sees is described per kind; "processed" means an
// operation was executed and recorded (and its response stored under the
// idempotency key).
const (
	// FaultResetBefore: the whole request is read, then the connection is
	// reset (TCP RST) without processing. The client sees a transport error
	// after writing (Wrote true, StatusCode 0, not a timeout). Note: on a
	// reused keep-alive connection Go's Transport may transparently replay a
	// request carrying an Idempotency-Key (Exchange.WireCalls == 2).
	FaultResetBefore FaultKind = "reset_before"
	// FaultHangAfter: processed, then the connection hangs until the client
	// gives up (or HangFor / the rule's Delay passes) and is reset. The client
	// sees a timeout (Timeout true, StatusCode 0). A re-send with the same
	// key replays the real answer.
	FaultHangAfter FaultKind = "hang_after"
	// FaultErrorAfter: processed, then 500. The 500 is what the key stores,
	// so a re-send with the same key replays the 500 (resolve by lookup, R14).
	FaultErrorAfter FaultKind = "error_after"
	// FaultUnavailable: 503 without processing; nothing stored.
	FaultUnavailable FaultKind = "unavailable"
	// FaultRateLimit: 429 with Retry-After (the rule's RetryAfter, default
	// 1s) without processing; nothing stored.
	FaultRateLimit FaultKind = "rate_limit"
	// FaultSlow: waits Delay (default 1s), then answers normally. While it
	// waits the key is in flight: a concurrent request with it gets 409.
	FaultSlow FaultKind = "slow"
	// FaultLookupFail: a lookup by reference answers 500.
	FaultLookupFail FaultKind = "lookup_fail"
)

// Endpoints a fault rule can target.
const (
	OnSubmit = "submit"
	OnLookup = "lookup"
)

var faultKinds = []FaultKind{FaultResetBefore, FaultHangAfter, FaultErrorAfter, FaultUnavailable,
	FaultRateLimit, FaultSlow, FaultLookupFail}

// Valid reports whether k is a known fault.
func (k FaultKind) Valid() bool {
	for _, f := range faultKinds {
		if f == k {
			return true
		}
	}
	return false
}

// Duration is a time.Duration written in JSON as a Go duration string ("2s").
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string such as "250ms".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"2s\": %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("negative duration %q", s)
	}
	*d = Duration(v)
	return nil
}

// FaultRule is one line of a fault script. Empty match fields match
// anything. Rules are checked in order; the first that fires wins.
type FaultRule struct {
	Kind FaultKind `json:"kind"`
	// On is the endpoint: "submit" (default) or "lookup" (default for
	// lookup_fail). lookup_fail only applies to lookups.
	On string `json:"on,omitempty"`
	// Reference and Operation restrict the rule.
	Reference string              `json:"reference,omitempty"`
	Operation providers.Operation `json:"operation,omitempty"`
	// Nth > 0 fires only on the nth request the rule matches (1-based).
	Nth int `json:"nth,omitempty"`
	// Times > 0 limits how often the rule fires (with Nth == 0); 0 means
	// every matching request.
	Times int `json:"times,omitempty"`
	// Delay: for slow, the wait (default 1s); for hang_after, the hang
	// (default Config.HangFor).
	Delay Duration `json:"delay,omitempty"`
	// RetryAfter for rate_limit (default 1s).
	RetryAfter Duration `json:"retry_after,omitempty"`
}

func (r FaultRule) endpoint() string {
	if r.On != "" {
		return r.On
	}
	if r.Kind == FaultLookupFail {
		return OnLookup
	}
	return OnSubmit
}

// Validate reports a rule that cannot work.
func (r FaultRule) Validate() error {
	if !r.Kind.Valid() {
		return fmt.Errorf("sim: unknown fault kind %q", r.Kind)
	}
	switch r.On {
	case "", OnSubmit, OnLookup:
	default:
		return fmt.Errorf("sim: fault %s: on must be %q or %q, not %q", r.Kind, OnSubmit, OnLookup, r.On)
	}
	if r.Kind == FaultLookupFail && r.endpoint() != OnLookup {
		return fmt.Errorf("sim: fault lookup_fail only applies to lookups")
	}
	if r.Operation != "" && !r.Operation.Valid() {
		return fmt.Errorf("sim: fault %s: unknown operation %q", r.Kind, r.Operation)
	}
	if r.Nth < 0 || r.Times < 0 {
		return fmt.Errorf("sim: fault %s: nth and times must not be negative", r.Kind)
	}
	return nil
}

// ParseFaults reads a fault script: a JSON array of rules, or an object
// {"rules": [...]}. Unknown fields are errors.
func ParseFaults(b []byte) ([]FaultRule, error) {
	b = bytes.TrimSpace(b)
	var rules []FaultRule
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if len(b) > 0 && b[0] == '{' {
		var doc struct {
			Rules []FaultRule `json:"rules"`
		}
		if err := dec.Decode(&doc); err != nil {
			return nil, fmt.Errorf("sim: fault script: %w", err)
		}
		rules = doc.Rules
	} else if err := dec.Decode(&rules); err != nil {
		return nil, fmt.Errorf("sim: fault script: %w", err)
	}
	var errs []error
	for i, r := range rules {
		if err := r.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("rule %d: %w", i, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return rules, nil
}

// LoadFaults reads a fault script file (see ParseFaults).
func LoadFaults(path string) ([]FaultRule, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseFaults(b)
}

// FaultProfile is a random fault profile: each field is the probability
// (0..1) that a request gets that fault. Submits draw among the submit
// faults, lookups among LookupFail, Unavailable and RateLimit. Draws come
// from a generator seeded with Config.Seed.
type FaultProfile struct {
	ResetBefore float64 `json:"reset_before,omitempty"`
	HangAfter   float64 `json:"hang_after,omitempty"`
	ErrorAfter  float64 `json:"error_after,omitempty"`
	Unavailable float64 `json:"unavailable,omitempty"`
	RateLimit   float64 `json:"rate_limit,omitempty"`
	Slow        float64 `json:"slow,omitempty"`
	LookupFail  float64 `json:"lookup_fail,omitempty"`
	// SlowDelay for random slow faults (default 1s).
	SlowDelay time.Duration `json:"-"`
}

// ParseFaultProfile reads "kind=rate,kind=rate" (for example
// "error_after=0.02,reset_before=0.01").
func ParseFaultProfile(s string) (FaultProfile, error) {
	var p FaultProfile
	if strings.TrimSpace(s) == "" {
		return p, nil
	}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return p, fmt.Errorf("sim: fault profile %q: want kind=rate", part)
		}
		var rate float64
		if _, err := fmt.Sscanf(v, "%g", &rate); err != nil || rate < 0 || rate > 1 {
			return p, fmt.Errorf("sim: fault profile %q: rate must be between 0 and 1", part)
		}
		switch FaultKind(k) {
		case FaultResetBefore:
			p.ResetBefore = rate
		case FaultHangAfter:
			p.HangAfter = rate
		case FaultErrorAfter:
			p.ErrorAfter = rate
		case FaultUnavailable:
			p.Unavailable = rate
		case FaultRateLimit:
			p.RateLimit = rate
		case FaultSlow:
			p.Slow = rate
		case FaultLookupFail:
			p.LookupFail = rate
		default:
			return p, fmt.Errorf("sim: fault profile: unknown fault kind %q", k)
		}
	}
	return p, nil
}

func (p FaultProfile) enabled(endpoint string) bool {
	if endpoint == OnLookup {
		return p.LookupFail+p.Unavailable+p.RateLimit > 0
	}
	return p.ResetBefore+p.HangAfter+p.ErrorAfter+p.Unavailable+p.RateLimit+p.Slow > 0
}

// fault is the decision for one request.
type fault struct {
	Kind       FaultKind
	Delay      time.Duration
	RetryAfter time.Duration
	Source     string // "script" or "random"
}

type ruleState struct {
	FaultRule
	matched int
	fired   int
}

// pick decides the fault for one request. Called with the server lock held.
func pickFault(rules []*ruleState, profile FaultProfile, rng *rand.Rand, endpoint, reference string,
	op providers.Operation, hangFor time.Duration) fault {
	for _, r := range rules {
		if r.endpoint() != endpoint {
			continue
		}
		if r.Reference != "" && r.Reference != reference {
			continue
		}
		if r.Operation != "" && r.Operation != op {
			continue
		}
		r.matched++
		if r.Nth > 0 && r.matched != r.Nth {
			continue
		}
		if r.Nth == 0 && r.Times > 0 && r.fired >= r.Times {
			continue
		}
		r.fired++
		return makeFault(r.Kind, time.Duration(r.Delay), time.Duration(r.RetryAfter), hangFor, "script")
	}
	if !profile.enabled(endpoint) {
		return fault{}
	}
	x := rng.Float64()
	type slot struct {
		kind FaultKind
		rate float64
	}
	var slots []slot
	if endpoint == OnLookup {
		slots = []slot{{FaultLookupFail, profile.LookupFail}, {FaultUnavailable, profile.Unavailable},
			{FaultRateLimit, profile.RateLimit}}
	} else {
		slots = []slot{{FaultResetBefore, profile.ResetBefore}, {FaultHangAfter, profile.HangAfter},
			{FaultErrorAfter, profile.ErrorAfter}, {FaultUnavailable, profile.Unavailable},
			{FaultRateLimit, profile.RateLimit}, {FaultSlow, profile.Slow}}
	}
	acc := 0.0
	for _, s := range slots {
		acc += s.rate
		if x < acc {
			return makeFault(s.kind, profile.SlowDelay, 0, hangFor, "random")
		}
	}
	return fault{}
}

func makeFault(kind FaultKind, delay, retryAfter, hangFor time.Duration, source string) fault {
	f := fault{Kind: kind, Delay: delay, RetryAfter: retryAfter, Source: source}
	switch kind {
	case FaultSlow:
		if f.Delay <= 0 {
			f.Delay = time.Second
		}
	case FaultHangAfter:
		if f.Delay <= 0 {
			f.Delay = hangFor
		}
	case FaultRateLimit:
		if f.RetryAfter <= 0 {
			f.RetryAfter = time.Second
		}
	}
	return f
}
