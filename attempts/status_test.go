package attempts

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCanTransitionExhaustive checks every (from, to) pair against the R9
// table: pending -> succeeded | failed | unknown; unknown -> succeeded |
// failed; nothing else.
func TestCanTransitionExhaustive(t *testing.T) {
	t.Parallel()
	allowed := map[[2]Status]bool{
		{StatusPending, StatusSucceeded}: true,
		{StatusPending, StatusFailed}:    true,
		{StatusPending, StatusUnknown}:   true,
		{StatusUnknown, StatusSucceeded}: true,
		{StatusUnknown, StatusFailed}:    true,
	}
	all := append([]Status{"", "bogus"}, Statuses...)
	for _, from := range all {
		for _, to := range all {
			require.Equal(t, allowed[[2]Status{from, to}], CanTransition(from, to), "%q -> %q", from, to)
		}
	}
	for _, s := range Statuses {
		require.True(t, s.Valid())
		require.NotEqual(t, s.Final(), s.Open(), s)
		if s.Final() {
			for _, to := range all {
				require.False(t, CanTransition(s, to), "final %s must never change (R9)", s)
			}
		}
	}
	require.False(t, Status("bogus").Valid())
	require.ElementsMatch(t, []Status{StatusPending, StatusUnknown}, sourcesFor(StatusSucceeded))
	require.ElementsMatch(t, []Status{StatusPending}, sourcesFor(StatusUnknown))
	require.Empty(t, sourcesFor(StatusPending))
}

func TestKindAllows(t *testing.T) {
	t.Parallel()
	for _, k := range Kinds {
		require.True(t, k.Valid())
		require.NotEmpty(t, kindOperations[k])
	}
	require.False(t, Kind("loan").Valid())
	require.True(t, KindRefund.Allows("refund"))
	require.False(t, KindRefund.Allows("pix_transfer"))
	require.Equal(t, "in", KindCardCharge.direction())
	require.Equal(t, "out", KindSplitLeg.direction())
}

func TestBackoffBounds(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 30; n++ {
		for range 50 {
			d := backoff(1e9, 60e9, n)
			want := min(int64(1e9)<<min(n-1, 20), 60e9)
			require.GreaterOrEqual(t, int64(d), want/2, n)
			require.LessOrEqual(t, int64(d), want, n)
		}
	}
}
