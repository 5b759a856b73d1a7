package payouts_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// R6, R8: a split of three legs: leg 0 paid, leg 1 failed (not found past
// the window), leg 2 unknown. Eight concurrent retries of leg 1 open exactly
// one new attempt (one open attempt per subject, R8, with a new key, R6)
// and reserve once; a retry of the paid leg and of the unknown leg is
// refused. Then the provider's late success for leg 1's first attempt races
// the execution of its retry: whichever order, the retry is never paid once
// the divergence is recorded before its call, and the books stay whole.
func TestConcurrentRetriesOfAFailedLegOpenOneAttempt_R6_R8(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	legs := []payouts.SplitLeg{
		{Operation: providers.OpPixTransfer, Amount: brl("10.00"), Destination: pixTo("a@example.com")},
		{Operation: providers.OpPixTransfer, Amount: brl("20.00"), Destination: pixTo("b@example.com")},
		{Operation: providers.OpPixTransfer, Amount: brl("30.00"), Destination: pixTo("c@example.com")},
	}
	sp, err := e.svc.CreateSplit(e.ctx, payouts.SplitRequest{MerchantID: merchant, Legs: legs})
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, e.execute(sp.Legs[0]).Status)
	first := e.attempt(sp.Legs[1])
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: first.Reference}))
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: e.attempt(sp.Legs[2]).Reference}))
	require.Equal(t, attempts.StatusUnknown, e.execute(sp.Legs[1]).Status)
	require.Equal(t, attempts.StatusUnknown, e.execute(sp.Legs[2]).Status)
	require.Equal(t, attempts.StatusFailed, e.resolveAfter(sp.Legs[1], time.Hour).Attempt.Status)
	av, res := e.balances()
	require.Equal(t, "60.00/30.00", av+"/"+res)

	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok []payouts.Payout
	var other []error
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := e.svc.Retry(e.ctx, merchant, sp.Legs[1].ID)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				ok = append(ok, p)
			} else if !errors.Is(err, payouts.ErrNotRetryable) {
				other = append(other, err)
			}
		}()
	}
	wg.Wait()
	require.Empty(t, other)
	require.Len(t, ok, 1, "exactly one retry opens an attempt")
	av, res = e.balances()
	require.Equal(t, "40.00/50.00", av+"/"+res)
	_, err = e.svc.Retry(e.ctx, merchant, sp.Legs[0].ID)
	require.ErrorIs(t, err, payouts.ErrNotRetryable)
	_, err = e.svc.Retry(e.ctx, merchant, sp.Legs[2].ID)
	require.ErrorIs(t, err, payouts.ErrNotRetryable)
	got, err := e.svc.GetSplit(e.ctx, merchant, sp.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.SplitProcessing, got.Status)

	// The late success of the first attempt races the retry's execution.
	retried := ok[0]
	wg.Add(2)
	var second attempts.Attempt
	go func() { defer wg.Done(); e.lateSuccess(first, "20.00") }()
	go func() {
		defer wg.Done()
		r, err := e.att.Execute(e.ctx, *retried.CurrentAttemptID)
		if err == nil {
			second = r.Attempt
		}
	}()
	wg.Wait()
	t.Cleanup(func() { e.settleDivergence(first) })
	a2, err := e.att.Get(e.ctx, e.pool, *retried.CurrentAttemptID)
	require.NoError(t, err)
	t.Logf("retry's attempt: %s review=%v, provider operations %d (execute saw %s)", a2.Status, a2.Review, e.opsFor(a2), second.Status)
	if a2.CallCount == 0 {
		require.Zero(t, e.opsFor(a2), "never sent once the divergence was recorded")
		require.True(t, a2.Review)
	}
}
