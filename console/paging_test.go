package console_test

// The console's paginated lists reach every row and keep their filters from
// one page to the next.

import (
	"fmt"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/merchants"
)

// /console/merchants pages by 100 and, with more than 100 merchants, its
// "Next page" links reach every one of them: merchants.List allows a limit
// of 101, so the page gets 100 rows and learns whether another page
// follows. Before, merchants.List capped any limit at 100, so no next link
// ever showed and merchants past the 100th were unreachable, in the console
// and in the API's list (found by review).
func TestMerchantsListPagesReachEveryMerchant(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	want := map[string]bool{"m1": true, "m2": true}
	for i := 0; i < 120; i++ {
		id := fmt.Sprintf("shop-%03d", i)
		_, err := merchants.Create(e.ctx, e.pool, id, "Shop "+id)
		require.NoError(t, err)
		want[id] = true
	}
	c := e.client()
	c.signIn(e.secret["auditor"])
	idRe := regexp.MustCompile(`<tr><td><a href="/console/merchants/([^"]+)">`)
	nextRe := regexp.MustCompile(`<a href="(/console/merchants\?after=[^"]*)">Next page`)
	seen := map[string]bool{}
	path := "/console/merchants"
	for pages := 0; path != "" && pages < 10; pages++ {
		res, body := c.get(path)
		require.Equal(t, http.StatusOK, res.StatusCode, path)
		for _, m := range idRe.FindAllStringSubmatch(body, -1) {
			seen[m[1]] = true
		}
		path = ""
		if m := nextRe.FindStringSubmatch(body); m != nil {
			path = html.UnescapeString(m[1])
		}
	}
	var missing []string
	for id := range want {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	require.Empty(t, missing, "%d of %d merchants are unreachable from /console/merchants (saw %d)",
		len(missing), len(want), len(seen))
}

// /console/reconcile filtered by day (the link of every run in "Recent
// runs" is one) pages by 100, and its "Next page" link keeps every filter:
// status, kind, provider, day and severity, so page 2 of one day's
// divergences holds only that day's. Before, the link dropped day and
// severity, and page 2 listed other days' divergences (found by review).
func TestReconcileNextPageKeepsTheDayAndSeverityFilters(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	now := e.clock.Now().UTC().Truncate(time.Hour)
	dayA := now.AddDate(0, 0, -3).Format("2006-01-02")
	dayB := now.AddDate(0, 0, -4).Format("2006-01-02")
	runID := func(n int) string { return fmt.Sprintf("rr_%032x", n) }
	for i, d := range []string{dayA, dayB} {
		_, err := e.pool.Exec(e.ctx, `INSERT INTO reconcile_runs (id, provider, day, status, triggered_by, started_at, finished_at)
			VALUES ($1, 'sim', $2::date, 'succeeded', 'test', $3, $3)`, runID(i+1), d, now)
		require.NoError(t, err)
	}
	insert := func(n int, day, run, detail string, at time.Time) {
		_, err := e.pool.Exec(e.ctx, `INSERT INTO reconcile_divergences (id, provider, day, kind, severity, fingerprint, detail,
				status, first_run_id, last_run_id, created_at, last_seen_at, resolved_at, resolved_by, resolution_reason)
			VALUES ($1, 'sim', $2::date, 'resolved_by_reconciliation', 'info', $3, $4, 'resolved', $5, $5, $6, $6, $6,
				'reconciliation', 'resolved by the statement')`,
			fmt.Sprintf("dv_%032x", n), day, fmt.Sprintf("fp-%d", n), detail, run, at)
		require.NoError(t, err)
	}
	// 105 divergences of day A, newer than 20 of day B.
	for i := 0; i < 105; i++ {
		insert(1000+i, dayA, runID(1), "day-A divergence", now.Add(-time.Duration(i)*time.Minute))
	}
	for i := 0; i < 20; i++ {
		insert(2000+i, dayB, runID(2), "day-B divergence", now.Add(-10*time.Hour-time.Duration(i)*time.Minute))
	}

	c := e.client()
	c.signIn(e.secret["auditor"])
	res, body := c.get("/console/reconcile?provider=sim&day=" + dayA + "&status=")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NotContains(t, body, "day-B divergence", "page 1 is day A only")
	require.Equal(t, 100, strings.Count(body, "day-A divergence"))
	m := regexp.MustCompile(`<a href="(/console/reconcile\?[^"]*cursor=[^"]*)">Next page`).FindStringSubmatch(body)
	require.NotNil(t, m, "a next page")
	next := html.UnescapeString(m[1])
	res, body = c.get(next)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, 5, strings.Count(body, "day-A divergence"), "page 2 has the rest of day A")
	require.NotContains(t, body, "day-B divergence", "page 2 of day %s lists only that day's divergences (next link %s)", dayA, next)
}
