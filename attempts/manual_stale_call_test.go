package attempts

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// R18, R25, R11: the process died between a call and its record, so
// call_count > calls_recorded for ever (nothing records a call whose
// process is gone). The sweeper makes the attempt unknown, and for a
// provider that cannot look up by reference Resolve sends it to review.
// Once the call has lasted StaleCallAfter (no call can still be on its
// way) and the consistency window has passed, the operator, holding the
// provider's statements, may record it failed: a human decides, and the
// reserve is not held for ever. (Before StaleCallAfter the same decision
// is refused: TestManualFailRefusedWhileCallInFlight_R22.)
func TestOperatorMayFailACallLeftStaleByACrash_R18_R25(t *testing.T) {
	t.Parallel()
	caps := stdCaps()
	caps.LookupByReference = false
	h := setup(t, harnessOpts{caps: &caps, plan: []behaviour{behave500NoRecord},
		tune: func(c *Config) { c.StaleCallAfter = 5 * time.Minute }})
	a := h.open(newSubject())
	h.svc.hookAfterCall = func(Attempt) error { return errCrash }
	_, err := h.svc.Execute(h.ctx, a.ID)
	require.ErrorIs(t, err, errCrash)
	h.svc.hookAfterCall = nil

	h.clock.Advance(6 * time.Minute)
	sr, err := h.svc.Sweep(h.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, sr.StaleToUnknown)
	rr, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.True(t, rr.Attempt.Review, "no lookup: review and reconciliation decide (R25)")
	require.True(t, rr.Attempt.CallInFlight(), "the dead process's call is never recorded")

	// Three days later, with the provider's statement as evidence.
	h.clock.Advance(72 * time.Hour)
	_, err = h.svc.ResolveManually(h.ctx, a.ID, StatusFailed, "op_1",
		"provider statements of the last 3 days list nothing under this reference",
		[]byte(`{"statements":["2026-03-02","2026-03-03","2026-03-04"]}`))
	t.Logf("manual failed, 3 days after the crash: err=%v", err)
	assert.NoError(t, err, "a human must be able to decide (R18, R25) once no call can still be on its way")
	assert.Equal(t, StatusFailed, h.get(a.ID).Status)
	h.requireNoViolations()
}
