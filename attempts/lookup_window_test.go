package attempts

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// slowLookupProvider answers each lookup after `took` has passed on the
// service's clock (a slow provider: the read budget is 30 s).
type slowLookupProvider struct {
	*testProvider
	clock *fakeClock
	took  time.Duration
}

func (p *slowLookupProvider) Lookup(ctx context.Context, op providers.Operation, ref string) (providers.LookupResult, error) {
	lr, err := p.testProvider.Lookup(ctx, op, ref)
	p.clock.Advance(p.took)
	return lr, err
}

// R16, R22: a "not found" proves absence only when the provider was asked
// after its consistency window. notFoundFailure used to measure the window
// at the time the answer was recorded (lookupNow, after the exchange), not
// when the provider was asked: a lookup sent 100 s into a 120 s window
// that took 25 s to answer was taken as proof, the attempt failed and its
// reserve released while the provider's search still lagged. The window
// is now measured at lookedUp.asked, taken before the lookup is sent.
func TestNotFoundWindowMeasuredWhenAsked_R16_R22(t *testing.T) {
	t.Parallel()
	caps := stdCaps() // ConsistencyWindow 2 m
	var sp *slowLookupProvider
	h := setup(t, harnessOpts{caps: &caps, plan: []behaviour{behave500AfterRecord}, tune: func(c *Config) {
		c.ResolveSchedule = []time.Duration{100 * time.Second}
		sp = &slowLookupProvider{testProvider: c.Providers["fake"].(*testProvider), took: 25 * time.Second}
		c.Providers["fake"] = sp
	}})
	sp.clock = h.clock
	h.psp.hideUntil = 1000 // the provider holds the operation; its search lags
	a := h.open(newSubject())
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusUnknown, r.Attempt.Status)
	unknownAt := *r.Attempt.UnknownAt

	h.clock.Advance(100 * time.Second) // first lookup due, 20 s before the window ends
	asked := h.clock.Now()
	require.True(t, asked.Before(unknownAt.Add(caps.ConsistencyWindow)))
	rr, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.NotEqual(t, StatusFailed, rr.Attempt.Status,
		"a lookup sent %s after the attempt went unknown (window %s) was taken as proof of absence",
		asked.Sub(unknownAt), caps.ConsistencyWindow)
	require.Empty(t, h.ownerEffects(a.ID))
}

// R16, R22: an operator's "failed" gives the reserve back, so the "not
// found" it rests on must have been asked past the consistency window too.
// ResolveManually used to read the last lookup's recorded time: a lookup
// sent 100 s into a 120 s window and recorded at 125 s let the operator
// fail the attempt without asking again, while the provider held a
// success its search had not shown yet. The lookup event now keeps when
// the provider was asked (started_at), and that is what is compared: this
// lookup proves nothing, ResolveManually asks again, finds the success,
// records it (the provider's word) and refuses the operator's "failed".
func TestManualFailJudgesLookupWhenAsked_R16_R22(t *testing.T) {
	t.Parallel()
	caps := stdCaps() // ConsistencyWindow 2 m
	var sp *slowLookupProvider
	h := setup(t, harnessOpts{caps: &caps, plan: []behaviour{behave500AfterRecord}, tune: func(c *Config) {
		c.ResolveSchedule = []time.Duration{100 * time.Second}
		sp = &slowLookupProvider{testProvider: c.Providers["fake"].(*testProvider), took: 25 * time.Second}
		c.Providers["fake"] = sp
	}})
	sp.clock = h.clock
	h.psp.hideUntil = 1 // the first lookup misses the operation; the next finds it
	a := h.open(newSubject())
	r, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusUnknown, r.Attempt.Status)
	unknownAt := *r.Attempt.UnknownAt

	h.clock.Advance(100 * time.Second)
	rr, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusUnknown, rr.Attempt.Status)
	require.False(t, h.clock.Now().Before(unknownAt.Add(caps.ConsistencyWindow)), "recorded past the window")

	_, err = h.svc.ResolveManually(h.ctx, a.ID, StatusFailed, "op_1", "the provider has nothing", nil)
	require.ErrorIs(t, err, ErrManualFailRefused)
	require.Equal(t, StatusSucceeded, h.get(a.ID).Status, "the lookup's success is applied")
	require.Equal(t, []string{"succeeded"}, h.ownerEffects(a.ID))
	var lookups int
	for _, e := range h.events(a.ID) {
		if e.Type == EventLookup {
			lookups++
		}
	}
	require.Equal(t, 2, lookups, "the operator's decision asked the provider again")
}
