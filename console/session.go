package console

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
)

// Role is an API key's role; the console's roles are the API's.
type Role = api.Role

// The roles.
const (
	RoleMerchant = api.RoleMerchant
	RoleAuditor  = api.RoleAuditor
	RoleOperator = api.RoleOperator
	RoleAdmin    = api.RoleAdmin
)

// Cookie names. Both are scoped to /console.
const (
	SessionCookie = "saldo_console"
	// LoginCookie carries the double-submit CSRF token of the sign-in
	// forms (there is no session yet).
	LoginCookie = "saldo_console_login"
	// CSRFField is the form field every POST carries.
	CSRFField = "csrf"
)

// Session is a signed-in browser: the API key it was opened with.
type Session struct {
	KeyID      string
	Role       Role
	MerchantID string
	CSRF       string
	ExpiresAt  time.Time
}

// Can reports whether the session's role is one of roles.
func (s *Session) Can(roles ...Role) bool {
	if s == nil {
		return false
	}
	for _, r := range roles {
		if s.Role == r {
			return true
		}
	}
	return false
}

// ErrBadKey: the key is unknown, revoked or malformed.
var ErrBadKey = errors.New("console: unknown or revoked API key")

// keyBySecret finds a live API key by its secret, as the API's
// authentication does (sha256 of the secret, not revoked).
func keyBySecret(ctx context.Context, db ledger.DBTX, secret string) (id string, role Role, merchantID string, err error) {
	secret = strings.TrimSpace(secret)
	if !strings.HasPrefix(secret, api.SecretPrefix) || len(secret) > 200 {
		return "", "", "", ErrBadKey
	}
	var r string
	var m *string
	err = db.QueryRow(ctx, `SELECT id, role, merchant_id FROM api_keys WHERE secret_sha256 = $1 AND revoked_at IS NULL`,
		sha(secret)).Scan(&id, &r, &m)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", "", ErrBadKey
	}
	if err != nil {
		return "", "", "", err
	}
	if m != nil {
		merchantID = *m
	}
	return id, Role(r), merchantID, nil
}

// newSession stores a session for the key and returns its cookie token.
func (c *Console) newSession(ctx context.Context, keyID string) (string, time.Time, error) {
	now := c.clock.Now()
	token := randomToken()
	exp := now.Add(c.cfg.SessionTTL)
	// Expired sessions and login links are removed as new sessions are
	// made (docs/console.md).
	if _, err := c.pool.Exec(ctx, `DELETE FROM console_sessions WHERE expires_at < $1`, now); err != nil {
		return "", time.Time{}, err
	}
	if _, err := c.pool.Exec(ctx, `DELETE FROM console_login_links WHERE expires_at < $1`, now); err != nil {
		return "", time.Time{}, err
	}
	_, err := c.pool.Exec(ctx, `INSERT INTO console_sessions (token_sha256, key_id, csrf_token, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5)`, sha(token), keyID, randomToken(), now, exp)
	return token, exp, err
}

// loadSession reads the request's session: nil when there is none, it
// expired, or its key was revoked.
func (c *Console) loadSession(r *http.Request) (*Session, error) {
	ck, err := r.Cookie(SessionCookie)
	if err != nil || ck.Value == "" || len(ck.Value) > 100 {
		return nil, nil
	}
	var s Session
	var role string
	var m *string
	err = c.pool.QueryRow(r.Context(), `SELECT s.key_id, k.role, k.merchant_id, s.csrf_token, s.expires_at
		FROM console_sessions s JOIN api_keys k ON k.id = s.key_id
		WHERE s.token_sha256 = $1 AND s.expires_at > $2 AND k.revoked_at IS NULL`,
		sha(ck.Value), c.clock.Now()).Scan(&s.KeyID, &role, &m, &s.CSRF, &s.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.Role = Role(role)
	if m != nil {
		s.MerchantID = *m
	}
	if slot, ok := r.Context().Value(keySlot{}).(*string); ok {
		*slot = s.KeyID
	}
	return &s, nil
}

func (c *Console) setCookie(w http.ResponseWriter, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: Prefix, MaxAge: maxAge,
		HttpOnly: true, Secure: !c.cfg.Insecure, SameSite: http.SameSiteStrictMode})
}

