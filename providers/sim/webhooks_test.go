package sim_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

func TestWebhookSignature(t *testing.T) {
	t.Parallel()
	clock := sim.NewManualClock(t0)
	rc := newReceiver(t, 0)
	srv, p := setup(t, sim.Config{Clock: clock.Now, WebhookURL: rc.URL, WebhookSecret: "whsec_test"})
	a := open(t, p, transfer("10.00"))
	res := a.send(p)
	flush(t, srv)
	got := rc.received()
	require.Len(t, got, 1)
	h, body := got[0].header, got[0].body
	require.NotEmpty(t, h.Get(sim.EventIDHeader))
	require.Equal(t, sim.Sign("whsec_test", t0, body), h.Get(sim.SignatureHeader))

	ev, err := p.ParseWebhook(h, body, t0.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, h.Get(sim.EventIDHeader), ev.ID)
	require.Equal(t, "pix_transfer.succeeded", ev.Type)
	require.Equal(t, providers.OpPixTransfer, ev.Operation)
	require.Equal(t, a.ref, ev.Reference)
	require.Equal(t, res.ProviderID, ev.ProviderID)
	require.Equal(t, providers.StateSucceeded, ev.State)
	require.Equal(t, "10.00", ev.Amount)
	require.Equal(t, t0, ev.OccurredAt)

	// Tampered body, wrong secret, missing header: bad signature.
	tampered := append([]byte(nil), body...)
	tampered[len(tampered)-3] ^= 1
	_, err = p.ParseWebhook(h, tampered, t0)
	require.ErrorIs(t, err, providers.ErrBadSignature)
	other := sim.NewProvider(srv.URL(), sim.WithWebhookSecret("whsec_other"))
	_, err = other.ParseWebhook(h, body, t0)
	require.ErrorIs(t, err, providers.ErrBadSignature)
	_, err = p.ParseWebhook(http.Header{}, body, t0)
	require.ErrorIs(t, err, providers.ErrBadSignature)
	_, err = sim.NewProvider(srv.URL()).ParseWebhook(h, body, t0)
	require.ErrorIs(t, err, providers.ErrBadSignature, "no secret configured")

	// Outside the tolerance, either way: stale.
	_, err = p.ParseWebhook(h, body, t0.Add(5*time.Minute+time.Second))
	require.ErrorIs(t, err, providers.ErrStaleWebhook)
	_, err = p.ParseWebhook(h, body, t0.Add(-6*time.Minute))
	require.ErrorIs(t, err, providers.ErrStaleWebhook)
	strict := srv.NewProvider(sim.WithWebhookTolerance(time.Second))
	_, err = strict.ParseWebhook(h, body, t0.Add(2*time.Second))
	require.ErrorIs(t, err, providers.ErrStaleWebhook)

	// A correctly signed body that is not an event: malformed.
	for _, junk := range []string{`not json`, `{"id":"evt_1"}`, `{"id":"e","data":{"reference":"r","operation":"pix_transfer","state":"weird"}}`} {
		hh := http.Header{}
		hh.Set(sim.SignatureHeader, sim.Sign("whsec_test", t0, []byte(junk)))
		_, err = p.ParseWebhook(hh, []byte(junk), t0)
		require.ErrorIs(t, err, providers.ErrMalformedWebhook, junk)
	}

	// Several v1 signatures (secret rotation): one valid is enough.
	hh := http.Header{}
	_, good, _ := strings.Cut(sim.Sign("whsec_test", t0, body), ",")
	hh.Set(sim.SignatureHeader, sim.Sign("old", t0, body)+","+good)
	_, err = p.ParseWebhook(hh, body, t0)
	require.NoError(t, err)
}

// Duplicates: every event delivered twice with the same id (seeded rate 1).
func TestWebhookDuplicates(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, 0)
	srv, p := setup(t, sim.Config{WebhookURL: rc.URL, WebhookSecret: "s", WebhookDuplicateRate: 1})
	a := open(t, p, transfer("1.00"))
	a.send(p)
	flush(t, srv)
	evs := rc.delivered(t, p, time.Now())
	require.Len(t, evs, 2)
	require.Equal(t, evs[0].ID, evs[1].ID)
	require.Equal(t, a.ref, evs[1].Reference)
}

