package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

func (f *flakyDatabase) start(t *testing.T, port *reservedPort) {
	ln := port.listen(t)
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

// reservedPort is a local TCP port bound and not listening: nobody else can
// take it, and a connection to it is refused (no listener), as to a
// database that is down; listen makes it listen, on the same socket, so
// there is no moment where the port is free (closing a probe listener and
// binding again later left one: another socket could take the port).
type reservedPort struct {
	fd   int
	addr string
}

func reservePort(t *testing.T) *reservedPort {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	p := &reservedPort{fd: fd, addr: fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)}
	t.Cleanup(func() {
		if p.fd >= 0 {
			_ = syscall.Close(p.fd)
		}
	})
	return p
}

// listen makes the port listen and hands its socket to a net.Listener.
func (p *reservedPort) listen(t *testing.T) net.Listener {
	require.NoError(t, syscall.Listen(p.fd, 128))
	f := os.NewFile(uintptr(p.fd), p.addr)
	p.fd = -1
	defer f.Close()
	ln, err := net.FileListener(f) // a copy of the socket
	require.NoError(t, err)
	return ln
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

	// A port of ours with nothing listening on it yet: the database is down.
	port := reservePort(t)
	f := &flakyDatabase{target: u.Host, cut: 3}
	t.Cleanup(func() {
		if f.ln != nil {
			f.ln.Close()
		}
	})
	down := *u
	down.Host = port.addr

	secret := "whsec_test"
	srv := sim.NewServer(sim.Config{Seed: 5, WebhookSecret: secret}).Start()
	defer srv.Close()

	p := launchServe(t, bin, down.String(), srv.URL(), secret, "api,workers", "--startup-wait", "30s")
	// The database comes up once the process has found it down (its
	// first ping refused and logged), not after a fixed time: a slow
	// start-up could reach its first ping after the database was up.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.logText(), `"step":"ping"`) {
		select {
		case err := <-p.done:
			t.Fatalf("saldo serve exited before its first ping: %v\n%s", err, p.logText())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("saldo serve logged no failed ping in 30 s:\n%s", p.logText())
		}
	}
	f.start(t, port)
	p.waitListening(t)
	resp, err := http.Get(p.base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	logs := p.logText()
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
