package replica_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/console"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/replica"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// answer is one HTTP exchange with the API.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(a.body, &m), string(a.body))
	return m
}

// lag is the answer's Saldo-Replica-Lag in seconds, and whether it is there.
func (a answer) lag(t *testing.T) (float64, bool) {
	t.Helper()
	v := a.header.Get(replica.LagHeader)
	if v == "" {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	require.NoError(t, err, v)
	require.GreaterOrEqual(t, f, 0.0)
	return f, true
}

func call(t *testing.T, base, method, path, key, idem string, body any) answer {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return answer{status: res.StatusCode, header: res.Header, body: b}
}

// browser is a console client keeping its session cookie.
type browser struct {
	base string
	hc   *http.Client
}

func (b *browser) get(t *testing.T, path string) answer {
	t.Helper()
	res, err := b.hc.Get(b.base + path)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return answer{status: res.StatusCode, header: res.Header, body: body}
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// signIn opens a console session with an API key.
func signIn(t *testing.T, base, secret string) *browser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	b := &browser{base: base, hc: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	m := csrfRe.FindStringSubmatch(string(b.get(t, "/console/login").body))
	require.NotNil(t, m, "no CSRF token on the login page")
	res, err := b.hc.PostForm(base+"/console/login", url.Values{"csrf": {m[1]}, "key": {secret}})
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	return b
}

// onReplica repeats a request until the replica answers it (a measurement
// can fail on a busy machine, and the primary then answers) and returns
// that answer: 200 with Saldo-Replica-Lag.
func onReplica(t *testing.T, do func() answer) answer {
	t.Helper()
	var a answer
	require.Eventually(t, func() bool {
		a = do()
		_, ok := a.lag(t)
		return ok
	}, 10*time.Second, 20*time.Millisecond, "read on the replica")
	require.Equal(t, http.StatusOK, a.status, string(a.body))
	return a
}

// available is m1's available BRL balance in a balances answer ("" when
// it has none yet).
func available(t *testing.T, a answer) string {
	t.Helper()
	require.Equal(t, http.StatusOK, a.status, string(a.body))
	for _, b := range a.json(t)["balances"].([]any) {
		if b := b.(map[string]any); b["currency"] == "BRL" {
			return b["available"].(string)
		}
	}
	return "" // none yet
}

// TestReplicaReads_R23_R24 runs the API on a primary of its own with a REAL
// streaming replica (pgcluster: pg_basebackup -R, as the postgres user when
// root). Balances, ledger entries, the statement and the CSV export are read
// on the replica with Saldo-Replica-Lag; a key created a second ago
// authenticates and a payout just created reads back (R24) while the
// replica's replay is paused, because authentication and payouts read the
// primary; a paused replica serves an old balance under a loose bound and is
// left under a tight one (R23: money is never decided on it); a row the
// replica does not have yet is not a 404; a stopped replica makes every read
// fall back to the primary with no error; restarted, it serves again; the
// audit is clean.
func TestReplicaReads_R23_R24(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rc := startReplicated(t, nil, true)
	rep, pool, rpool := rc.replica, rc.pool, rc.rpool

	psp := sim.NewServer(sim.Config{Seed: 19}).Start()
	t.Cleanup(psp.Close)
	prov := psp.NewProvider()
	e, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{prov}, PayoutProvider: prov.Name(),
		RunWorkers: true, MaxWorkers: 10, FetchPollInterval: 20 * time.Millisecond,
		Attempts: attempts.Config{ResolveSchedule: []time.Duration{50 * time.Millisecond}}})
	require.NoError(t, err)
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, e.Stop(stopCtx))
	})

	// Two API servers on the same databases: a loose bound (the paused
	// replica stays in use) and a tight one (it is left).
	serve := func(maxLag time.Duration) (string, *replica.Reads) {
		reads, err := replica.New(replica.Config{Primary: pool, Replica: rpool, MaxLag: maxLag, Interval: 20 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(reads.Close)
		srv, err := api.New(api.Config{Pool: pool, Payouts: e.Payouts, Attempts: e.Attempts, Charges: e.Charges,
			Providers: e.Providers, Reads: reads})
		require.NoError(t, err)
		con, err := console.New(console.Config{Pool: pool, Attempts: e.Attempts, Payouts: e.Payouts, Charges: e.Charges,
			Insecure: true, Reads: reads})
		require.NoError(t, err)
		mux := http.NewServeMux()
		mux.Handle(console.Prefix, con)
		mux.Handle(console.Prefix+"/", con)
		mux.Handle("/", srv)
		hs := httptest.NewServer(mux)
		t.Cleanup(hs.Close)
		return hs.URL, reads
	}
	loose, looseReads := serve(time.Minute)
	tight, tightReads := serve(300 * time.Millisecond)

	_, admin, err := api.CreateKey(ctx, pool, api.RoleAdmin, "", "admin", time.Now())
	require.NoError(t, err)
	_, auditor, err := api.CreateKey(ctx, pool, api.RoleAuditor, "", "auditor", time.Now())
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, call(t, loose, "POST", "/v1/merchants", admin, "m1", map[string]any{"id": "m1", "name": "Loja"}).status)
	require.Equal(t, http.StatusCreated, call(t, loose, "POST", "/v1/merchants/m1/fundings", admin, "fund-1",
		map[string]any{"amount": "1000.00", "currency": "BRL", "reason": "seed"}).status)

	// The replica catches up and serves the stale-tolerant reads.
	require.Eventually(t, func() bool {
		a := call(t, loose, "GET", "/v1/merchants/m1/balances", admin, "", nil)
		_, fromReplica := a.lag(t)
		return fromReplica && available(t, a) == "1000.00"
	}, 30*time.Second, 20*time.Millisecond, "balances come from the replica once it has the funding")
	for _, path := range []string{"/v1/merchants/m1/balances", "/v1/merchants/m1/statement",
		"/v1/ledger/postings?account=merchant/m1/available/BRL", "/v1/ledger/transactions",
		"/v1/ledger/balance?account=merchant/m1/available/BRL", "/v1/ledger/export.csv"} {
		a := onReplica(t, func() answer { return call(t, loose, "GET", path, auditor, "", nil) })
		lag, _ := a.lag(t)
		require.Less(t, lag, 60.0, path)
	}
	// The console's books come from the replica too; its review queue not.
	web := signIn(t, loose, auditor)
	page := onReplica(t, func() answer { return web.get(t, "/console/ledger/account?code=merchant%2Fm1%2Favailable%2FBRL") })
	require.Contains(t, string(page.body), "1000.00")
	require.Contains(t, string(page.body), "read on a replica: writes older than", "the page says how far behind it may be")
	page = web.get(t, "/console/review")
	require.Equal(t, http.StatusOK, page.status)
	require.Empty(t, page.header.Get(replica.LagHeader), "the review queue is read on the primary")
	require.NotContains(t, string(page.body), "read on a replica")

	csv := onReplica(t, func() answer { return call(t, loose, "GET", "/v1/ledger/export.csv", auditor, "", nil) })
	require.Contains(t, string(csv.body), "merchant/m1/available/BRL,1,1000.00,BRL", "the export streams the replica's rows")
	// Routes that are not stale-tolerant never say so.
	require.Empty(t, call(t, loose, "GET", "/v1/merchants/m1", admin, "", nil).header.Get(replica.LagHeader))

	// Pause the replica's replay: from now on it falls behind.
	rconn, err := pgx.Connect(ctx, rep.URL("postgres"))
	require.NoError(t, err)
	_, err = rconn.Exec(ctx, `SELECT pg_wal_replay_pause()`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var state string
		require.NoError(t, rconn.QueryRow(ctx, `SELECT pg_get_wal_replay_pause_state()`).Scan(&state))
		return state == "paused"
	}, 10*time.Second, 10*time.Millisecond)

	// A key created a second ago authenticates (keys are read on the
	// primary), and its payout reads back at once (R24).
	k := call(t, loose, "POST", "/v1/keys", admin, "key-m1", map[string]any{"role": "merchant", "merchant_id": "m1", "name": "m1"})
	require.Equal(t, http.StatusCreated, k.status, string(k.body))
	m1 := k.json(t)["secret"].(string)
	keyMade := time.Now() // the replica lacks the key, committed before this
	p := call(t, loose, "POST", "/v1/merchants/m1/pix-transfers", m1, "pay-1", map[string]any{"amount": "10.00", "currency": "BRL",
		"destination": map[string]any{"pix_key": map[string]any{"type": "email", "value": "joao@example.com"}}})
	require.Equal(t, http.StatusCreated, p.status, string(p.body))
	require.Empty(t, p.header.Get(replica.LagHeader), "a write is never answered from the replica")
	payoutID := p.json(t)["id"].(string)
	g := call(t, loose, "GET", "/v1/merchants/m1/payouts/"+payoutID, m1, "", nil)
	require.Equal(t, http.StatusOK, g.status, string(g.body))
	require.Empty(t, g.header.Get(replica.LagHeader), "a payout just created is read on the primary")
	replay := call(t, loose, "POST", "/v1/merchants/m1/pix-transfers", m1, "pay-1", map[string]any{"amount": "10.00", "currency": "BRL",
		"destination": map[string]any{"pix_key": map[string]any{"type": "email", "value": "joao@example.com"}}})
	require.Equal(t, p.status, replay.status, "an idempotent replay is answered from the primary's record")
	require.Equal(t, payoutID, replay.json(t)["id"])

	// Under the loose bound the paused replica still answers, with the old
	// balance and a lag that covers the pause.
	minLag := time.Since(keyMade).Seconds()
	stale := onReplica(t, func() answer { return call(t, loose, "GET", "/v1/merchants/m1/balances", m1, "", nil) })
	require.Equal(t, "1000.00", available(t, stale), "the replica has not replayed the reserve")
	lag, _ := stale.lag(t)
	require.GreaterOrEqual(t, lag, minLag, "the lag covers the writes the replica lacks")

	// A transaction the replica does not have is not a 404: the primary answers.
	var reserveTx int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(id) FROM ledger_transactions`).Scan(&reserveTx))
	failedBefore := looseReads.Stats().Fallbacks[replica.ReasonFailed]
	require.Eventually(t, func() bool { // the first request the replica gets (a measurement may have failed on a busy machine)
		tx := call(t, loose, "GET", "/v1/ledger/transactions/"+strconv.FormatInt(reserveTx, 10), auditor, "", nil)
		require.Equal(t, http.StatusOK, tx.status, string(tx.body))
		require.Empty(t, tx.header.Get(replica.LagHeader))
		return looseReads.Stats().Fallbacks[replica.ReasonFailed] > failedBefore
	}, 10*time.Second, 20*time.Millisecond, "the replica's 404 was dropped and the primary answered")

	// Under the tight bound the primary answers, with the new balance.
	require.Eventually(t, func() bool {
		a := call(t, tight, "GET", "/v1/merchants/m1/balances", m1, "", nil)
		_, fromReplica := a.lag(t)
		return !fromReplica && available(t, a) == "990.00"
	}, 10*time.Second, 20*time.Millisecond, "a replica beyond --read-max-lag is left for the primary")
	require.Positive(t, tightReads.Stats().Fallbacks[replica.ReasonLagging])

	// Resumed, it catches up.
	_, err = rconn.Exec(ctx, `SELECT pg_wal_replay_resume()`)
	require.NoError(t, err)
	require.NoError(t, rconn.Close(ctx))
	require.Eventually(t, func() bool {
		a := call(t, tight, "GET", "/v1/merchants/m1/balances", m1, "", nil)
		_, fromReplica := a.lag(t)
		return fromReplica && available(t, a) == "990.00"
	}, 30*time.Second, 20*time.Millisecond)
	require.Positive(t, tightReads.Stats().Reads)

	// Stopped, every read falls back to the primary, from the first request
	// on (before a measurement notices): never an error.
	require.NoError(t, rep.Stop())
	stopped := time.Now()
	paths := []string{"/v1/merchants/m1/balances", "/v1/merchants/m1/statement",
		"/v1/ledger/postings?account=merchant/m1/available/BRL", "/v1/ledger/export.csv",
		"/v1/ledger/balance?account=merchant/m1/available/BRL"}
	for time.Since(stopped) < 500*time.Millisecond {
		for _, path := range paths {
			a := call(t, loose, "GET", path, auditor, "", nil)
			require.Equal(t, http.StatusOK, a.status, path+": "+string(a.body))
			require.Empty(t, a.header.Get(replica.LagHeader), path)
		}
	}
	require.Equal(t, "990.00", available(t, call(t, loose, "GET", "/v1/merchants/m1/balances", m1, "", nil)))
	page = web.get(t, "/console/ledger/account?code=merchant%2Fm1%2Favailable%2FBRL")
	require.Equal(t, http.StatusOK, page.status, string(page.body))
	require.Empty(t, page.header.Get(replica.LagHeader))
	_, known := looseReads.Lag()
	require.False(t, known, "a stopped replica has no lag")
	require.Positive(t, looseReads.Stats().Fallbacks[replica.ReasonUnavailable])

	// Restarted, it serves again.
	require.NoError(t, rep.Restart(ctx))
	require.Eventually(t, func() bool {
		_, fromReplica := call(t, loose, "GET", "/v1/merchants/m1/balances", m1, "", nil).lag(t)
		return fromReplica
	}, 30*time.Second, 50*time.Millisecond)

	require.Eventually(t, func() bool {
		return call(t, loose, "GET", "/v1/merchants/m1/payouts/"+payoutID, m1, "", nil).json(t)["status"] != "processing"
	}, 30*time.Second, 20*time.Millisecond)
	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}
