package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/internal/pgcluster"
)

// binDir holds the binary buildSaldo made; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildSaldo compiles cmd/saldo from this tree once per test binary.
var buildSaldo = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "saldo-chaos-bin-")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "saldo")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/saldo")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/saldo: %v: %s", err, out)
	}
	return bin, nil
})

// freePort gives a port a child process will listen on later
// (pgcluster.FreePort: below the ephemeral range, never twice).
func freePort(t testing.TB) int {
	t.Helper()
	port, err := pgcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// ---------------------------------------------------------------------------
// PostgreSQL: a cluster of the test's own, restartable with pg_ctl.

type cluster struct {
	*pgcluster.Cluster
	bin string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	c, err := pgcluster.Start(context.Background(), pgcluster.Options{})
	if err != nil {
		t.Fatalf("chaos needs PostgreSQL server binaries (apt-get install postgresql): %v", err)
	}
	t.Cleanup(func() { _ = c.Remove() })
	bin, err := pgcluster.FindBinaries()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE DATABASE saldo`); err != nil {
		t.Fatal(err)
	}
	return &cluster{Cluster: c, bin: bin}
}

// restartImmediate is `pg_ctl restart -m immediate`: every backend dies
// without a checkpoint, the server recovers from its WAL.
func (c *cluster) restartImmediate() error {
	cmd := exec.Command(filepath.Join(c.bin, "pg_ctl"), "-D", filepath.Join(c.Dir, "data"), "-m", "immediate",
		"-w", "-t", "60", "-l", filepath.Join(c.Dir, "postgres.log"), "restart")
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return err
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		cmd.Env = append(cmd.Env, "HOME="+c.Dir, "USER=postgres")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl restart -m immediate: %v: %s", err, out)
	}
	return nil
}

// ---------------------------------------------------------------------------
// Child processes.

// child is a long-running child process with its stderr kept in a file.
type child struct {
	name    string
	args    []string
	env     []string
	logPath string
	ready   string // a log line substring that says it is up

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	// killed is set by the killer before it kills, so the monitor can tell
	// a kill from an unexpected exit.
	killed atomic.Bool
	starts int
}

func (c *child) start(bin string, timeout time.Duration) error {
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "---- %s start %d at %s\n", c.name, c.starts+1, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(bin, c.args...)
	cmd.Env = append(os.Environ(), c.env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return err
	}
	cmd.Stdout = logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	readyc := make(chan struct{})
	var once sync.Once
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if strings.Contains(line, c.ready) {
				once.Do(func() { close(readyc) })
			}
		}
		err := cmd.Wait()
		fmt.Fprintf(logf, "---- %s exited: %v\n", c.name, err)
		logf.Close()
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(done)
	}()
	c.mu.Lock()
	c.cmd, c.done = cmd, done
	c.starts++
	c.mu.Unlock()
	c.killed.Store(false)
	select {
	case <-readyc:
		return nil
	case <-done:
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("%s exited during start: %v (log %s; its end:\n%s)", c.name, err, c.logPath, logTail(c.logPath, 20))
	case <-time.After(timeout):
		c.kill()
		return fmt.Errorf("%s did not start within %s (log %s; its end:\n%s)", c.name, timeout, c.logPath, logTail(c.logPath, 20))
	}
}

// logTail is the last n lines of a child's log, for a failure message: the
// log directory is reused by the next run, so a CI log must carry the cause
// itself (a start failure in CI left only "exit status 1").
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// kill SIGKILLs the process and waits for it to be gone.
func (c *child) kill() {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	c.killed.Store(true)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// alive reports whether the process is running.
func (c *child) alive() bool {
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

func (c *child) doneChan() chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

// stop sends SIGTERM and waits (then SIGKILL).
func (c *child) stop() {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	c.killed.Store(true)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// tail returns the last n lines of the child's log.
func (c *child) tail(n int) string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ---------------------------------------------------------------------------
// A TCP proxy between saldo and the PSP that cuts connections at random.

type tcpCutter struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]net.Conn // client side -> upstream side
	cuts   atomic.Int64
	wg     sync.WaitGroup
}

func startTCPCutter(t *testing.T, target string) *tcpCutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpCutter{ln: ln, target: target, conns: map[net.Conn]net.Conn{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.serve(c) }()
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *tcpCutter) addr() string { return p.ln.Addr().String() }

func (p *tcpCutter) serve(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.conns == nil {
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c] = up
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); up.Close(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); c.Close(); done <- struct{}{} }()
	<-done
	<-done
	p.mu.Lock()
	if p.conns != nil {
		delete(p.conns, c)
	}
	p.mu.Unlock()
}

// cutOne cuts a random open connection (mid-request or idle).
func (p *tcpCutter) cutOne(rng *rand.Rand) bool {
	p.mu.Lock()
	var cs []net.Conn
	for c := range p.conns {
		cs = append(cs, c)
	}
	var up net.Conn
	var c net.Conn
	if len(cs) > 0 {
		c = cs[rng.IntN(len(cs))]
		up = p.conns[c]
	}
	p.mu.Unlock()
	if c == nil {
		return false
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // RST, as a broken network would
	}
	c.Close()
	up.Close()
	p.cuts.Add(1)
	return true
}

func (p *tcpCutter) close() {
	p.ln.Close()
	p.mu.Lock()
	for c, up := range p.conns {
		c.Close()
		up.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// ---------------------------------------------------------------------------
// The webhook relay: the sim's webhooks reach the API processes through it.
// It loses some (answers 200 and forwards nothing, as a lossy network after
// the PSP's last retry would) and spreads the others over the API processes.

type webhookRelay struct {
	srv       *http.Server
	ln        net.Listener
	targets   []string // API base URLs
	lossRate  float64
	mu        sync.Mutex
	rng       *rand.Rand
	lost      atomic.Int64
	forwarded atomic.Int64
	failed    atomic.Int64
	client    *http.Client
}

func startRelay(t *testing.T, targets []string, lossRate float64, seed uint64) *webhookRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &webhookRelay{ln: ln, targets: targets, lossRate: lossRate, rng: rand.New(rand.NewPCG(seed, 0x3E1A)),
		client: &http.Client{Timeout: 5 * time.Second}}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	t.Cleanup(func() { _ = r.srv.Close() })
	return r
}

func (r *webhookRelay) url() string { return "http://" + r.ln.Addr().String() + "/v1/webhooks/sim" }

func (r *webhookRelay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	lose := r.rng.Float64() < r.lossRate
	target := r.targets[r.rng.IntN(len(r.targets))]
	r.mu.Unlock()
	if lose {
		r.lost.Add(1)
		w.WriteHeader(http.StatusOK)
		return
	}
	out, err := http.NewRequestWithContext(req.Context(), http.MethodPost, target+req.URL.Path, bytes.NewReader(body))
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	for _, h := range []string{"Content-Type", "Sim-Signature", "Sim-Event-Id"} {
		out.Header.Set(h, req.Header.Get(h))
	}
	resp, err := r.client.Do(out)
	if err != nil {
		r.failed.Add(1)
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 == 2 {
		r.forwarded.Add(1)
	} else {
		r.failed.Add(1)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(b)
}

// ---------------------------------------------------------------------------
// JSON helpers.

func jsonBody(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
