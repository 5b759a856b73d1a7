package sim

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Defaults applied by NewServer to zero Config fields.
const (
	DefaultKeyLifetime      = 24 * time.Hour
	DefaultCobExpiry        = time.Hour
	DefaultHangFor          = 2 * time.Minute
	DefaultWebhookRetryBase = 50 * time.Millisecond
	DefaultWebhookAttempts  = 10
	DefaultWebhookTimeout   = 5 * time.Second
	DefaultWebhookHoldMax   = time.Second
	DefaultTickInterval     = 25 * time.Millisecond
	// DefaultBalance is the platform balance of every supported currency
	// when Config.Balances is nil.
	DefaultBalance = "1000000000.00"
	// DefaultSignatureTolerance is how far a webhook timestamp may be from
	// the receiver's clock.
	DefaultSignatureTolerance = 5 * time.Minute
)

// Config configures a Server. The zero value is a well-behaved PSP with
// idempotency keys, no lag, no faults and no webhooks.
type Config struct {
	// Seed for ids, random faults and webhook duplication/reordering.
	Seed int64
	// Clock is the sim's notion of now: key expiry, lookup lag, cob expiry,
	// settlement, operation timestamps and webhook signature timestamps all
	// read it. Default time.Now. It must be safe for concurrent use
	// (ManualClock is). Delays that happen on the wire (slow, hang, webhook
	// delay and backoff) use real time.
	Clock func() time.Time
	// Logger for the server; default discards.
	Logger *slog.Logger

	// KeyLifetime is how long an idempotency key is remembered after its
	// first use. Default 24h.
	KeyLifetime time.Duration
	// NoIdempotency makes the server ignore Idempotency-Key: every send
	// creates a new operation (R20 tests).
	NoIdempotency bool
	// LookupLag is how long a new operation stays invisible to lookups by
	// reference (eventual consistency, R16).
	LookupLag time.Duration
	// ConsistencyWindow is what the server advertises in its capabilities.
	// Default LookupLag + 1s; never less than LookupLag.
	ConsistencyWindow time.Duration
	// SettleAfter keeps pix_transfer and bank_payout in processing this long
	// (sim clock) before they succeed. Zero: they succeed at once.
	SettleAfter time.Duration
	// Balances is the platform balance per currency ("BRL": "1500.00") that
	// outgoing money draws on and charges credit. Nil gives DefaultBalance
	// to every supported currency; a non-nil map gives zero to currencies it
	// does not name.
	Balances map[string]string
	// DefaultCobExpiry is a cob's lifetime when the request names none.
	// Default 1h.
	DefaultCobExpiry time.Duration

	// Faults is the fault script, checked in order before random faults.
	Faults []FaultRule
	// Random is the random fault profile (seeded).
	Random FaultProfile
	// HangFor caps how long hang_after keeps a connection open when the
	// client does not give up first. Default 2m.
	HangFor time.Duration

	// WebhookURL receives events; empty disables webhooks.
	WebhookURL string
	// WebhookSecret signs events (HMAC-SHA256).
	WebhookSecret string
	// WebhookDelay delays every delivery (real time).
	WebhookDelay time.Duration
	// WebhookDuplicateRate is the probability (0..1) that an event is
	// delivered twice.
	WebhookDuplicateRate float64
	// WebhookReorderRate is the probability (0..1) that an event is held back
	// and delivered after the next event.
	WebhookReorderRate float64
	// WebhookRetryBase is the first retry delay after a failed delivery; it
	// doubles per attempt up to 5s. Default 50ms.
	WebhookRetryBase time.Duration
	// WebhookMaxAttempts bounds deliveries of one copy of an event. Default 10.
	WebhookMaxAttempts int
	// WebhookTimeout bounds one delivery. Default 5s.
	WebhookTimeout time.Duration
	// WebhookHoldMax is how long a held-back (reordered) event waits for a
	// next event before it is sent anyway. Default 1s.
	WebhookHoldMax time.Duration

	// TickInterval is how often (real time) the server re-reads its clock to
	// settle operations and expire cobs. Default 25ms.
	TickInterval time.Duration
}

func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.KeyLifetime <= 0 {
		c.KeyLifetime = DefaultKeyLifetime
	}
	if c.LookupLag < 0 {
		c.LookupLag = 0
	}
	if c.ConsistencyWindow <= 0 {
		c.ConsistencyWindow = c.LookupLag + time.Second
	}
	if c.ConsistencyWindow < c.LookupLag {
		c.ConsistencyWindow = c.LookupLag
	}
	if c.DefaultCobExpiry <= 0 {
		c.DefaultCobExpiry = DefaultCobExpiry
	}
	if c.HangFor <= 0 {
		c.HangFor = DefaultHangFor
	}
	if c.WebhookRetryBase <= 0 {
		c.WebhookRetryBase = DefaultWebhookRetryBase
	}
	if c.WebhookMaxAttempts <= 0 {
		c.WebhookMaxAttempts = DefaultWebhookAttempts
	}
	if c.WebhookTimeout <= 0 {
		c.WebhookTimeout = DefaultWebhookTimeout
	}
	if c.WebhookHoldMax <= 0 {
		c.WebhookHoldMax = DefaultWebhookHoldMax
	}
	if c.TickInterval <= 0 {
		c.TickInterval = DefaultTickInterval
	}
	return c
}

// ManualClock is a clock tests move by hand. Safe for concurrent use.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock starts a clock at t.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{now: t} }

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// ValidateBalances checks a Config.Balances map: supported currencies and
// non-negative amounts with the currency's decimals.
func ValidateBalances(b map[string]string) error {
	for c, v := range b {
		if _, ok := currencyDecimals[c]; !ok {
			return fmt.Errorf("sim: balance in unsupported currency %q (supported: %v)", c, sortedCurrencies())
		}
		if v == "0" {
			continue
		}
		if _, aerr := parseAmount("balance", v, c); aerr != nil {
			return fmt.Errorf("sim: balance %s: %s", c, aerr.Message)
		}
	}
	return nil
}