// CreateLoginLink makes a one-time login link token for the key, valid for
// ttl: /console/login/link?t=TOKEN signs the browser in as that key once
// (saldo dev prints one for the demo operator).
func CreateLoginLink(ctx context.Context, db ledger.DBTX, keyID string, ttl time.Duration, now time.Time) (string, error) {
	token := randomToken()
	_, err := db.Exec(ctx, `INSERT INTO console_login_links (token_sha256, key_id, created_at, expires_at)
		VALUES ($1, $2, $3, $4)`, sha(token), keyID, now, now.Add(ttl))
	return token, err
}

// ---- middleware ----

type handlerFunc func(w http.ResponseWriter, r *http.Request, s *Session)

// session requires a session (any role); used by sign-out, which checks
// CSRF itself.
func (c *Console) session(h handlerFunc) http.Handler {
	return c.form([]Role{RoleMerchant, RoleAuditor, RoleOperator, RoleAdmin}, h)
}

// page guards a GET page: no session redirects to sign-in; a role not
// listed is 403.
func (c *Console) page(roles []Role, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := c.loadSession(r)
		if err != nil {
			c.internal(w, r, nil, err)
			return
		}
		if s == nil {
			http.Redirect(w, r, Prefix+"/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if !s.Can(roles...) {
			c.renderError(w, r, s, http.StatusForbidden, "Your role ("+string(s.Role)+") may not open this page.")
			return
		}
		h(w, r, s)
	})
}

// merchantPage guards /console/merchants/{mid}/...: like page, and a
// merchant key sees only its own merchant. Another merchant's page and a
// merchant that does not exist get the same 404.
func (c *Console) merchantPage(roles []Role, h handlerFunc) http.Handler {
	return c.page(roles, func(w http.ResponseWriter, r *http.Request, s *Session) {
		mid := r.PathValue("mid")
		if s.Role == RoleMerchant {
			if mid != s.MerchantID {
				c.notFound(w, r, s)
				return
			}
		} else if _, err := merchants.Get(r.Context(), c.pool, mid); err != nil {
			if errors.Is(err, merchants.ErrNotFound) {
				c.notFound(w, r, s)
				return
			}
			c.internal(w, r, s, err)
			return
		}
		h(w, r, s)
	})
}

// maxFormBytes bounds a form body.
const maxFormBytes = 64 << 10

// form guards a POST: it needs a session (403 without one), a request from
// the console's own origin when the browser names one, the session's CSRF
// token, and one of roles. Anything else is 403 and nothing is done.
func (c *Console) form(roles []Role, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := c.loadSession(r)
		if err != nil {
			c.internal(w, r, nil, err)
			return
		}
		if s == nil {
			c.renderError(w, r, nil, http.StatusForbidden, "You are not signed in (or your session expired).")
			return
		}
		if !sameOrigin(r) {
			c.renderError(w, r, s, http.StatusForbidden, "The form was sent from another site.")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil || !cleanValues(r.PostForm) {
			c.renderError(w, r, s, http.StatusBadRequest, "The form could not be read (or holds NUL or invalid UTF-8).")
			return
		}
		if !tokensEqual(r.PostForm.Get(CSRFField), s.CSRF) {
			c.log.WarnContext(r.Context(), "console: form without a valid CSRF token refused", "path", r.URL.Path, "key_id", s.KeyID)
			c.renderError(w, r, s, http.StatusForbidden, "The form's CSRF token is missing or wrong: reload the page and send it again.")
			return
		}
		if !s.Can(roles...) {
			c.renderError(w, r, s, http.StatusForbidden, "Your role ("+string(s.Role)+") may not do this.")
			return
		}
		h(w, r, s)
	})
}

func tokensEqual(a, b string) bool {
	return a != "" && b != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// sameOrigin: a browser's Origin header, when present, must name this host.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" {
		return false
	}
	return u.Host == r.Host
}

// ---- sign-in and sign-out ----

// loginToken returns the double-submit token of the sign-in forms, setting
// its cookie when the browser has none.
func (c *Console) loginToken(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(LoginCookie); err == nil && len(ck.Value) >= 32 && len(ck.Value) <= 100 {
		return ck.Value
	}
	t := randomToken()
	c.setCookie(w, LoginCookie, t, 3600)
	return t
}

