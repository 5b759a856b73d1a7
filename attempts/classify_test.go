package attempts

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

var errWire = errors.New("wire error")

func res(wrote bool, err error, code int, ref providers.Refinement, state providers.State) providers.SubmitResult {
	return providers.SubmitResult{Exchange: providers.Exchange{Wrote: wrote, Err: err, StatusCode: code},
		Refinement: ref, State: state}
}

// TestClassifyTable is the R2 table, case by case.
func TestClassifyTable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   providers.SubmitResult
		want Outcome
	}{
		{"connect refused, never written", res(false, errWire, 0, "", ""), OutcomeNotSent},
		{"write failed half way", res(false, errWire, 0, "", ""), OutcomeNotSent},
		{"timeout after written", res(true, errWire, 0, "", ""), OutcomeUnknown},
		{"connection reset after written", res(true, errWire, 0, "", ""), OutcomeUnknown},
		{"201 succeeded", res(true, nil, 201, "", providers.StateSucceeded), OutcomeSucceeded},
		{"200 succeeded", res(true, nil, 200, "", providers.StateSucceeded), OutcomeSucceeded},
		{"202 processing", res(true, nil, 202, "", providers.StateProcessing), OutcomeProcessing},
		{"200 says failed", res(true, nil, 200, "", providers.StateFailed), OutcomeFailed},
		{"200 unreadable body", res(true, nil, 200, "", ""), OutcomeUnknown},
		{"200 body cut by timeout", res(true, errWire, 200, "", providers.StateSucceeded), OutcomeUnknown},
		{"2xx declined refinement", res(true, nil, 200, providers.RefineDeclined, ""), OutcomeFailed},
		{"400 validation", res(true, nil, 400, "", ""), OutcomeFailed},
		{"402 declined", res(true, nil, 402, providers.RefineDeclined, ""), OutcomeFailed},
		{"422 invalid destination", res(true, nil, 422, "", ""), OutcomeFailed},
		{"404", res(true, nil, 404, "", ""), OutcomeFailed},
		{"408 request timeout", res(true, nil, 408, "", ""), OutcomeUnknown},
		{"425 too early", res(true, nil, 425, "", ""), OutcomeUnknown},
		{"424 failed dependency", res(true, nil, 424, "", ""), OutcomeUnknown},
		{"400 unknown refinement (Stripe api_error)", res(true, nil, 400, providers.RefineUnknown, ""), OutcomeUnknown},
		{"402 unknown refinement", res(true, nil, 402, providers.RefineUnknown, ""), OutcomeUnknown},
		{"409 in flight", res(true, nil, 409, "", ""), OutcomeInFlight},
		{"409 duplicate (Pix PUT)", res(true, nil, 409, providers.RefineDuplicate, ""), OutcomeInFlight},
		{"400 in_flight refinement", res(true, nil, 400, providers.RefineInFlight, ""), OutcomeInFlight},
		{"400 key misuse (Stripe idempotency_error)", res(true, nil, 400, providers.RefineKeyMisuse, ""), OutcomeKeyMisuse},
		{"409 key misuse", res(true, nil, 409, providers.RefineKeyMisuse, ""), OutcomeKeyMisuse},
		{"429", res(true, nil, 429, "", ""), OutcomeRateLimited},
		{"429 body cut", res(true, errWire, 429, "", ""), OutcomeRateLimited},
		{"400 rate_limited refinement", res(true, nil, 400, providers.RefineRateLimited, ""), OutcomeRateLimited},
		{"401 auth_refused refinement", res(true, nil, 401, providers.RefineAuthRefused, ""), OutcomeAuthRefused},
		{"403 auth_refused refinement", res(true, nil, 403, providers.RefineAuthRefused, ""), OutcomeAuthRefused},
		{"401 auth_refused, body cut", res(true, errWire, 401, providers.RefineAuthRefused, ""), OutcomeAuthRefused},
		{"401 auth_refused, never fully written", res(false, nil, 401, providers.RefineAuthRefused, ""), OutcomeAuthRefused},
		{"401 without a refinement is a refusal (failed)", res(true, nil, 401, "", ""), OutcomeFailed},
		{"500 with auth_refused refinement stays unknown", res(true, nil, 500, providers.RefineAuthRefused, ""), OutcomeUnknown},
		{"500", res(true, nil, 500, "", ""), OutcomeUnknown},
		{"500 with declined refinement stays unknown", res(true, nil, 500, providers.RefineDeclined, ""), OutcomeUnknown},
		{"502", res(true, nil, 502, "", ""), OutcomeUnknown},
		{"503", res(true, nil, 503, "", ""), OutcomeUnknown},
		{"302 redirect not followed", res(true, nil, 302, "", ""), OutcomeUnknown},
		{"500 to a request never fully written", res(false, nil, 500, "", ""), OutcomeNotSent},
		{"400 to a request never fully written", res(false, nil, 400, "", ""), OutcomeNotSent},
		{"429 to a request never fully written", res(false, nil, 429, "", ""), OutcomeRateLimited},
		{"201 although the write reported an error", res(false, nil, 201, "", providers.StateSucceeded), OutcomeSucceeded},
		{"4xx body unreadable", res(true, errWire, 402, "", ""), OutcomeUnknown},
		{"5xx body unreadable, never written", res(false, errWire, 503, "", ""), OutcomeNotSent},
	}
	for _, c := range cases {
		require.Equal(t, c.want, Classify(c.in), c.name)
	}
}

