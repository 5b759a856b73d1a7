package main

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/providers/sim"
)

// R4, R8, R16: the double payment a fleet could make. Two `saldo serve`
// configurations share one database, both calling their PSP "sim", at two
// different sims. Had the second started, its resolver would have looked
// up the first one's attempts at its own sim, read "not found", failed
// them after the consistency window, freed their reserves, and the
// retries would have paid the same people a second time. The second is
// refused at start, naming the provider and both sims. Once the first is
// stopped with nothing open, --accept-provider-identity re-points the name.
func TestServeRefusesASecondSimUnderTheSameName_R4_R8_R16(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	dbURL := testdb.NewURL(t)
	simA := sim.NewServer(sim.Config{Seed: 1}).Start()
	t.Cleanup(simA.Close)
	simB := sim.NewServer(sim.Config{Seed: 2}).Start()
	t.Cleanup(simB.Close)

	a := startServe(t, bin, dbURL, simA.URL(), "", "api,workers")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--listen", "127.0.0.1:0", "--sim-url", simB.URL(), "--roles", "api,workers",
		"--provider-read-timeout", "2s", "--stale-call-after", "30s")
	cmd.Env = append(os.Environ(), "SALDO_DATABASE_URL="+dbURL, "SALDO_ACCEPT_PROVIDER_IDENTITY=")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the second configuration is refused:\n%s", out)
	for _, want := range []string{"refusing to start", "provider sim is recorded as sim at " + simA.URL(),
		"configured as sim at " + simB.URL(), "--accept-provider-identity sim"} {
		require.Contains(t, string(out), want)
	}
	require.NotContains(t, string(out), "api listening")

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, <-a.done)
	b := startServe(t, bin, dbURL, simB.URL(), "", "api,workers", "--accept-provider-identity", "sim")
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, <-b.done)
}
