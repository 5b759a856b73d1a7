// Package pgproxy is a fault-injecting TCP proxy between a test's
// PostgreSQL clients and the server. Its one fault is the ambiguous commit:
// a transaction's COMMIT (or, for a transaction without BEGIN, the Sync or
// simple query that ends it) reaches the server and commits there, but its
// answer never reaches the client, whose connection is cut instead. The
// client cannot tell whether its transaction committed, which is exactly
// when code must not redo blindly (docs/pitfalls.md: a COMMIT whose answer was lost
// may have committed).
//
// The proxy reads the PostgreSQL wire protocol (version 3) just enough to
// know which SQL each transaction ran: simple queries ('Q'), prepared
// statements ('P', remembered by name) and their executions ('B'). Only
// executed statements count, so preparing a statement never triggers a cut.
// Connections must not use TLS (sslmode=disable); an SSLRequest is answered
// "no" by the proxy itself.
package pgproxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards connections to a PostgreSQL server.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	rules []*rule
	conns map[net.Conn]struct{}

	cuts atomic.Int64
	wg   sync.WaitGroup

	// random is the random-cut mode (SetRandom); nil when off.
	random     *randomState
	randomCuts atomic.Int64
}

// rule loses the commit answer of the next n transactions that executed,
// for each of sqls, a statement containing it.
type rule struct {
	sqls []string
	n    int
}

// Start listens on a free loopback port, forwarding to the server that
// dbURL (a postgres:// URL) names, and stops when t ends.
func Start(t testing.TB, dbURL string) *Proxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgproxy: parse %q: %v", dbURL, err)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgproxy: listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// URL returns dbURL with its host and port replaced by the proxy's (and
// sslmode=disable).
func (p *Proxy) URL(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		panic(fmt.Sprintf("pgproxy: parse %q: %v", dbURL, err))
	}
	u.Host = p.ln.Addr().String()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return u.String()
}

// LoseCommitAnswer arms the proxy: the next n transactions (on any
// connection) that execute a statement whose text contains sql commit on
// the server, but their clients get a cut connection instead of the
// answer.
func (p *Proxy) LoseCommitAnswer(sql string, n int) {
	p.LoseCommitAnswerOfAll(n, sql)
}

// LoseCommitAnswerOfAll is LoseCommitAnswer for transactions that executed,
// for each of sqls, a statement whose text contains it (one transaction
// doing two kinds of work, say).
func (p *Proxy) LoseCommitAnswerOfAll(n int, sqls ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, &rule{sqls: sqls, n: n})
}

// Disarm drops every armed fault.
func (p *Proxy) Disarm() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = nil
}

// Cuts is how many commit answers the proxy has lost so far.
func (p *Proxy) Cuts() int { return int(p.cuts.Load()) }

// Close stops listening and cuts every connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil // track refuses new connections
	p.mu.Unlock()
	p.wg.Wait()
}

// Random is the random-cut mode: CommitAnswerLoss is the probability that
// a transaction's commit answer is lost (the transaction commits on the
// server, its client's connection is cut instead of answered), on top of
// the armed LoseCommitAnswer rules. Seed makes the draws repeatable for one
// sequence of transactions. CutConnection (below) cuts a live connection at
// any point, mid-query or idle.
type Random struct {
	CommitAnswerLoss float64
	Seed             uint64
}

type randomState struct {
	Random
	rng *rand.Rand
}

// SetRandom turns the random-cut mode on (a zero CommitAnswerLoss turns it
// off). It adds to LoseCommitAnswer; Disarm does not clear it.
func (p *Proxy) SetRandom(r Random) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.CommitAnswerLoss <= 0 {
		p.random = nil
		return
	}
	p.random = &randomState{Random: r, rng: rand.New(rand.NewPCG(r.Seed, 0x9C0))}
}

// RandomCuts is how many commit answers the random mode has lost (they are
// also counted in Cuts).
func (p *Proxy) RandomCuts() int { return int(p.randomCuts.Load()) }

// Conns is the number of client connections open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// CutConnection cuts one open connection, chosen with pick (an index in
// [0, n)), at whatever point its conversation is: its client sees the
// connection lost, mid-transaction, mid-query or idle. It reports whether
// there was a connection to cut.
func (p *Proxy) CutConnection(pick func(n int) int) bool {
	p.mu.Lock()
	var clients []net.Conn
	for c := range p.conns {
		if c.LocalAddr().String() == p.ln.Addr().String() { // accepted side
			clients = append(clients, c)
		}
	}
	p.mu.Unlock()
	if len(clients) == 0 {
		return false
	}
	// Map iteration order is random; sort-free pick is fine for a fault.
	clients[pick(len(clients))].Close()
	return true
}

// CutAll cuts every open connection (as a server restart or a network
// partition would) and returns how many it cut.
func (p *Proxy) CutAll() int {
	p.mu.Lock()
	var all []net.Conn
	for c := range p.conns {
		all = append(all, c)
	}
	p.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
	return len(all) / 2
}

// takeRandom draws whether a finished transaction loses its commit answer
// in the random mode.
func (p *Proxy) takeRandom() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.random == nil {
		return false
	}
	if p.random.rng.Float64() < p.random.CommitAnswerLoss {
		p.randomCuts.Add(1)
		return true
	}
	return false
}

