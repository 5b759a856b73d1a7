package attempts

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// recallingProvider records what the attempts core hands it before lookups.
type recallingProvider struct {
	providers.Provider
	mu       sync.Mutex
	recalled map[string][]byte
}

func (p *recallingProvider) Recall(_ providers.Operation, reference string, payload []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.recalled[reference] = payload
}

// Before a lookup, a provider that implements providers.Recaller gets the
// attempt's stored payload (a Pix refund's lookup path needs what only the
// request holds; a restarted process has nothing else).
func TestLookupRecallsThePayload_R13(t *testing.T) {
	t.Parallel()
	var rp *recallingProvider
	h := setup(t, harnessOpts{plan: []behaviour{behave500AfterRecord}, tune: func(c *Config) {
		rp = &recallingProvider{Provider: c.Providers["fake"], recalled: map[string][]byte{}}
		c.Providers["fake"] = rp
	}})
	a := h.open(newSubject())
	res, err := h.svc.Execute(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusUnknown, res.Attempt.Status)
	h.clock.Advance(time.Minute)
	rr, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusSucceeded, rr.Attempt.Status)
	rp.mu.Lock()
	defer rp.mu.Unlock()
	require.True(t, bytes.Equal(a.Payload, rp.recalled[a.Reference]), "the stored payload, before the lookup")
}
