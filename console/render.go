package console

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/internal/replica"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// view is what every page template gets.
type view struct {
	S     *Session
	Title string
	// Nav names the active menu entry.
	Nav   string
	CSRF  string
	Flash string
	Error string
	Now   time.Time
	Data  any
	// ReplicaLag, set on a page read on the read replica, is how far
	// behind it may be (seconds, as in Saldo-Replica-Lag).
	ReplicaLag string
}

func (c *Console) funcs() template.FuncMap {
	return template.FuncMap{
		"ts": func(t any) string {
			switch v := t.(type) {
			case time.Time:
				if v.IsZero() {
					return ""
				}
				return v.UTC().Format("2006-01-02 15:04:05.000 UTC")
			case *time.Time:
				if v == nil {
					return ""
				}
				return v.UTC().Format("2006-01-02 15:04:05.000 UTC")
			}
			return fmt.Sprint(t)
		},
		"ago": func(t any) string {
			var tt time.Time
			switch v := t.(type) {
			case time.Time:
				tt = v
			case *time.Time:
				if v == nil {
					return ""
				}
				tt = *v
			}
			return fmtDuration(c.clock.Now().Sub(tt))
		},
		"dec": func(d decimal.Decimal, cur money.Currency) string { return d.StringFixed(cur.MinorUnits()) },
		"amt": func(a money.Amount) string { return a.Format() + " " + a.Currency().Code() },
		"hex": func(b []byte) string { return hex.EncodeToString(b) },
		"ms": func(a, b *time.Time) string {
			if a == nil || b == nil {
				return ""
			}
			return fmt.Sprintf("%d ms", b.Sub(*a).Milliseconds())
		},
		"neg":    func(d decimal.Decimal) bool { return d.IsNegative() },
		"short":  func(s string, n int) string { return limitText(s, n) },
		"str":    func(v any) string { return fmt.Sprint(v) },
		"can":    func(s *Session, roles ...string) bool { return s != nil && s.Can(toRoles(roles)...) },
		"slice1": func(t *ledger.Transaction) []ledger.Transaction { return []ledger.Transaction{*t} },
		"ptr":    func(t time.Time) *time.Time { return &t },
		"safeSVG": func(s string) template.HTML {
			return template.HTML(s) //nolint:gosec // built by the console from escaped numbers and labels (charts.go)
		},
	}
}

func toRoles(rs []string) []Role {
	out := make([]Role, len(rs))
	for i, r := range rs {
		out[i] = Role(r)
	}
	return out
}

func (c *Console) parseTemplates() error {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return err
	}
	c.pages = map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(path.Base(n), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(c.funcs()).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return fmt.Errorf("console: template %s: %w", n, err)
		}
		c.pages[name] = t
	}
	return nil
}

// render writes a page. The template runs into a buffer first, so a
// template error is a clean 500 and never half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, v view) {
	t, ok := c.pages[page]
	if !ok {
		c.log.ErrorContext(r.Context(), "console: no template", "page", page)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	if v.S != nil && v.CSRF == "" {
		v.CSRF = v.S.CSRF
	}
	v.Now = c.clock.Now()
	if lag, ok := replica.FromReplica(r.Context()); ok {
		v.ReplicaLag = replica.FormatLag(lag)
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", v); err != nil {
		c.log.ErrorContext(r.Context(), "console: template", "page", page, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (c *Console) renderError(w http.ResponseWriter, r *http.Request, s *Session, status int, msg string) {
	c.render(w, r, status, "error", view{S: s, Title: http.StatusText(status), Error: msg,
		Data: map[string]any{"Status": status}})
}

// notFound is the one answer for "no such" and "not yours".
func (c *Console) notFound(w http.ResponseWriter, r *http.Request, s *Session) {
	c.renderError(w, r, s, http.StatusNotFound, "Nothing here: it does not exist, or it is not yours to see.")
}
