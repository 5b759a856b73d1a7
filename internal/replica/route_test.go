package replica_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/replica"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// deadReplica is a pool on an address nothing listens on: every query
// fails, as a replica that died between two measurements.
func deadReplica(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:1/postgres?sslmode=disable")
	require.NoError(t, err)
	cfg.ConnConfig.ConnectTimeout = time.Second
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// TestRouteWholeLedgerExportReplicaDown: the whole-ledger CSV export routed
// to a replica that died between two measurements is dropped and served by
// the primary (rows, no Saldo-Replica-Lag), not a 200 with an empty export.
func TestRouteWholeLedgerExportReplicaDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	psp := sim.NewServer(sim.Config{Seed: 3}).Start()
	t.Cleanup(psp.Close)
	prov := psp.NewProvider()
	e, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{prov}, PayoutProvider: prov.Name(),
		Attempts: attempts.Config{}})
	require.NoError(t, err)
	reads := replica.NewUsable(pool, deadReplica(t))
	srv, err := api.New(api.Config{Pool: pool, Payouts: e.Payouts, Attempts: e.Attempts, Reads: reads})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	_, key, err := api.CreateKey(ctx, pool, api.RoleAuditor, "", "aud", time.Now())
	require.NoError(t, err)
	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("7.00", "BRL"),
		Key: "f1", Reason: "seed", Actor: "test"})
	require.NoError(t, err)

	for _, path := range []string{"/v1/ledger/export.csv", "/v1/ledger/export.csv?account=merchant/m1/available/BRL"} {
		req, err := http.NewRequest(http.MethodGet, hs.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err, path)
		require.Equal(t, http.StatusOK, res.StatusCode, path)
		require.Empty(t, res.Header.Get(replica.LagHeader), "%s: the dead replica's answer went out", path)
		require.Contains(t, string(body), "merchant/m1/available/BRL,1,7.00,BRL", path)
	}
	require.EqualValues(t, 0, reads.Stats().Reads)
	require.EqualValues(t, 2, reads.Stats().Fallbacks[replica.ReasonFailed])

	// A path no ledger route matches is a 404 answered without trying the
	// replica: not a replica read, not a replica failure.
	req, err := http.NewRequest(http.MethodGet, hs.URL+"/v1/ledger/no-such-route", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	require.EqualValues(t, 0, reads.Stats().Reads)
	require.EqualValues(t, 2, reads.Stats().Fallbacks[replica.ReasonFailed], "an unknown path counted as a replica failure")
}

// TestRouteClientGoneIsNotAReplicaFailure: a request whose client went away
// during the replica attempt (its context cancelled, the handler's query
// failing with a 503) is not a replica failure: not counted as one, and the
// primary is not asked to serve a client that is gone.
func TestRouteClientGoneIsNotAReplicaFailure(t *testing.T) {
	t.Parallel()
	reads := replica.NewUsable(nil, nil)
	calls := 0
	h := reads.Route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if err := r.Context().Err(); err != nil {
			http.Error(w, fmt.Sprint(err), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil).WithContext(ctx))
	require.Equal(t, 1, calls, "the primary was asked to serve a client that is gone")
	require.EqualValues(t, 0, reads.Stats().Fallbacks[replica.ReasonFailed], "a client that went away counted as a replica failure")
	require.False(t, strings.Contains(rec.Body.String(), "ok"))
}

