package attempts

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// gatedProvider holds each Submit before it reaches the PSP until gate is
// closed: the request is still on its way (slow network, a provider that
// takes long to accept) while the database shows the call in flight.
type gatedProvider struct {
	*testProvider
	started chan struct{}
	gate    chan struct{}
}

func (p *gatedProvider) Submit(ctx context.Context, req providers.SubmitRequest) providers.SubmitResult {
	p.started <- struct{}{}
	<-p.gate
	return p.testProvider.Submit(ctx, req)
}

// R11, R16, R22: a "not found" proves nothing while a call may still be on
// its way to the provider. Execute turns a pending attempt whose call is in
// flight unknown at once (the "call still running elsewhere" case: a
// second executor, e.g. River rescuing a job, or an inline Execute racing
// the submit job). The resolver used to count the consistency window from
// unknown_at without asking whether the call was still in flight, so a
// "not found" while the request had not even reached the provider failed
// the attempt (the reserve went back, R22) and the call's success that
// followed was a divergence. notFoundFailure now refuses until the call
// started StaleCallAfter ago and counts the window from then, as
// ResolveManually refuses an in-flight call
// (TestManualFailRefusedWhileCallInFlight_R22).
func TestResolverNeverFailsAttemptWhoseCallIsInFlight_R16_R22(t *testing.T) {
	t.Parallel()
	var gp *gatedProvider
	h := setup(t, harnessOpts{tune: func(c *Config) {
		gp = &gatedProvider{testProvider: c.Providers["fake"].(*testProvider),
			started: make(chan struct{}, 1), gate: make(chan struct{})}
		c.Providers["fake"] = gp
	}})
	a := h.open(newSubject())

	first := make(chan ExecuteResult, 1)
	go func() {
		r, err := h.svc.Execute(h.ctx, a.ID)
		if err != nil {
			t.Errorf("first Execute: %v", err)
		}
		first <- r
	}()
	released := false
	release := func() {
		if !released {
			released = true
			close(gp.gate)
		}
	}
	t.Cleanup(release)
	<-gp.started // call 1 marked in flight, request not yet at the provider

	// A second executor of the same attempt.
	r2, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusUnknown, r2.Attempt.Status)
	require.True(t, r2.Attempt.CallInFlight())

	// The first lookup is due (30 s) and the consistency window (2 m)
	// has passed since unknown_at: the call is still in flight.
	h.clock.Advance(3 * time.Minute)
	rr, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	statusWhileInFlight := rr.Attempt.Status

	// The request reaches the provider, which pays.
	release()
	r1 := <-first
	t.Logf("first Execute: outcome %s, attempt %s, diverged_at %v", r1.Outcome, h.get(a.ID).Status, h.get(a.ID).DivergedAt)

	require.NotEqual(t, StatusFailed, statusWhileInFlight,
		"the resolver failed the attempt (reserve released) while its call was still in flight")
	require.Equal(t, []string{"succeeded"}, h.ownerEffects(a.ID))
}
