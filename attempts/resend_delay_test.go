package attempts

import (
	"testing"
	"time"

	"github.com/saldo/saldo/providers"
)

// TestResendDelayCapsRetryAfter_R2_R15: a 429's Retry-After is honoured up
// to the resolver schedule's longest delay, as for an unanswered lookup: a
// huge one must not park a rate-limited attempt, and the money it holds,
// for years.
func TestResendDelayCapsRetryAfter_R2_R15(t *testing.T) {
	s := &Service{cfg: Config{ResolveSchedule: []time.Duration{30 * time.Second, 30 * time.Minute}}}
	for _, c := range []struct{ retryAfter, want time.Duration }{
		{3 * time.Second, 3 * time.Second},
		{30 * time.Minute, 30 * time.Minute},
		{100 * 365 * 24 * time.Hour, 30 * time.Minute},
	} {
		r := recordReq{callNo: 1, outcome: OutcomeRateLimited,
			sr: providers.SubmitResult{Exchange: providers.Exchange{StatusCode: 429, RetryAfter: c.retryAfter}}}
		if got := s.resendDelay(r); got != c.want {
			t.Errorf("Retry-After %v: resend in %v, want %v", c.retryAfter, got, c.want)
		}
	}
}