// TestRouteDroppedAnswerLeavesNoTrace: headers a dropped replica answer set
// (Content-Type, Content-Length, its own) are not on the primary's answer,
// headers set before Route are; and a replica answer that is kept streams
// (a flushed chunk reaches the client before the handler returns: nothing
// is held back in memory).
func TestRouteDroppedAnswerLeavesNoTrace(t *testing.T) {
	t.Parallel()
	reads := replica.NewUsable(nil, nil)
	try := true
	h := reads.Route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if try {
			try = false
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Content-Length", "99")
			w.Header().Set("X-From-Replica", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "replica body")
			return
		}
		_, _ = io.WriteString(w, "primary body")
	}))
	rec := httptest.NewRecorder()
	rec.Header().Set("Cache-Control", "no-store")
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "primary body", rec.Body.String())
	require.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
	require.NotEqual(t, "application/problem+json", rec.Header().Get("Content-Type")) // the recorder sniffs text/plain
	for _, k := range []string{"Content-Length", "X-From-Replica", replica.LagHeader} {
		require.Empty(t, rec.Header().Get(k), k)
	}

	release := make(chan struct{})
	hs := httptest.NewServer(reads.Route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first chunk\n")
		w.(http.Flusher).Flush()
		<-release
		_, _ = io.WriteString(w, "last chunk\n")
	})))
	t.Cleanup(hs.Close)
	res, err := http.Get(hs.URL)
	require.NoError(t, err)
	defer res.Body.Close()
	require.NotEmpty(t, res.Header.Get(replica.LagHeader))
	buf := make([]byte, len("first chunk\n"))
	_, err = io.ReadFull(res.Body, buf)
	require.NoError(t, err)
	close(release)
	rest, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, "first chunk\nlast chunk\n", string(buf)+string(rest))
}

// freezingProxy forwards TCP connections to target until frozen: then it
// stops forwarding without closing anything, as a replica host that stops
// answering (paused VM, partition).
func freezingProxy(t *testing.T, target string) (addr *net.TCPAddr, frozen *atomic.Bool) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	frozen = new(atomic.Bool)
	var conns sync.WaitGroup
	t.Cleanup(func() { frozen.Store(false); ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			pipe := func(dst, src net.Conn) {
				defer conns.Done()
				defer dst.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if err != nil {
						return
					}
					for frozen.Load() {
						time.Sleep(5 * time.Millisecond)
					}
					if _, err := dst.Write(buf[:n]); err != nil {
						return
					}
				}
			}
			conns.Add(2)
			go pipe(s, c)
			go pipe(c, s)
		}
	}()
	return ln.Addr().(*net.TCPAddr), frozen
}

// TestRouteFrozenReplicaTryEnds: a routed read in flight on a replica that
// stops answering without closing its connections ends when a measurement
// finds the replica unusable, and the primary answers; before, it waited
// until the client gave up.
func TestRouteFrozenReplicaTryEnds(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	cc := pool.Config().ConnConfig
	addr, frozen := freezingProxy(t, net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	cfg := pool.Config().Copy()
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = addr.IP.String(), uint16(addr.Port)
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	rpool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(rpool.Close)
	t.Cleanup(func() { frozen.Store(false) }) // before the pool closes its connections
	reads := replica.NewUsable(pool, rpool)
	hs := httptest.NewServer(reads.Route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var db string
		if err := replica.DB(r.Context(), pool).QueryRow(r.Context(), `SELECT current_setting('port')`).Scan(&db); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})))
	t.Cleanup(hs.Close)
	get := func() (*http.Response, error) {
		c := &http.Client{Timeout: 10 * time.Second}
		res, err := c.Get(hs.URL)
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		return res, err
	}
	res, err := get()
	require.NoError(t, err)
	require.NotEmpty(t, res.Header.Get(replica.LagHeader), "the replica answers before it freezes")

	frozen.Store(true)
	type answer struct {
		res *http.Response
		err error
	}
	done := make(chan answer, 1)
	go func() { res, err := get(); done <- answer{res, err} }()
	time.Sleep(300 * time.Millisecond) // the request waits on the frozen replica
	start := time.Now()
	reads.SetUnavailable()
	a := <-done
	require.NoError(t, a.err, "the request waited on the frozen replica until the client gave up")
	require.Equal(t, http.StatusOK, a.res.StatusCode)
	require.Empty(t, a.res.Header.Get(replica.LagHeader))
	require.Less(t, time.Since(start), 5*time.Second)
	require.EqualValues(t, 1, reads.Stats().Fallbacks[replica.ReasonFailed])
}
