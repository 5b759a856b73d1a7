package console_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/console"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

func cookieNamed(res *http.Response, name string) *http.Cookie {
	for _, c := range res.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Sign-in exchanges a key for a session cookie (HttpOnly, Secure,
// SameSite=Strict, expiring, scoped to /console); a bad key is 401 and
// sets none; sign-out ends the session server-side, so the old cookie no
// longer works.
func TestSessionSignInAndOut(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{}) // Secure cookies
	c := e.client()
	res, body := c.get("/console/review")
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "no session: to the sign-in page")
	require.Equal(t, "/console/login?next=%2Fconsole%2Freview", res.Header.Get("Location"))

	res, body = c.get("/console/login")
	require.Equal(t, http.StatusOK, res.StatusCode)
	lc := cookieNamed(res, console.LoginCookie)
	require.NotNil(t, lc)
	require.True(t, lc.HttpOnly && lc.Secure)
	require.Equal(t, http.SameSiteStrictMode, lc.SameSite)
	token := csrfOf(t, body)
	require.Equal(t, lc.Value, token)

	post := func(key string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, e.web.URL+"/console/login",
			strings.NewReader(url.Values{"csrf": {token}, "key": {key}, "next": {"/console/review"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(&http.Cookie{Name: console.LoginCookie, Value: token})
		r, b := c.do(req)
		body = b
		return r
	}
	res = post("sk_nottherealkey")
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	require.Nil(t, cookieNamed(res, console.SessionCookie))
	require.Contains(t, body, "not valid")

	res = post(e.secret["operator"])
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/console/review", res.Header.Get("Location"))
	sc := cookieNamed(res, console.SessionCookie)
	require.NotNil(t, sc)
	require.True(t, sc.HttpOnly, "HttpOnly")
	require.True(t, sc.Secure, "Secure outside dev")
	require.Equal(t, http.SameSiteStrictMode, sc.SameSite)
	require.Equal(t, "/console", sc.Path)
	require.Equal(t, int((8 * time.Hour).Seconds()), sc.MaxAge, "expiring")
	require.Len(t, sc.Value, 43, "256 random bits")
	var stored int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM console_sessions WHERE token_sha256 = sha256($1::bytea)`,
		[]byte(sc.Value)).Scan(&stored))
	require.Equal(t, 1, stored, "only the token's sha256 is stored")

	// The session works (the jar does not send Secure cookies over http:
	// send it by hand).
	get := func(path string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodGet, e.web.URL+path, nil)
		req.AddCookie(&http.Cookie{Name: console.SessionCookie, Value: sc.Value})
		return c.do(req)
	}
	res, body = get("/console/review")
	require.Equal(t, http.StatusOK, res.StatusCode)
	sessCSRF := csrfOf(t, body)

	// Sign-out: POST with the CSRF token.
	req, _ := http.NewRequest(http.MethodPost, e.web.URL+"/console/logout", strings.NewReader(url.Values{"csrf": {sessCSRF}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: console.SessionCookie, Value: sc.Value})
	res, _ = c.do(req)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, -1, cookieNamed(res, console.SessionCookie).MaxAge)
	res, _ = get("/console/review")
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "the old cookie no longer signs in")
}

// A session ends when it expires and when its key is revoked.
func TestSessionExpiresAndFollowsKeyRevocation(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	c := e.client()
	c.signIn(e.secret["auditor"])
	res, _ := c.get("/console/ledger")
	require.Equal(t, http.StatusOK, res.StatusCode)
	e.clock.Advance(8*time.Hour + time.Second)
	res, _ = c.get("/console/ledger")
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "expired")

	c = e.client()
	c.signIn(e.secret["auditor"])
	require.NoError(t, api.RevokeKey(e.ctx, e.pool, e.keyID["auditor"], e.clock.Now()))
	res, _ = c.get("/console/ledger")
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "revoked key: the session is over")
	_, body := c.get("/console/login")
	res, _ = c.post("/console/login", url.Values{"csrf": {csrfOf(t, body)}, "key": {e.secret["auditor"]}})
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
}

// Every form needs its CSRF token: sign-in, resolve, audit run, sign-out.
// A missing or wrong token is 403 and changes nothing.
func TestCSRFTokenRequired(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	_, a := e.stuckPayout("10.00")

	c := e.client()
	c.get("/console/login")
	res, _ := c.post("/console/login", url.Values{"key": {e.secret["operator"]}})
	require.Equal(t, http.StatusForbidden, res.StatusCode, "sign-in without its token")
	res, _ = c.post("/console/login", url.Values{"key": {e.secret["operator"]}, "csrf": {"x" + strings.Repeat("y", 42)}})
	require.Equal(t, http.StatusForbidden, res.StatusCode, "sign-in with a wrong token")

	token := c.signIn(e.secret["operator"])
	form := url.Values{"status": {"succeeded"}, "reason": {"the PSP's dashboard shows it paid"}}
	res, body := c.post("/console/attempts/"+a.ID.String()+"/resolve", form)
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	require.Contains(t, body, "CSRF token is missing or wrong")
	form.Set("csrf", token+"x")
	res, _ = c.post("/console/attempts/"+a.ID.String()+"/resolve", form)
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	got, err := e.e.Attempts.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, got.Status, "nothing changed")

	// A form from another site is refused even with the token.
	form.Set("csrf", token)
	req, _ := http.NewRequest(http.MethodPost, e.web.URL+"/console/attempts/"+a.ID.String()+"/resolve", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	res, _ = c.do(req)
	require.Equal(t, http.StatusForbidden, res.StatusCode)

	res, _ = c.post("/console/logout", url.Values{})
	require.Equal(t, http.StatusForbidden, res.StatusCode, "sign-out needs the token too")

	// With the token the operator's decision is recorded.
	res, _ = c.post("/console/attempts/"+a.ID.String()+"/resolve", form)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	got, err = e.e.Attempts.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, got.Status)
	evs, err := e.e.Attempts.Events(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	last := evs[len(evs)-1]
	require.Equal(t, attempts.EventTransition, last.Type)
	require.Equal(t, attempts.ActorOperator, last.Actor)
	require.Equal(t, e.keyID["operator"], last.ActorID, "the operator (key id) is recorded")
	require.Equal(t, "the PSP's dashboard shows it paid", last.Reason)
}

// Roles are the API's: auditors read everything and write nothing but an
// audit run; operators resolve but do not read the books; a merchant sees
// only its own merchant, with one answer for "no such" and "not yours".
func TestRoles(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true, unknownAfter: time.Minute})
	p, a := e.stuckPayout("10.00")
	e.clock.Advance(2 * time.Minute)
	attemptPath := "/console/attempts/" + a.ID.String()
	payoutPath := "/console/merchants/m1/payouts/" + p.ID

	auditor := e.client()
	token := auditor.signIn(e.secret["auditor"])
	for _, path := range []string{"/console/", "/console/review", attemptPath, "/console/merchants", "/console/merchants/m1",
		payoutPath, "/console/ledger", "/console/ledger/account?code=" + url.QueryEscape("merchant/m1/available/BRL"),
		"/console/audit", "/console/charts"} {
		res, body := auditor.get(path)
		require.Equal(t, http.StatusOK, res.StatusCode, path)
		require.Equal(t, console.CSP, res.Header.Get("Content-Security-Policy"), path)
		require.NotContains(t, body, "<script", path)
		if path == attemptPath {
			require.NotContains(t, body, `id="resolve"`, "no resolve form for an auditor")
			require.Contains(t, body, "payout_reserve", "the auditor sees the ledger effect")
		}
	}
	res, _ := auditor.post(attemptPath+"/resolve", url.Values{"csrf": {token}, "status": {"failed"}, "reason": {"x"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode, "an auditor never resolves")
	res, _ = auditor.post("/console/audit/run", url.Values{"csrf": {token}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode, "an auditor may run verification")
	_, body := auditor.get("/console/audit")
	require.Contains(t, body, "Last result: OK")

	op := e.client()
	op.signIn(e.secret["operator"])
	res, body = op.get(attemptPath)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `id="resolve"`)
	res, body = op.get("/console/review")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, a.Reference, "the stuck payout is in the queue")
	require.Contains(t, body, "10.00 BRL")
	for _, path := range []string{"/console/ledger", payoutPath, "/console/audit"} {
		res, _ = op.get(path)
		require.Equal(t, http.StatusForbidden, res.StatusCode, path)
	}

	m2 := e.client()
	m2.signIn(e.secret["m2"])
	res, _ = m2.get("/console/merchants/m2")
	require.Equal(t, http.StatusOK, res.StatusCode)
	res, notYours := m2.get("/console/merchants/m1")
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	res, noSuch := m2.get("/console/merchants/nosuch")
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	mainOf := func(page string) string {
		_, rest, _ := strings.Cut(page, "<main>")
		m, _, _ := strings.Cut(rest, "</main>")
		return m
	}
	require.Equal(t, mainOf(notYours), mainOf(noSuch), "same answer")
	require.NotEmpty(t, mainOf(noSuch))
	res, _ = m2.get("/console/merchants/m1/payouts/" + p.ID)
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	res, _ = m2.get("/console/merchants/m2/payouts/" + p.ID)
	require.Equal(t, http.StatusNotFound, res.StatusCode, "m1's payout under m2's path")
	for _, path := range []string{"/console/review", attemptPath, "/console/ledger", "/console/merchants"} {
		res, _ = m2.get(path)
		require.Equal(t, http.StatusForbidden, res.StatusCode, path)
	}

	m1 := e.client()
	m1.signIn(e.secret["m1"])
	res, body = m1.get(payoutPath)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NotContains(t, body, "payout_reserve", "merchants do not read the ledger")
	res, body = m1.get("/console/merchants/m1")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "90.00", "available")
	require.Contains(t, body, "10.00", "reserved")

	// Settle so the test ends with nothing open.
	_, err := e.e.Attempts.Resolve(e.ctx, a.ID)
	require.NoError(t, err)
}

// The resolve form refuses what the API refuses and shows the core's
// reason: a manual "failed" before the consistency window has passed.
func TestResolveShowsRefusal(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	_, a := e.stuckPayout("10.00")
	c := e.client()
	token := c.signIn(e.secret["operator"])
	path := "/console/attempts/" + a.ID.String() + "/resolve"
	res, body := c.post(path, url.Values{"csrf": {token}, "status": {"failed"}, "reason": {""}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, "a reason is required")
	res, body = c.post(path, url.Values{"csrf": {token}, "status": {"failed"}, "reason": {"PSP says it never arrived"}})
	require.Equal(t, http.StatusConflict, res.StatusCode)
	require.Contains(t, body, "Refused:")
	require.Contains(t, body, "consistency window")
	require.Contains(t, body, "PSP says it never arrived", "the form keeps what was typed")

	// After the window the core looks the reference up: the sim has it
	// (it paid), so "failed" is refused again, naming what it found.
	e.clock.Advance(time.Minute)
	res, body = c.post(path, url.Values{"csrf": {token}, "status": {"failed"}, "reason": {"PSP says it never arrived"}})
	require.Equal(t, http.StatusConflict, res.StatusCode)
	require.Contains(t, body, "found the operation at the provider")
	// Its answer resolves it.
	_, err := e.e.Attempts.Resolve(e.ctx, a.ID)
	require.NoError(t, err)
	res, body = c.post(path, url.Values{"csrf": {token}, "status": {"failed"}, "reason": {"PSP says it never arrived"}})
	require.Equal(t, http.StatusConflict, res.StatusCode)
	require.Contains(t, body, "already final")
	b, err := ledger.MerchantBalanceIn(e.ctx, e.pool, "m1", money.MustParse("1", "BRL").Currency())
	require.NoError(t, err)
	require.Equal(t, "90.00", b.Available.StringFixed(2), "paid: nothing released")
}

// A one-time login link signs in once.
func TestLoginLinkWorksOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	tok, err := console.CreateLoginLink(e.ctx, e.pool, e.keyID["operator"], time.Hour, e.clock.Now())
	require.NoError(t, err)
	c := e.client()
	res, body := c.get("/console/login/link?t=" + tok)
	require.Equal(t, http.StatusOK, res.StatusCode)
	csrf := csrfOf(t, body)
	res, _ = c.post("/console/login/link", url.Values{"t": {tok}})
	require.Equal(t, http.StatusForbidden, res.StatusCode, "no CSRF token")
	res, _ = c.post("/console/login/link", url.Values{"t": {tok}, "csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	res, _ = c.get("/console/review")
	require.Equal(t, http.StatusOK, res.StatusCode)

	again := e.client()
	_, body = again.get("/console/login/link?t=" + tok)
	res, _ = again.post("/console/login/link", url.Values{"t": {tok}, "csrf": {csrfOf(t, body)}})
	require.Equal(t, http.StatusForbidden, res.StatusCode, "used")
}

// The sign-in redirect stays inside the console.
func TestNextStaysInConsole(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	for next, want := range map[string]string{"/console/ledger": "/console/ledger", "https://evil.example/": "/console/",
		"//evil.example/console/": "/console/", "/console/login": "/console/"} {
		c := e.client()
		_, body := c.get("/console/login")
		res, _ := c.post("/console/login", url.Values{"csrf": {csrfOf(t, body)}, "key": {e.secret["auditor"]}, "next": {next}})
		require.Equal(t, want, res.Header.Get("Location"), next)
	}
}

// The review queue pages: each part (flagged, old unknown) with its own
// cursor, oldest first.
func TestReviewQueuePages(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true, unknownAfter: time.Minute, queuePage: 1})
	var refs []string
	for _, amt := range []string{"1.00", "2.00", "3.00"} {
		_, a := e.stuckPayout(amt)
		refs = append(refs, a.Reference)
		e.clock.Advance(time.Second)
	}
	e.clock.Advance(2 * time.Minute)
	c := e.client()
	c.signIn(e.secret["operator"])
	path := "/console/review"
	for i, ref := range refs {
		res, body := c.get(path)
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Contains(t, body, ref, "page %d", i)
		for j, other := range refs {
			if j != i {
				require.NotContains(t, body, other, "page %d", i)
			}
		}
		m := regexp.MustCompile(`href="(/console/review\?[^"]+)" id="more"`).FindStringSubmatch(body)
		if i == len(refs)-1 {
			require.Nil(t, m, "the last page")
			break
		}
		require.NotNil(t, m, "page %d", i)
		path = html.UnescapeString(m[1])
	}
	res, _ := c.get("/console/review?uq=bogus")
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	for _, a := range refs {
		got, err := e.e.Attempts.GetByReference(e.ctx, e.pool, a)
		require.NoError(t, err)
		_, err = e.e.Attempts.Resolve(e.ctx, got.ID)
		require.NoError(t, err)
	}
}
