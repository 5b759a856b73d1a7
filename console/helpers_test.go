package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/console"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// lostProvider is the sim whose lookups by reference can be made to answer
// a clean "not found" (lost.Store(true)): a provider whose search does not
// show an operation, which is what lets an operator's manual "failed"
// through the attempts core (a lookup past the consistency window came
// back not found, R16). Everything else is the sim's.
type lostProvider struct {
	*sim.Provider
	lost atomic.Bool
}

func (p *lostProvider) Lookup(ctx context.Context, op providers.Operation, reference string) (providers.LookupResult, error) {
	if !p.lost.Load() {
		return p.Provider.Lookup(ctx, op, reference)
	}
	now := time.Now()
	return providers.LookupResult{Exchange: providers.Exchange{Method: http.MethodGet, URL: "sim://lookup/" + reference,
		Connected: true, Wrote: true, WireCalls: 1, StatusCode: http.StatusNotFound, Started: now, Ended: now}}, nil
}

// env is one test's saldo: its own database, the sim over real HTTP, the
// engine (no River workers: tests drive Execute), the console on an
// httptest server, merchants m1 (100.00 BRL) and m2, and a key per role.
type env struct {
	t     *testing.T
	ctx   context.Context
	pool  *pgxpool.Pool
	clock *sim.ManualClock
	srv   *sim.Server
	prov  *lostProvider
	e     *engine.Engine
	con   *console.Console
	web   *httptest.Server
	// secret and key id per name: operator, auditor, admin, m1, m2
	secret map[string]string
	keyID  map[string]string
}

type envOpts struct {
	sim          sim.Config
	insecure     bool
	unknownAfter time.Duration
	queuePage    int
	breaker      attempts.BreakerConfig
}

func setup(t *testing.T, o envOpts) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, ctx: ctx, pool: testdb.New(t), clock: sim.NewManualClock(time.Now().UTC().Truncate(time.Second)),
		secret: map[string]string{}, keyID: map[string]string{}}
	o.sim.Clock = e.clock.Now
	e.srv = sim.NewServer(o.sim).Start()
	t.Cleanup(e.srv.Close)
	// The read timeout ends stuckPayout's hung call; every other call must
	// be answered within it, which 300 ms did not leave a loaded machine
	// much room for (a late answer reads as unknown and fails the test).
	e.prov = &lostProvider{Provider: e.srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{
		ConnectTimeout: time.Second, ReadTimeout: time.Second}))}
	var err error
	e.e, err = engine.New(engine.Config{Pool: e.pool, Providers: []providers.Provider{e.prov},
		PayoutProvider: e.prov.Name(), ChargeProvider: e.prov.Name(), Clock: e.clock,
		Attempts: attempts.Config{Breaker: o.breaker}})
	require.NoError(t, err)
	e.con, err = console.New(console.Config{Pool: e.pool, Attempts: e.e.Attempts, Payouts: e.e.Payouts,
		Charges: e.e.Charges, Clock: e.clock, Insecure: o.insecure, UnknownAfter: o.unknownAfter, QueuePageSize: o.queuePage})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(console.Prefix, e.con)
	mux.Handle(console.Prefix+"/", e.con)
	e.web = httptest.NewServer(mux)
	t.Cleanup(e.web.Close)

	for _, m := range []string{"m1", "m2"} {
		_, err := merchants.Create(ctx, e.pool, m, "Loja "+m)
		require.NoError(t, err)
	}
	_, err = merchants.Fund(ctx, e.pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("100.00", "BRL"),
		Key: "initial", Reason: "test funding", Actor: "test"})
	require.NoError(t, err)
	for name, role := range map[string]api.Role{"operator": api.RoleOperator, "auditor": api.RoleAuditor,
		"admin": api.RoleAdmin, "m1": api.RoleMerchant, "m2": api.RoleMerchant} {
		m := ""
		if role == api.RoleMerchant {
			m = name
		}
		k, secret, err := api.CreateKey(ctx, e.pool, role, m, "console test "+name, e.clock.Now())
		require.NoError(t, err)
		e.secret[name], e.keyID[name] = secret, k.ID
	}
	t.Cleanup(func() {
		res, err := audit.Run(context.Background(), e.pool)
		require.NoError(t, err)
		require.True(t, res.OK(), res.Summary())
	})
	return e
}

// stuckPayout makes a Pix transfer of m1 whose call hangs after the
// provider committed it (the sim's hang_after fault): the attempt is
// unknown and the reserve holds.
func (e *env) stuckPayout(amount string) (payouts.Payout, attempts.Attempt) {
	e.t.Helper()
	require.NoError(e.t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultHangAfter, Times: 1}))
	p, err := e.e.Payouts.CreatePayout(e.ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: money.MustParse(amount, "BRL"), Destination: pixDestination()})
	require.NoError(e.t, err)
	res, err := e.e.Attempts.Execute(e.ctx, *p.CurrentAttemptID)
	require.NoError(e.t, err)
	require.Equal(e.t, attempts.StatusUnknown, res.Attempt.Status)
	return p, res.Attempt
}

// client is a cookie-keeping HTTP client that does not follow redirects.
type client struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func (e *env) client() *client {
	jar, err := cookiejar.New(nil)
	require.NoError(e.t, err)
	return &client{t: e.t, base: e.web.URL, hc: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *client) do(req *http.Request) (*http.Response, string) {
	c.t.Helper()
	res, err := c.hc.Do(req)
	require.NoError(c.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(c.t, err)
	return res, string(b)
}

func (c *client) get(path string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	require.NoError(c.t, err)
	return c.do(req)
}

func (c *client) post(path string, form url.Values) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(form.Encode()))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return c.do(req)
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, body string) string {
	t.Helper()
	m := csrfRe.FindStringSubmatch(body)
	require.NotNil(t, m, "no CSRF token in the page")
	return m[1]
}

// signIn signs the client in with the key and returns the session's CSRF
// token.
func (c *client) signIn(secret string) string {
	c.t.Helper()
	_, body := c.get("/console/login")
	res, _ := c.post("/console/login", url.Values{"csrf": {csrfOf(c.t, body)}, "key": {secret}})
	require.Equal(c.t, http.StatusSeeOther, res.StatusCode)
	res, body = c.get("/console/")
	if res.StatusCode == http.StatusSeeOther {
		res, body = c.get(res.Header.Get("Location"))
	}
	require.Equal(c.t, http.StatusOK, res.StatusCode, body)
	return csrfOf(c.t, body)
}

func pixDestination() *providers.Destination {
	return &providers.Destination{PixKey: &providers.PixKey{Type: payouts.PixKeyEmail, Value: "joao@example.com"}}
}
