package attempts

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ackPSP is a provider over real HTTP whose submits answer what the test
// says (a 2xx in a state nobody knows, an empty 2xx, a 409 "key in use")
// and whose search lags forever: every lookup answers 404. It is what a
// provider paying the operation while its search index is behind looks
// like.
type ackPSP struct {
	srv     *httptest.Server
	code    int
	body    string
	submits atomic.Int32
	lookups atomic.Int32
}

func newAckPSP(t *testing.T, code int, body string) *ackPSP {
	p := &ackPSP{code: code, body: body}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /ops", func(w http.ResponseWriter, r *http.Request) {
		p.submits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(p.code)
		_, _ = w.Write([]byte(p.body))
	})
	mux.HandleFunc("GET /ops/{ref}", func(w http.ResponseWriter, r *http.Request) {
		p.lookups.Add(1)
		writeJSON(w, 404, map[string]string{"code": "not_found"})
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

var ackCases = []struct {
	name       string
	code       int
	body       string
	providerID string
}{
	{"2xx_unknown_state_with_id", 200, `{"id":"op_ack_1","state":"em_processamento"}`, "op_ack_1"},
	{"2xx_no_state", 202, `{}`, ""},
	{"2xx_unreadable", 200, `not json`, ""},
	{"409_key_in_use", 409, `{"code":"idempotency_in_flight"}`, ""},
}

// Issue 13 finding 2. A provider answer that acknowledges the operation (a
// 2xx naming its id in a state the classifier does not know, any other 2xx,
// a 409 "key in use") makes the attempt unknown (R2) and is kept on it: the
// provider id and the acknowledgement. A lookup that keeps answering "not
// found" long past the consistency window then proves nothing (R16): the
// attempt never fails, its owner is never told (the payout's reserve stays
// held, R22), and once the lookups are exhausted it goes to review (R18).
func TestUnknownKeepsProviderAck_R16_R18_R22(t *testing.T) {
	t.Parallel()
	for _, tc := range ackCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, harnessOpts{tune: func(c *Config) { c.MaxLookups = 4 }})
			psp := newAckPSP(t, tc.code, tc.body)
			h.prov.setBase(psp.srv.URL)
			a := h.open(newSubject())
			r, err := h.svc.Execute(h.ctx, a.ID)
			require.NoError(t, err)
			require.Equal(t, StatusUnknown, r.Attempt.Status)
			got := h.get(a.ID)
			require.Equal(t, tc.providerID, got.ProviderID, "the provider id the answer named is kept")
			require.NotNil(t, got.AcknowledgedAt, "the acknowledgement is kept")
			require.Contains(t, got.Acknowledgement, fmt.Sprintf("HTTP %d", tc.code))
			require.True(t, got.Acknowledged())
			// Evidence: the database refuses to forget or rewrite it.
			_, err = h.pool.Exec(h.ctx, `UPDATE attempts SET acknowledged_at = NULL, acknowledgement = NULL WHERE id = $1`, a.ID)
			require.ErrorContains(t, err, "never changed once recorded")
			_, err = h.pool.Exec(h.ctx, `UPDATE attempts SET acknowledgement = 'nothing' WHERE id = $1`, a.ID)
			require.ErrorContains(t, err, "never changed once recorded")

			for i := range 10 {
				h.clock.Advance(time.Hour) // far past the 2-minute consistency window
				rr, err := h.svc.Resolve(h.ctx, a.ID)
				require.NoError(t, err)
				require.Equal(t, StatusUnknown, rr.Attempt.Status, "lookup %d: not found after an acknowledgement proves nothing", i+1)
				if rr.Attempt.Review {
					break
				}
			}
			got = h.get(a.ID)
			require.True(t, got.Review, "lookups exhausted: a human decides")
			require.Equal(t, StatusUnknown, got.Status)
			require.Zero(t, h.owner.count(a.ID), "the owner never heard of a failure: the reserve is held")
			require.Empty(t, h.ownerEffects(a.ID))
			require.EqualValues(t, 1, psp.submits.Load(), "never re-sent")
			require.GreaterOrEqual(t, psp.lookups.Load(), int32(4))
			h.requireNoViolations()
		})
	}
}

