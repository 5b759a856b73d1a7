package attempts

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/stripe"
	"github.com/saldo/saldo/providers/stripe/stripefake"
)

// syncBuffer is a log sink shared by the adapter and the attempts core.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// bodyRecorder forwards to target and keeps every request's
// Idempotency-Key and body, in order.
type bodyRecorder struct {
	mu     sync.Mutex
	keys   []string
	bodies [][]byte
}

func recordInFront(t *testing.T, target string) (string, *bodyRecorder) {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	rec := &bodyRecorder{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, err := io.ReadAll(r.Body)
			require.NoError(t, err)
			rec.mu.Lock()
			rec.keys, rec.bodies = append(rec.keys, r.Header.Get("Idempotency-Key")), append(rec.bodies, b)
			rec.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, rec
}

// Issue 14: Stripe answers 401 to a wrong API key. Nothing was processed,
// so the attempt is neither failed nor unknown: it stays pending and waits
// (AuthRefusedWait, not the rate-limit pace), its calls do not use up
// MaxSends, the breaker opens the provider's circuit for the operation at
// once, saldo_provider_auth_refused_total counts each refusal and an
// ERROR is logged, and the key appears in no log and no stored text. A
// process started with the right key then sends the same attempt (same
// idempotency key, same payload bytes) and Stripe makes one PaymentIntent
// (R5, R12, R14).
func TestStripeWrongKeyAttemptWaitsThenSucceedsOnce_R5_R12_R14(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const goodKey, wrongKey = "sk_test_51GoodKeyAuth0000rightE2E", "sk_test_51WrongKeyAuth999revoked"
	fake := stripefake.New(goodKey)
	t.Cleanup(fake.Close)
	base, rec := recordInFront(t, fake.URL())
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	newStripe := func(key string) *stripe.Provider {
		p, err := stripe.New(stripe.Config{APIKey: providers.Secret(key), BaseURL: base, Logger: log,
			HTTP: providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 10 * time.Second}})
		require.NoError(t, err)
		return p
	}
	pool := testdb.New(t)
	createOwnerEffects(t, pool)
	clock := newFakeClock()
	owner := &ownerRecorder{calls: map[uuid.UUID][]Status{}}
	const wait, openFor = 10 * time.Minute, time.Minute
	newService := func(p providers.Provider, m *Metrics) *Service {
		s, err := New(Config{Pool: pool, Providers: map[string]providers.Provider{"stripe": p}, Clock: clock, Logger: log,
			Metrics: m, MaxSends: 2, AuthRefusedWait: wait,
			Breaker: BreakerConfig{Window: time.Hour, MinCalls: 100, FailureRate: 0.5, OpenFor: openFor}})
		require.NoError(t, err)
		for _, k := range Kinds {
			s.RegisterOwner(k, owner)
		}
		return s
	}
	metrics := NewMetrics()
	wrong := newService(newStripe(wrongKey), metrics)

	var a Attempt
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		a, err = wrong.Open(ctx, tx, OpenParams{Kind: KindCardCharge, SubjectID: newSubject(), Provider: "stripe",
			Input: providers.OperationInput{Operation: providers.OpCardCharge, Amount: "12.34", Currency: "BRL",
				CardToken: stripefake.PMVisa}})
		return err
	}))

	// Three refused calls, MaxSends being 2: each waits, none counts.
	for call := 1; call <= 3; call++ {
		r, err := wrong.Execute(ctx, a.ID)
		require.NoError(t, err)
		require.True(t, r.Sent, "call %d", call)
		require.Equal(t, OutcomeAuthRefused, r.Outcome, "call %d", call)
		require.Equal(t, StatusPending, r.Attempt.Status, "call %d: the attempt waits", call)
		require.GreaterOrEqual(t, r.RetryIn, wait/2, "call %d: not the rate-limit pace", call)
		require.LessOrEqual(t, r.RetryIn, wait)
		require.Equal(t, CircuitOpen, wrong.Circuit("stripe", string(providers.OpCardCharge)), "call %d", call)
		require.Equal(t, float64(call), testCounter(metrics.AuthRefused), "call %d", call)

		// Before the wait is over nothing goes out.
		again, err := wrong.Execute(ctx, a.ID)
		require.NoError(t, err)
		require.False(t, again.Sent)
		require.Positive(t, again.RetryIn)
		require.Equal(t, StatusPending, again.Attempt.Status)
		clock.Advance(wait + openFor)
	}
	got, err := wrong.Get(ctx, pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusPending, got.Status)
	require.Equal(t, 3, got.CallCount)
	require.Empty(t, fake.Objects("payment_intent"), "a refused request processes nothing")
	require.Equal(t, 3, fake.Requests("POST /v1/payment_intents"))
	require.Equal(t, 0, owner.count(a.ID))
	require.Contains(t, logs.String(), "level=ERROR")
	require.Contains(t, logs.String(), "refused saldo's credentials")

	// An operator fixes the key; the process that starts with it sends the
	// very same request once and Stripe makes one PaymentIntent.
	right := newService(newStripe(goodKey), NewMetrics())
	r, err := right.Execute(ctx, a.ID)
	require.NoError(t, err)
	require.True(t, r.Sent)
	require.Equal(t, OutcomeSucceeded, r.Outcome)
	require.Equal(t, StatusSucceeded, r.Attempt.Status)
	require.Regexp(t, `^pi_`, r.Attempt.ProviderID)
	r, err = right.Execute(ctx, a.ID)
	require.NoError(t, err)
	require.False(t, r.Sent, "a succeeded attempt is never sent again")
	require.Len(t, fake.Objects("payment_intent"), 1)
	require.Equal(t, 4, fake.Requests("POST /v1/payment_intents"))
	require.Equal(t, 1, owner.count(a.ID))
	rec.mu.Lock()
	require.Len(t, rec.bodies, 4)
	for i := range rec.bodies {
		require.Equal(t, a.IdempotencyKey, rec.keys[i], "request %d: the attempt's key", i)
		require.Equal(t, a.Payload, rec.bodies[i], "request %d: the stored bytes", i)
	}
	rec.mu.Unlock()
	ev, err := right.Events(ctx, pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"opened", "call:auth_refused", "call:auth_refused", "call:auth_refused", "call:succeeded",
		"transition:pending->succeeded"}, eventTypes(ev))

	// The key is in no log line and no stored text.
	for _, secret := range []string{wrongKey, goodKey} {
		require.NotContains(t, logs.String(), secret)
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM attempts WHERE last_error LIKE '%' || $1 || '%')
			+ (SELECT count(*) FROM attempt_events WHERE error LIKE '%' || $1 || '%' OR reason LIKE '%' || $1 || '%')`,
			secret).Scan(&n))
		require.Zero(t, n)
	}
	require.False(t, strings.Contains(logs.String(), "Bearer"), "no Authorization header logged")
	vs, err := Verify(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, vs)
}