// take reports whether a transaction that executed stmts must lose its
// commit answer, consuming one count of the first rule that matches.
func (p *Proxy) take(stmts []string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if r.n <= 0 {
			continue
		}
		if ranAll(stmts, r.sqls) {
			r.n--
			return true
		}
	}
	return false
}

// ranAll reports whether, for each of sqls, one of stmts contains it.
func ranAll(stmts, sqls []string) bool {
	for _, want := range sqls {
		found := false
		for _, s := range stmts {
			if strings.Contains(s, want) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(client)
		}()
	}
}

// session is one proxied connection.
type session struct {
	p              *Proxy
	client, server net.Conn
	// cutting is set (by the client side) when the message that ends a
	// doomed transaction has been forwarded: the server side then drops
	// every reply up to the next ReadyForQuery and cuts both connections.
	cutting atomic.Bool
	once    sync.Once
}

func (p *Proxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client) || !p.track(server) {
		client.Close()
		server.Close()
		return
	}
	s := &session{p: p, client: client, server: server}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.fromServer()
	}()
	s.fromClient()
	<-done
	p.untrack(client)
	p.untrack(server)
}

func (s *session) closeBoth() {
	s.once.Do(func() {
		s.client.Close()
		s.server.Close()
	})
}

// Protocol codes of the untyped startup-phase messages.
const (
	sslRequest    = 80877103
	gssEncRequest = 80877104
)

// fromClient forwards client messages, following which statements each
// transaction executes.
func (s *session) fromClient() {
	defer s.closeBoth()
	// Startup phase: untyped messages (length, then payload).
	for {
		msg, err := readUntyped(s.client)
		if err != nil {
			return
		}
		if len(msg) >= 8 {
			code := binary.BigEndian.Uint32(msg[4:8])
			if code == sslRequest || code == gssEncRequest {
				if _, err := s.client.Write([]byte{'N'}); err != nil {
					return
				}
				continue
			}
		}
		if _, err := s.server.Write(msg); err != nil {
			return
		}
		break
	}
	prepared := map[string]string{}
	var inTx bool
	var stmts []string
	for {
		typ, msg, err := readTyped(s.client)
		if err != nil {
			return
		}
		body := msg[5:]
		end := false // this message ends a transaction
		switch typ {
		case 'Q':
			q := cstring(body)
			switch w := firstWord(q); w {
			case "begin", "start":
				inTx, stmts = true, nil
			case "commit", "end":
				inTx, end = false, true
			case "rollback", "abort":
				inTx, stmts = false, nil
			default:
				stmts = append(stmts, q)
				end = !inTx
			}
		case 'P':
			name, rest := cut(body)
			prepared[name] = cstring(rest)
		case 'B':
			_, rest := cut(body) // portal
			name, _ := cut(rest)
			stmts = append(stmts, prepared[name])
		case 'C':
			// Close of a prepared statement ('S') or portal: nothing to follow.
		case 'S':
			end = !inTx && len(stmts) > 0
		}
		if end {
			if s.p.take(stmts) || s.p.takeRandom() {
				s.cutting.Store(true)
			}
			stmts = nil
		}
		if _, err := s.server.Write(msg); err != nil {
			return
		}
	}
}

// fromServer forwards server messages, dropping the answer to a doomed
// commit and then cutting the connection.
func (s *session) fromServer() {
	defer s.closeBoth()
	for {
		typ, msg, err := readTyped(s.server)
		if err != nil {
			return
		}
		if s.cutting.Load() {
			if typ == 'Z' {
				// The server has finished the transaction (committed
				// it); its client never learns.
				s.p.cuts.Add(1)
				return
			}
			continue
		}
		if _, err := s.client.Write(msg); err != nil {
			return
		}
	}
}

const maxMessage = 1 << 30

// readUntyped reads a startup-phase message: int32 length (itself
// included), then the rest.
func readUntyped(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 4 || n > maxMessage {
		return nil, errors.New("pgproxy: bad startup message length")
	}
	msg := make([]byte, n)
	copy(msg, hdr[:])
	_, err := io.ReadFull(r, msg[4:])
	return msg, err
}

// readTyped reads a message: type byte, int32 length (itself included),
// then the body. msg is the whole message as read.
func readTyped(r io.Reader) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n < 4 || n > maxMessage {
		return 0, nil, errors.New("pgproxy: bad message length")
	}
	msg := make([]byte, 1+n)
	copy(msg, hdr[:])
	_, err := io.ReadFull(r, msg[5:])
	return hdr[0], msg, err
}

// cut splits b at its first NUL: the C string before it, and the rest.
func cut(b []byte) (string, []byte) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return string(b), nil
	}
	return string(b[:i]), b[i+1:]
}

func cstring(b []byte) string { s, _ := cut(b); return s }

// firstWord is q's first word, lower case.
func firstWord(q string) string {
	f := strings.Fields(strings.ToLower(q))
	if len(f) == 0 {
		return ""
	}
	return strings.TrimRight(f[0], ";")
}
