package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
)

// "Bad input gets a clear 4xx and loses nothing; every 5xx a client can
// trigger is a defect": the resolve form's evidence goes into a jsonb
// column, which refuses \u0000 escapes, lone surrogates and numbers past
// numeric's range that json.Valid accepts. attempts.ResolveManually refuses
// them first (ErrInvalidEvidence), so the form answers 422 with the
// operator's input kept, never 500 with the database's error text.
func TestResolveEvidenceRefusedByJSONBIs422(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	_, a := e.stuckPayout("10.00")
	c := e.client()
	token := c.signIn(e.secret["operator"])
	path := "/console/attempts/" + a.ID.String() + "/resolve"
	for _, ev := range []string{`{"a":"\u0000"}`, `{"a":"\ud800"}`, `[1e1000000]`} {
		res, body := c.post(path, url.Values{"csrf": {token}, "status": {"succeeded"},
			"reason": {"the PSP's dashboard shows it paid"}, "evidence": {ev}})
		require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, "%s: %s", ev, errorOf(body))
		require.Contains(t, errorOf(body), "evidence", ev)
		require.NotContains(t, body, "SQLSTATE", ev)
		require.Contains(t, body, "the PSP&#39;s dashboard shows it paid", "the form keeps what was typed")
	}
	got, err := e.e.Attempts.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, got.Status, "refused evidence changed nothing")
	_, err = e.e.Attempts.Resolve(e.ctx, a.ID) // settle so the test ends with nothing open
	require.NoError(t, err)
}

func errorOf(body string) string {
	m := csrfRe.ReplaceAllString(body, "")
	if i := strings.Index(m, `id="error"`); i >= 0 {
		return m[i:min(len(m), i+300)]
	}
	return m[:min(len(m), 300)]
}

// The resolve form bounds the reason as the API does (checkOperatorReason):
// 2000 characters, not bytes, so 2000 two-byte characters are accepted and
// 2001 refused (422, nothing changed).
func TestResolveReasonCountsCharacters(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	_, a := e.stuckPayout("10.00")
	c := e.client()
	token := c.signIn(e.secret["operator"])
	path := "/console/attempts/" + a.ID.String() + "/resolve"
	res, body := c.post(path, url.Values{"csrf": {token}, "status": {"succeeded"}, "reason": {strings.Repeat("é", 2001)}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, errorOf(body))
	require.Equal(t, attempts.StatusUnknown, e.attemptStatus(a))
	res, body = c.post(path, url.Values{"csrf": {token}, "status": {"succeeded"}, "reason": {strings.Repeat("é", 2000)}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode, errorOf(body))
	require.Equal(t, attempts.StatusSucceeded, e.attemptStatus(a))
}
