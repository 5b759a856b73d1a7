package providers

import (
	"net/http"
	"testing"
	"time"
)

// TestRetryAfterIsBounded_R2_R15 shows the 429 row of R2 (re-sent after
// Retry-After) and R15's capped wait: a 429 with "Retry-After:
// 3153600000" must not park the attempt, and its reserve, for 100 years,
// and a larger value must not overflow time.Duration (secs*time.Second
// wraps negative). attempts.resendDelay caps it further
// (TestResendDelayCapsRetryAfter_R2_R15).
func TestRetryAfterIsBounded_R2_R15(t *testing.T) {
	now := time.Now()
	for _, v := range []string{"3153600000", "9999999999", "99999999999", "99999999999999999999",
		now.Add(10 * 365 * 24 * time.Hour).UTC().Format(http.TimeFormat)} {
		d := parseRetryAfter(v, now)
		t.Logf("Retry-After: %s -> %v", v, d)
		if d < 0 || d > 24*time.Hour {
			t.Errorf("Retry-After %s read as %v: want a bounded, non-negative delay", v, d)
		}
	}
	for v, want := range map[string]time.Duration{"": 0, "-5": 0, "0": 0, "120": 2 * time.Minute, "soon": 0,
		now.Add(-time.Minute).UTC().Format(http.TimeFormat): 0} {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("Retry-After %q read as %v, want %v", v, got, want)
		}
	}
	if got := parseRetryAfter("99999999999", now); got != MaxRetryAfter {
		t.Errorf("a huge Retry-After read as %v, want the cap %v", got, MaxRetryAfter)
	}
}
