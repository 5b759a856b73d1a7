package console_test

// Hostile review (rv-console): regression guards. Every test here PASSED on
// the reviewed code: the suspicions they encode turned out fine, and they
// stay as guards.

import (
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/console"
)

// Guard: two browsers redeeming one login link at the same moment: exactly
// one is signed in (the UPDATE ... WHERE used_at IS NULL in linkLogin).
func TestReviewLoginLinkRedeemedOnceUnderRace(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	tok, err := console.CreateLoginLink(e.ctx, e.pool, e.keyID["operator"], time.Hour, e.clock.Now())
	require.NoError(t, err)
	const n = 8
	clients := make([]*client, n)
	csrfs := make([]string, n)
	for i := range clients {
		clients[i] = e.client()
		_, body := clients[i].get("/console/login/link?t=" + tok)
		csrfs[i] = csrfOf(t, body)
	}
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, clients[i].base+"/console/login/link",
				strings.NewReader(url.Values{"t": {tok}, "csrf": {csrfs[i]}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			res, err := clients[i].hc.Do(req)
			if err == nil {
				codes[i] = res.StatusCode
				res.Body.Close()
			}
		}()
	}
	wg.Wait()
	won := 0
	for _, c := range codes {
		if c == http.StatusSeeOther {
			won++
		} else {
			require.Equal(t, http.StatusForbidden, c)
		}
	}
	require.Equal(t, 1, won, "one login link, one session: %v", codes)
}

// Guard: a session's CSRF token does not work for another session (of the
// same key), a token sent in the query string instead of the body is not
// read, and a session cookie replayed after sign-out opens nothing.
func TestReviewCSRFIsPerSessionAndSignOutEndsTheCookie(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	_, a := e.stuckPayout("10.00")
	first, second := e.client(), e.client()
	tokFirst := first.signIn(e.secret["operator"])
	second.signIn(e.secret["operator"])
	form := url.Values{"status": {"succeeded"}, "reason": {"seen paid"}, "csrf": {tokFirst}}
	res, _ := second.post("/console/attempts/"+a.ID.String()+"/resolve", form)
	require.Equal(t, http.StatusForbidden, res.StatusCode, "another session's token")
	res, _ = second.post("/console/attempts/"+a.ID.String()+"/resolve?csrf="+url.QueryEscape(tokFirst),
		url.Values{"status": {"succeeded"}, "reason": {"seen paid"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode, "token in the query string")
	got, err := e.e.Attempts.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, got.Status)

	// Keep the cookie, sign out, replay it.
	u, _ := url.Parse(first.base + "/console/")
	cookies := first.hc.Jar.Cookies(u)
	res, _ = first.post("/console/logout", url.Values{"csrf": {tokFirst}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	replay := e.client()
	replay.hc.Jar.SetCookies(u, cookies)
	res, _ = replay.get("/console/review")
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "the signed-out session's cookie")
	res, _ = replay.post("/console/attempts/"+a.ID.String()+"/resolve", form)
	require.Equal(t, http.StatusForbidden, res.StatusCode)
}

// Guard: a merchant session reaches another merchant's payout and charge
// through its own merchant's path as 404, never the object.
func TestReviewMerchantSessionCannotReachAnothersObjectsThroughItsOwnPath(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	// An amount no clock prints (seconds stop at 59): the page's footer
	// carries the time, and "19:53:10.000" contains "10.00" (CI failed on
	// that once).
	p, _ := e.stuckPayout("87.43") // m1's
	owner := e.client()
	owner.signIn(e.secret["m1"])
	res, body := owner.get("/console/merchants/m1/payouts/" + p.ID)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "87.43", "the marker the refusals below must not show")
	c := e.client()
	c.signIn(e.secret["m2"])
	for _, path := range []string{"/console/merchants/m2/payouts/" + p.ID, "/console/merchants/m1/payouts/" + p.ID,
		"/console/merchants/%6D1/payouts/" + p.ID} {
		res, body := c.get(path)
		require.Equal(t, http.StatusNotFound, res.StatusCode, path)
		require.NotContains(t, body, "87.43", path)
		require.NotContains(t, body, "87,43", path)
	}
}
