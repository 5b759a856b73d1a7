package main

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/providers/sim"
)

// flakyDatabase stands between saldo and PostgreSQL on addr: nothing
// listens there until it starts; then it cuts the first cut connections it
// accepts after the first (the process's first connection pings; the next
// ones are opened while River starts) and forwards the rest.
type flakyDatabase struct {
	target string
	cut    int32
	seen   atomic.Int32
	cuts   atomic.Int32
	ln     net.Listener
	wg     sync.WaitGroup
}

func (f *flakyDatabase) start(t *testing.T, addr string) {
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	f.ln = ln
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if n := f.seen.Add(1); n > 1 && n <= 1+f.cut {
				f.cuts.Add(1)
				c.Close()
				continue
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer c.Close()
				s, err := net.Dial("tcp", f.target)
				if err != nil {
					return
				}
				defer s.Close()
				go func() { _, _ = io.Copy(s, c); s.Close() }()
				_, _ = io.Copy(c, s)
			}()
		}
	}()
}

// A database that is down when `saldo serve` starts, then cuts the
// connections River opens while starting, delays start-up: the process
// waits (--startup-wait) and comes up, instead of exiting with status 1
// ("river: unexpected EOF", seen in the chaos run's PostgreSQL restart).
func TestServeWaitsForTheDatabaseAtStartUp(t *testing.T) {
	t.Parallel()
	bin, err := buildSaldo()
	require.NoError(t, err)
	dbURL := testdb.NewURL(t)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)

	// A free port with nothing listening on it yet.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	f := &flakyDatabase{target: u.Host, cut: 3}
	t.Cleanup(func() {
		if f.ln != nil {
			f.ln.Close()
		}
	})
	down := *u
	down.Host = addr

	secret := "whsec_test"
	srv := sim.NewServer(sim.Config{Seed: 5, WebhookSecret: secret}).Start()
	defer srv.Close()

	started := make(chan struct{})
	go func() {
		time.Sleep(1500 * time.Millisecond)
		f.start(t, addr)
		close(started)
	}()
	p := startServe(t, bin, down.String(), srv.URL(), secret, "api,workers", "--startup-wait", "30s")
	<-started
	resp, err := http.Get(p.base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	p.mu.Lock()
	logs := p.logs.String()
	p.mu.Unlock()
	require.Contains(t, logs, `"step":"ping"`, "the process waited for the database to come up")
	// The cuts after the ping meet the provider identity check (it takes
	// a connection of its own for the names' locks) or River's start:
	// either is retried, never fatal.
	require.Regexp(t, `"step":"(provider identity|river)"`, logs, "a step after the ping met a cut connection and was retried")
	require.EqualValues(t, 3, f.cuts.Load(), "connections were cut during start-up")
	t.Logf("start-up retries:\n%s", grepLines(logs, "database unavailable at start-up"))
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
