package attempts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// TestSimSoak drives many attempts against the simulated PSP with random
// faults on every endpoint (resets after the request was read, hangs and
// 500s after processing, 503s, 429s, slow answers, failing lookups),
// eventual consistency on lookups, and duplicated, reordered webhooks racing
// the resolver. Time moves with one manual clock shared by the PSP and the
// service. At the end, for every attempt: it is final (or in review), the
// owner heard exactly once, and our status matches what the PSP actually
// executed; and the PSP never moved money twice for one reference.
func TestSimSoak(t *testing.T) {
	t.Parallel()
	for _, noKeys := range []bool{false, true} {
		t.Run(fmt.Sprintf("no_idempotency=%v", noKeys), func(t *testing.T) {
			t.Parallel()
			simSoak(t, noKeys)
		})
	}
}

func simSoak(t *testing.T, noKeys bool) {
	ctx := context.Background()
	pool := testdb.New(t)
	createOwnerEffects(t, pool)
	clock := newFakeClock()
	owner := &ownerRecorder{calls: map[uuid.UUID][]Status{}}

	var svc *Service
	var prov *sim.Provider
	var svcReady sync.WaitGroup
	svcReady.Add(1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		svcReady.Wait()
		body, _ := io.ReadAll(r.Body)
		ev, err := prov.ParseWebhook(r.Header, body, clock.Now())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, err = svc.ResolveByReference(r.Context(), ResolveInput{Reference: ev.Reference, State: ev.State,
			ProviderID: ev.ProviderID, FailureCode: ev.FailureCode, FailureReason: ev.FailureReason,
			Source: SourceWebhook, Actor: ev.ID})
		if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrProviderIDMismatch) {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)

	server := sim.NewServer(sim.Config{
		Seed: soakSeed(), Clock: clock.Now, NoIdempotency: noKeys, LookupLag: 20 * time.Second,
		SettleAfter: 90 * time.Second, HangFor: 10 * simReadTimeout,
		Random: sim.FaultProfile{ResetBefore: 0.08, HangAfter: 0.08, ErrorAfter: 0.08, Unavailable: 0.05,
			RateLimit: 0.08, Slow: 0.05, LookupFail: 0.1, SlowDelay: 20 * time.Millisecond},
		WebhookURL: hook.URL, WebhookSecret: "whsec_test", WebhookDuplicateRate: 0.3, WebhookReorderRate: 0.3,
		WebhookHoldMax: 50 * time.Millisecond,
	}).Start()
	t.Cleanup(server.Close)
	prov = server.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ConnectTimeout: time.Second,
		ReadTimeout: simReadTimeout}))

	var err error
	svc, err = New(Config{Pool: pool, Providers: map[string]providers.Provider{"sim": prov}, Clock: clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxLookups: 500})
	require.NoError(t, err)
	for _, k := range Kinds {
		svc.RegisterOwner(k, owner)
	}
	svcReady.Done()

	const n = 30
	var ids []uuid.UUID
	for i := range n {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			a, err := svc.Open(ctx, tx, OpenParams{Kind: KindPixTransfer, SubjectID: fmt.Sprintf("tr_%d", i), Provider: "sim",
				Input: providers.OperationInput{Operation: providers.OpPixTransfer, Amount: fmt.Sprintf("%d.10", i+1),
					Currency: "BRL", Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: fmt.Sprintf("p%d@example.com", i)}}}})
			ids = append(ids, a.ID)
			return err
		}))
	}

	open := func() []uuid.UUID {
		var out []uuid.UUID
		for _, id := range ids {
			a, err := svc.Get(ctx, pool, id)
			require.NoError(t, err)
			if a.Status.Open() && !a.Review {
				out = append(out, id)
			}
		}
		return out
	}
	for round := 0; round < 400 && len(open()) > 0; round++ {
		var wg sync.WaitGroup
		for _, id := range open() {
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, err := svc.Execute(ctx, id)
				assert.NoError(t, err) // not require: FailNow only from the test goroutine
			}()
			go func() {
				defer wg.Done()
				_, err := svc.Resolve(ctx, id)
				assert.NoError(t, err)
			}()
		}
		wg.Wait()
		_, err := svc.Sweep(ctx)
		require.NoError(t, err)
		clock.Advance(15 * time.Second)
	}
	require.NoError(t, server.FlushWebhooks(ctx))

	require.Empty(t, server.Duplicates(), "the PSP never moved money twice for one reference")
	stats := map[string]int{}
	for _, id := range ids {
		a, err := svc.Get(ctx, pool, id)
		require.NoError(t, err)
		ops := server.Operations(a.Reference)
		succeeded := 0
		for _, op := range ops {
			if op.State == providers.StateSucceeded {
				succeeded++
			}
		}
		require.LessOrEqual(t, succeeded, 1, a.Reference)
		switch {
		case a.Status == StatusSucceeded:
			require.Equal(t, 1, succeeded, "succeeded attempt %s without a PSP operation", a.ID)
			require.Equal(t, []Status{StatusSucceeded}, owner.calls[a.ID])
		case a.Status == StatusFailed:
			require.Zero(t, succeeded, "failed attempt %s but the PSP moved the money", a.ID)
			require.Equal(t, []Status{StatusFailed}, owner.calls[a.ID])
		default:
			require.True(t, a.Review, "attempt %s still %s and not in review", a.ID, a.Status)
			require.Empty(t, owner.calls[a.ID])
		}
		stats[string(a.Status)]++
		if a.Review {
			stats["review"]++
		}
	}
	t.Logf("no_idempotency=%v: %v", noKeys, stats)
	vs, err := Verify(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, vs)
}

// soakSeed is the PSP's seed: ATTEMPTS_SOAK_SEED, or 7.
func soakSeed() int64 {
	var s int64 = 7
	if v := os.Getenv("ATTEMPTS_SOAK_SEED"); v != "" {
		_, _ = fmt.Sscan(v, &s)
	}
	return s
}
