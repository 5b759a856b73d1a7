package attempts

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// R12 (every call recorded, once): the one-by-one redo of a record batch
// that answered an error records a call only while the attempt shows it
// unrecorded under the row lock. recordedAfterAll reads without a lock, so
// a batch whose COMMIT was still running then (its answer lost) has
// recorded the call by the time the redo runs: the redo must not add a
// second call event or owner work.
func TestRecordOneSkipsACallRecordedMeanwhile_R12(t *testing.T) {
	h := setup(t, harnessOpts{})
	a := h.open(newSubject())
	res, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusSucceeded, res.Attempt.Status)
	calls := func() int {
		n := 0
		for _, e := range h.events(a.ID) {
			if e.Type == EventCall {
				n++
			}
		}
		return n
	}
	require.Equal(t, 1, calls())

	// The redo, with the attempt as it was read before the batch's COMMIT
	// finished: call 1 marked, not recorded. The provider replays its
	// answer for the key.
	stale := a
	stale.CallCount = 1
	sr := h.prov.Submit(h.ctx, providers.SubmitRequest{Operation: providers.Operation(a.Operation),
		IdempotencyKey: a.IdempotencyKey, Reference: a.Reference, Payload: a.Payload})
	out, err := h.svc.recordOne(h.ctx, recordReq{a: stale, callNo: 1, sr: sr, outcome: Classify(sr)})
	require.NoError(t, err)
	require.Equal(t, StatusSucceeded, out.a.Status)
	require.Equal(t, 1, calls(), "the call is recorded once")
	require.Equal(t, []string{"succeeded"}, h.ownerEffects(a.ID))
	h.requireNoViolations()
}