// Reordering: a processing event arrives after the final one (docs/pitfalls.md).
func TestWebhookReordering(t *testing.T) {
	t.Parallel()
	clock := sim.NewManualClock(t0)
	rc := newReceiver(t, 0)
	srv, p := setup(t, sim.Config{Clock: clock.Now, WebhookURL: rc.URL, WebhookSecret: "s",
		WebhookReorderRate: 1, WebhookHoldMax: time.Minute, SettleAfter: time.Minute})
	a := open(t, p, payout("1.00"))
	require.Equal(t, providers.StateProcessing, a.send(p).State)
	clock.Advance(time.Minute) // settles: the succeeded event overtakes the held processing one
	flush(t, srv)
	evs := rc.delivered(t, p, clock.Now())
	require.Len(t, evs, 2)
	require.Equal(t, providers.StateSucceeded, evs[0].State)
	require.Equal(t, providers.StateProcessing, evs[1].State)
	require.Equal(t, evs[0].ProviderID, evs[1].ProviderID)
}

// Retry: a failing receiver gets the event again until it answers 2xx.
func TestWebhookRetriedUntilAccepted(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, 2)
	srv, p := setup(t, sim.Config{WebhookURL: rc.URL, WebhookSecret: "s", WebhookRetryBase: 5 * time.Millisecond})
	open(t, p, cardCharge("9.99", "tok_visa")).send(p)
	flush(t, srv)
	got := rc.received()
	require.Len(t, got, 3)
	require.Equal(t, []int{500, 500, 200}, []int{got[0].status, got[1].status, got[2].status})
	require.Equal(t, got[0].body, got[2].body, "the same event")
	d := srv.WebhookDeliveries()
	require.Len(t, d, 3)
	require.Equal(t, 3, d[2].Attempt)
	require.True(t, d[2].Delivered)
	require.False(t, d[0].Delivered)
	require.Len(t, rc.delivered(t, p, time.Now()), 1)
}

// A receiver that never recovers: the copy is dropped after the attempts.
func TestWebhookGivenUp(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, 1000)
	srv, p := setup(t, sim.Config{WebhookURL: rc.URL, WebhookSecret: "s", WebhookRetryBase: time.Millisecond,
		WebhookMaxAttempts: 3})
	open(t, p, transfer("1.00")).send(p)
	flush(t, srv)
	d := srv.WebhookDeliveries()
	require.Len(t, d, 3)
	require.True(t, d[2].Dropped)
}

// Delay holds deliveries back.
func TestWebhookDelay(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, 0)
	// The delay is long against the send and the 50 ms given to an
	// undelayed delivery: with 150 ms, a send slowed by a loaded machine
	// let the delivery arrive before the check.
	const delay = 2 * time.Second
	srv, p := setup(t, sim.Config{WebhookURL: rc.URL, WebhookSecret: "s", WebhookDelay: delay})
	start := time.Now()
	open(t, p, transfer("1.00")).send(p)
	time.Sleep(50 * time.Millisecond)
	require.Empty(t, rc.received())
	flush(t, srv)
	require.GreaterOrEqual(t, srv.WebhookDeliveries()[0].At.Sub(start), delay)
}

// Duplication and reordering decisions and event ids follow the seed.
func TestWebhooksDeterministic(t *testing.T) {
	t.Parallel()
	run := func() []string {
		rc := newReceiver(t, 0)
		srv, p := setup(t, sim.Config{Seed: 99, WebhookURL: rc.URL, WebhookSecret: "s", WebhookDuplicateRate: 0.4,
			WebhookReorderRate: 0.4, WebhookHoldMax: time.Minute})
		for i := range 12 {
			body, err := p.EncodePayload(transfer("1.00"), "ref"+string(rune('a'+i)))
			require.NoError(t, err)
			p.Submit(t.Context(), providers.SubmitRequest{Operation: providers.OpPixTransfer, Payload: body})
		}
		flush(t, srv)
		var ids []string
		for _, ev := range rc.delivered(t, p, time.Now()) {
			ids = append(ids, ev.ID+"/"+ev.Reference)
		}
		return ids
	}
	first := run()
	require.Greater(t, len(first), 12, "some duplicates")
	require.Equal(t, first, run())
}
