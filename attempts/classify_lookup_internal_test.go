package attempts

import (
	"errors"
	"testing"

	"github.com/saldo/saldo/providers"
)

// R16: the core reads "not found" only from a clean 200 (an empty search)
// or a 404 the adapter did not mark inconclusive. A 204, a 202 or any
// other answer naming nothing proves nothing, even from an adapter that
// forgets to say so.
func TestClassifyLookupNotFoundNeedsA200Or404(t *testing.T) {
	for _, c := range []struct {
		status int
		err    error
		found  bool
		state  providers.State
		want   lookupClass
	}{
		{status: 200, want: lookupNotFound},
		{status: 404, want: lookupNotFound},
		{status: 201, want: lookupInconclusive},
		{status: 202, want: lookupInconclusive},
		{status: 204, want: lookupInconclusive},
		{status: 301, want: lookupInconclusive},
		{status: 410, want: lookupInconclusive},
		{status: 429, want: lookupInconclusive},
		{status: 500, want: lookupInconclusive},
		{status: 404, err: errors.New("proxy page"), want: lookupInconclusive},
		{status: 200, err: errors.New("unreadable"), want: lookupInconclusive},
		{status: 200, found: true, state: providers.StateSucceeded, want: lookupFound},
		{status: 200, found: true, state: "", want: lookupInconclusive},
	} {
		lr := providers.LookupResult{Exchange: providers.Exchange{StatusCode: c.status, Err: c.err}, Found: c.found, State: c.state}
		if got := classifyLookup(lr); got != c.want {
			t.Errorf("status %d, err %v, found %v %q: %s, want %s", c.status, c.err, c.found, c.state, got, c.want)
		}
	}
}