func (c *Console) checkLoginToken(w http.ResponseWriter, r *http.Request) bool {
	if !sameOrigin(r) {
		c.renderError(w, r, nil, http.StatusForbidden, "The form was sent from another site.")
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil || !cleanValues(r.PostForm) {
		c.renderError(w, r, nil, http.StatusBadRequest, "The form could not be read (or holds NUL or invalid UTF-8).")
		return false
	}
	ck, err := r.Cookie(LoginCookie)
	if err != nil || !tokensEqual(r.PostForm.Get(CSRFField), ck.Value) {
		c.renderError(w, r, nil, http.StatusForbidden, "The form's CSRF token is missing or wrong: reload the sign-in page and try again.")
		return false
	}
	return true
}

type loginView struct {
	Next  string
	Token string // login link token
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if s, err := c.loadSession(r); err == nil && s != nil {
		http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "login", view{Title: "Sign in", CSRF: c.loginToken(w, r),
		Data: loginView{Next: safeNext(r.URL.Query().Get("next"))}})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if !c.checkLoginToken(w, r) {
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	keyID, role, _, err := keyBySecret(r.Context(), c.pool, r.PostForm.Get("key"))
	if errors.Is(err, ErrBadKey) {
		c.render(w, r, http.StatusUnauthorized, "login", view{Title: "Sign in", CSRF: c.loginToken(w, r),
			Error: "That key is not valid: unknown, revoked or mistyped.", Data: loginView{Next: next}})
		return
	}
	if err != nil {
		c.internal(w, r, nil, err)
		return
	}
	c.startSession(w, r, keyID, role, next)
}

func (c *Console) startSession(w http.ResponseWriter, r *http.Request, keyID string, role Role, next string) {
	token, _, err := c.newSession(r.Context(), keyID)
	if err != nil {
		c.internal(w, r, nil, err)
		return
	}
	c.log.InfoContext(r.Context(), "console: signed in", "key_id", keyID, "role", role)
	c.setCookie(w, SessionCookie, token, int(c.cfg.SessionTTL/time.Second))
	c.setCookie(w, LoginCookie, "", -1)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) linkPage(w http.ResponseWriter, r *http.Request) {
	t := r.URL.Query().Get("t")
	if t == "" || len(t) > 100 {
		c.renderError(w, r, nil, http.StatusNotFound, "This login link is not valid.")
		return
	}
	c.render(w, r, http.StatusOK, "link", view{Title: "Sign in with a link", CSRF: c.loginToken(w, r),
		Data: loginView{Token: t}})
}

func (c *Console) linkLogin(w http.ResponseWriter, r *http.Request) {
	if !c.checkLoginToken(w, r) {
		return
	}
	t := r.PostForm.Get("t")
	now := c.clock.Now()
	var keyID, role string
	err := c.pool.QueryRow(r.Context(), `WITH used AS (
			UPDATE console_login_links SET used_at = $2
			WHERE token_sha256 = $1 AND used_at IS NULL AND expires_at > $2 RETURNING key_id)
		SELECT k.id, k.role FROM used JOIN api_keys k ON k.id = used.key_id WHERE k.revoked_at IS NULL`,
		sha(t), now).Scan(&keyID, &role)
	if errors.Is(err, pgx.ErrNoRows) {
		c.renderError(w, r, nil, http.StatusForbidden, "This login link was already used, expired, or is not valid. Sign in with a key.")
		return
	}
	if err != nil {
		c.internal(w, r, nil, err)
		return
	}
	c.startSession(w, r, keyID, Role(role), Prefix+"/")
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, s *Session) {
	ck, _ := r.Cookie(SessionCookie)
	if ck != nil {
		if _, err := c.pool.Exec(r.Context(), `DELETE FROM console_sessions WHERE token_sha256 = $1`, sha(ck.Value)); err != nil {
			c.internal(w, r, s, err)
			return
		}
	}
	c.setCookie(w, SessionCookie, "", -1)
	http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
}

// safeNext keeps a post-sign-in redirect inside the console.
func safeNext(n string) string {
	if !strings.HasPrefix(n, Prefix+"/") || strings.HasPrefix(n, "//") || strings.ContainsAny(n, "\\\r\n") ||
		strings.HasPrefix(n, Prefix+"/login") {
		return Prefix + "/"
	}
	return n
}
