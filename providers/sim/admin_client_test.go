package sim_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

func TestAdminClient(t *testing.T) {
	t.Parallel()
	clock := sim.NewManualClock(t0)
	srv, p := setup(t, sim.Config{Clock: clock.Now, NoIdempotency: true})
	ctx := t.Context()

	c := open(t, p, cob(time.Hour))
	require.Equal(t, http.StatusCreated, c.send(p).Exchange.StatusCode)
	op, err := p.PayCob(ctx, c.ref)
	require.NoError(t, err)
	require.Equal(t, providers.StateSucceeded, op.State)
	require.Equal(t, sim.CobPaid, op.Cob.Status)
	_, err = p.PayCob(ctx, c.ref)
	require.ErrorIs(t, err, sim.ErrCobPaid)
	_, err = p.PayCob(ctx, newRef())
	require.ErrorIs(t, err, sim.ErrCobNotFound)
	c2 := open(t, p, cob(time.Minute))
	c2.send(p)
	clock.Advance(time.Minute)
	_, err = p.PayCob(ctx, c2.ref)
	require.ErrorIs(t, err, sim.ErrCobExpired)

	a := open(t, p, transfer("2.00"))
	a.send(p)
	a.send(p) // no keys: a second payment
	ops, err := p.Oracle(ctx, a.ref)
	require.NoError(t, err)
	require.Len(t, ops, 2)
	dups, err := p.Duplicates(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{a.ref}, dups)
	require.Equal(t, srv.Duplicates(), dups)
}

// GET /sim/operations lists every operation, in execution order, with
// money_moving as Duplicates counts it.
func TestAdminClientAllOperations(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{NoIdempotency: true})
	ctx := t.Context()
	a := open(t, p, transfer("2.00"))
	a.send(p)
	a.send(p) // no keys: a second payment
	all, err := p.AllOperations(ctx)
	require.NoError(t, err)
	require.Len(t, all, 2)
	for i, op := range srv.AllOperations() {
		require.Equal(t, op.ID, all[i].ID)
		require.Equal(t, a.ref, all[i].Reference)
		require.True(t, all[i].MoneyMoving)
	}
}

// PUT /sim/random-faults replaces the random fault profile at run time:
// every submit is refused with 503 until the profile is cleared.
func TestAdminClientSetRandomFaults(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{Random: sim.FaultProfile{Unavailable: 1}})
	ctx := t.Context()
	require.Equal(t, http.StatusServiceUnavailable, open(t, p, transfer("1.00")).send(p).Exchange.StatusCode)
	require.Error(t, p.SetRandomFaults(ctx, "unavailable=2"))
	require.NoError(t, p.SetRandomFaults(ctx, ""))
	require.Equal(t, http.StatusOK, open(t, p, transfer("1.00")).send(p).Exchange.StatusCode)
	require.Equal(t, sim.FaultProfile{Unavailable: 1}, srv.Config().Random, "Config reports the starting profile")
	require.NoError(t, p.SetRandomFaults(ctx, "rate_limit=1"))
	require.Equal(t, http.StatusTooManyRequests, open(t, p, transfer("1.00")).send(p).Exchange.StatusCode)
}