// TestClassifyExhaustive runs every combination of wire facts and checks the
// rules that keep money safe, whatever the table says.
func TestClassifyExhaustive(t *testing.T) {
	t.Parallel()
	codes := []int{0, 100, 200, 201, 202, 204, 301, 302, 400, 401, 402, 403, 404, 408, 409, 410, 422, 424, 425, 429, 500, 501, 502, 503, 504, 599}
	refs := []providers.Refinement{providers.RefineNone, providers.RefineDeclined, providers.RefineInFlight,
		providers.RefineDuplicate, providers.RefineKeyMisuse, providers.RefineRateLimited, providers.RefineAuthRefused, providers.RefineUnknown}
	states := []providers.State{"", providers.StateSucceeded, providers.StateProcessing, providers.StateFailed, "weird"}
	seen := map[Outcome]bool{}
	for _, wrote := range []bool{false, true} {
		for _, err := range []error{nil, errWire} {
			for _, code := range codes {
				for _, ref := range refs {
					for _, st := range states {
						in := res(wrote, err, code, ref, st)
						o := Classify(in)
						seen[o] = true
						name := fmt.Sprintf("wrote=%v err=%v code=%d ref=%q state=%q -> %s", wrote, err != nil, code, ref, st, o)
						require.Contains(t, Outcomes, o, name)
						is2xx := code >= 200 && code < 300
						// Only a readable 2xx naming succeeded is success.
						if o == OutcomeSucceeded {
							require.True(t, is2xx && err == nil && st == providers.StateSucceeded && ref != providers.RefineDeclined, name)
						}
						// Failed needs a complete, written exchange with an answer, never a 5xx.
						if o == OutcomeFailed {
							require.True(t, wrote || is2xx, name)
							require.NoError(t, err, name)
							require.True(t, code >= 200 && code < 500, name)
						}
						// Re-sending is only allowed when the provider holds nothing.
						if o == OutcomeNotSent {
							require.False(t, wrote, name)
							require.False(t, is2xx, name)
						}
						if o == OutcomeRateLimited {
							require.True(t, code == http.StatusTooManyRequests || ref == providers.RefineRateLimited, name)
						}
						// Credentials refused only on an adapter's reading of a 4xx.
						if o == OutcomeAuthRefused {
							require.True(t, ref == providers.RefineAuthRefused && code >= 400 && code < 500, name)
						}
						// A written request lost in transit is never re-sendable.
						if wrote && code == 0 {
							require.Equal(t, OutcomeUnknown, o, name)
						}
						// 5xx after a complete write is unknown (R2), whatever the body says.
						if wrote && err == nil && code >= 500 && ref != providers.RefineKeyMisuse &&
							ref != providers.RefineRateLimited && ref != providers.RefineInFlight && ref != providers.RefineDuplicate {
							require.Equal(t, OutcomeUnknown, o, name)
						}
						// An answer that says nothing about the operation is never final (R1).
						if (ref == providers.RefineUnknown && !is2xx) || code == 408 || code == 424 || code == 425 {
							require.NotEqual(t, OutcomeFailed, o, name)
							require.NotEqual(t, OutcomeSucceeded, o, name)
						}
						if ref == providers.RefineKeyMisuse && wrote && err == nil && code != 0 {
							require.Equal(t, OutcomeKeyMisuse, o, name)
						}
					}
				}
			}
		}
	}
	for _, o := range Outcomes {
		require.True(t, seen[o], "outcome %s unreachable", o)
	}
}

func TestOutcomeStatus(t *testing.T) {
	t.Parallel()
	want := map[Outcome]Status{
		OutcomeNotSent: StatusPending, OutcomeRateLimited: StatusPending, OutcomeAuthRefused: StatusPending,
		OutcomeProcessing: StatusPending,
		OutcomeSucceeded:  StatusSucceeded, OutcomeFailed: StatusFailed,
		OutcomeUnknown: StatusUnknown, OutcomeInFlight: StatusUnknown, OutcomeKeyMisuse: StatusUnknown,
	}
	for _, o := range Outcomes {
		require.Equal(t, want[o], o.Status(), o)
		require.Equal(t, o == OutcomeNotSent || o == OutcomeRateLimited || o == OutcomeAuthRefused, o.Resendable(), o)
	}
}
