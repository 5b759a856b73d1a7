package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers/sim"
)

// "Bad input gets a clear 4xx naming the field and loses nothing" (R9: the
// attempt stays open for a decision with valid evidence): the evidence of a
// manual resolution is free-form JSON stored in a jsonb column, and
// encoding/json accepts what jsonb refuses: a lone UTF-16 surrogate
// ("\ud800") and a number past numeric's range (1e1000000, 1e-1000000).
// attempts.ResolveManually refuses them before anything is written: 400 on
// evidence (it was a 500 from the failed INSERT).
func TestResolutionEvidenceJSONBRefusalIs400(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	p := e.createPix("30.00", "rv-ev-1")
	a := e.attemptOf(p)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: a.Reference}))
	res, err := e.att.Execute(e.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, res.Attempt.Status)
	e.clock.Advance(10 * time.Minute) // past the window: a manual failed is allowed (the lookup finds nothing)
	path := "/v1/attempts/" + a.ID.String() + "/resolution"
	events := e.countRows("attempt_events")
	for i, ev := range []string{`{"a":"\ud800"}`, `["\udc00\ud800"]`, `[1e1000000]`, `{"n":1e-1000000}`, `{"a":"\u0000"}`} {
		body := `{"status":"succeeded","reason":"PSP dashboard shows it paid","evidence":` + ev + `}`
		out := e.do(req{method: http.MethodPost, path: path, key: e.operator, body: body,
			header: map[string]string{"Idempotency-Key": "rv-ev-bad-" + string(rune('a'+i))}})
		require.Equal(t, http.StatusBadRequest, out.Status, "%s: %s", ev, out.Body)
		// \u0000 is refused earlier by the body's decoding, naming the key.
		require.True(t, strings.HasPrefix(out.field(t), "evidence"), "%s: %s", ev, out.Body)
	}
	got, err := e.att.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, got.Status, "refused evidence changed nothing")
	require.Equal(t, events, e.countRows("attempt_events"), "refused evidence wrote no event")
	// Leave nothing open: the same decision with valid evidence (a large
	// number jsonb does store).
	r := e.post(path, e.operator, "rv-ev-ok", map[string]any{"status": "failed", "reason": "PSP confirmed it never ran",
		"evidence": map[string]any{"statement": "line 12", "big": 1e300}})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
}
