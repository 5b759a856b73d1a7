package console_test

// Sessions and login links.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/console"
)

// docs/console.md, "Signing in": "Expired rows are deleted as new sessions
// are made. The same goes for login links (console_login_links)." newSession
// deletes both expired console_sessions and expired login links. Before, it
// deleted expired sessions only, and expired login links were never deleted
// by anything (found by review).
func TestExpiredLoginLinksAreDeletedAsSessionsAreMade(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	_, err := console.CreateLoginLink(e.ctx, e.pool, e.keyID["operator"], time.Minute, e.clock.Now())
	require.NoError(t, err)
	first := e.client()
	first.signIn(e.secret["auditor"])
	e.clock.Advance(9 * time.Hour) // the link and the first session expired
	e.client().signIn(e.secret["auditor"])
	var sessions, links int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM console_sessions WHERE expires_at < $1`, e.clock.Now()).Scan(&sessions))
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM console_login_links WHERE expires_at < $1`, e.clock.Now()).Scan(&links))
	require.Zero(t, sessions, "expired sessions are deleted as new ones are made")
	require.Zero(t, links, "expired login links are deleted as new sessions are made (docs/console.md)")
}