// Issue 13 finding 2, group commit: the calls of attempts owned by a
// BatchOwner recorded together (recordBatch) keep the acknowledgement
// exactly as the one-at-a-time path (recordOne) does: same status, provider
// id and acknowledgement; and neither is failed by a lagging lookup (R16).
func TestUnknownKeepsProviderAckBatched_R16(t *testing.T) {
	t.Parallel()
	type row struct {
		Status     Status
		ProviderID string
		Ack        string
		Acked      bool
	}
	run := func(t *testing.T, batch bool) ([]row, *batchRecorder) {
		h := setup(t, harnessOpts{})
		bo := newBatchRecorder()
		if batch {
			for _, k := range Kinds {
				h.svc.RegisterOwner(k, bo)
			}
		}
		var srvs []*ackPSP
		for _, tc := range ackCases {
			srvs = append(srvs, newAckPSP(t, tc.code, tc.body))
		}
		// One provider base per request: route by the attempt's slot.
		front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			slot := r.Header.Get("Idempotency-Key")
			ackSlotMu.Lock()
			i := ackSlotOf[slot]
			ackSlotMu.Unlock()
			srvs[i].srv.Config.Handler.ServeHTTP(w, r)
		}))
		t.Cleanup(front.Close)
		h.prov.setBase(front.URL)
		var ids []Attempt
		for i := range ackCases {
			a := h.open(newSubject())
			ackSlotMu.Lock()
			ackSlotOf[a.IdempotencyKey] = i
			ackSlotMu.Unlock()
			ids = append(ids, a)
		}
		n := int32(len(ids))
		var arrived atomic.Int32
		allIn := make(chan struct{})
		h.svc.hookAfterCall = func(Attempt) error {
			if arrived.Add(1) == n {
				close(allIn)
			}
			select {
			case <-allIn:
				return nil
			case <-time.After(20 * time.Second):
				return errors.New("barrier: not every call returned")
			}
		}
		var wg sync.WaitGroup
		for _, a := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := h.svc.Execute(context.Background(), a.ID)
				assert.NoError(t, err)
			}()
		}
		wg.Wait()
		h.svc.hookAfterCall = nil
		out := make([]row, len(ids))
		for i, a := range ids {
			got := h.get(a.ID)
			out[i] = row{Status: got.Status, ProviderID: got.ProviderID, Ack: got.Acknowledgement, Acked: got.AcknowledgedAt != nil}
			h.clock.Advance(time.Hour)
			rr, err := h.svc.Resolve(h.ctx, a.ID)
			require.NoError(t, err)
			require.Equal(t, StatusUnknown, rr.Attempt.Status, "slot %d", i)
		}
		require.Zero(t, len(h.owner.calls))
		if batch {
			st := h.svc.BatchStats().Records
			require.Greater(t, st.Requests, st.Batches, "the calls were recorded together (%+v)", st)
		}
		h.requireNoViolations()
		return out, bo
	}
	var ref, got []row
	t.Run("one_at_a_time", func(t *testing.T) { ref, _ = run(t, false) })
	t.Run("batched", func(t *testing.T) { got, _ = run(t, true) })
	require.Equal(t, ref, got)
	for i, r := range ref {
		require.True(t, r.Acked, "slot %d (%s)", i, ackCases[i].name)
		require.Equal(t, ackCases[i].providerID, r.ProviderID, "slot %d", i)
	}
}

// ackSlotOf routes each attempt's submit (by its idempotency key) to the
// answer of its slot.
var (
	ackSlotMu sync.Mutex
	ackSlotOf = map[string]int{}
)
