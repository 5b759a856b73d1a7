package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/providers/sim"
)

// End to end with a real River client, as saldo serve wires it: the API
// creates a payout, the SubmitAttempt worker pays it, the final transaction
// enqueues the notification, and the delivery worker POSTs it, retrying
// with backoff after the receiver's first 503 (R24).
func TestRiverEndToEnd(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	rc := newReceiver(t)
	rc.status = http.StatusServiceUnavailable
	r := e.do(req{method: http.MethodPost, path: "/v1/merchants/m1/notification-endpoints", key: e.admin,
		body: map[string]any{"url": rc.srv.URL}})
	require.Equal(t, http.StatusCreated, r.Status)
	secret := r.json(t)["secret"].(string)

	workers := river.NewWorkers()
	e.att.AddWorkers(workers)
	e.notif.AddWorkers(workers)
	api.AddWorkers(workers, e.pool, nil)
	client, err := river.NewClient(riverpgxv5.New(e.pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers:           workers,
		PeriodicJobs:      append(e.att.PeriodicJobs(), api.PeriodicJobs(24*time.Hour)...),
		FetchPollInterval: 20 * time.Millisecond,
		FetchCooldown:     5 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		TestOnly:          true,
	})
	require.NoError(t, err)
	e.att.SetRiverClient(client)
	e.notif.SetRiverClient(client)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stop, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = client.Stop(stop)
	})

	p := e.createPix("12.00", "river-1")
	id := p["id"].(string)
	require.Eventually(t, func() bool {
		v, err := e.pay.Get(e.ctx, "m1", id)
		return err == nil && v.Status == "succeeded"
	}, 30*time.Second, 20*time.Millisecond, "the SubmitAttempt worker pays it")

	require.Eventually(t, func() bool {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		return len(rc.got) >= 1
	}, 30*time.Second, 20*time.Millisecond)
	rc.mu.Lock()
	rc.status = http.StatusOK
	rc.mu.Unlock()
	require.Eventually(t, func() bool {
		var delivered bool
		err := e.pool.QueryRow(e.ctx, `SELECT delivered_at IS NOT NULL FROM notification_events WHERE object_id = $1`, id).Scan(&delivered)
		return err == nil && delivered
	}, 60*time.Second, 50*time.Millisecond, "retried by River until a 2xx")
	rc.mu.Lock()
	got := append([]received(nil), rc.got...)
	rc.mu.Unlock()
	require.GreaterOrEqual(t, len(got), 2)
	last := got[len(got)-1]
	require.NoError(t, api.VerifySignature(secret, last.header.Get(api.SignatureHeader), last.body, e.clock.Now(), 5*time.Minute))
	require.Contains(t, string(last.body), `"type":"payout.succeeded"`)
	av, re := e.balances("m1", e.m1)
	require.Equal(t, []string{"988.00", "0.00"}, []string{av, re})
}
