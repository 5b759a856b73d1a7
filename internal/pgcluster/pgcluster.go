// Package pgcluster starts a throwaway PostgreSQL cluster from the local
// PostgreSQL binaries (initdb, pg_ctl), for the test database helper and for
// `saldo dev`. initdb and postgres refuse to run as root, so when the process
// runs as root the cluster is created and run as the `postgres` user.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoBinaries means no PostgreSQL server binaries were found.
var ErrNoBinaries = errors.New("pgcluster: no PostgreSQL server binaries (initdb, pg_ctl) found; install PostgreSQL (e.g. apt-get install postgresql) or set PG_BIN")

// Cluster is a running PostgreSQL started by Start.
type Cluster struct {
	Dir  string // data directory parent (data in Dir/data, socket in Dir)
	Port int
	bin  string
	cred *syscall.Credential
	// extra postgres options this cluster starts with (a replica's).
	extra string
	// primary and slot: set on a replica made by StartReplica.
	primary *Cluster
	slot    string
}

// URL is a connection URL for database db as the superuser "postgres".
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// FindBinaries returns the directory holding initdb and pg_ctl: $PG_BIN, the
// newest /usr/lib/postgresql/*/bin, or the directory of initdb on PATH.
func FindBinaries() (string, error) {
	ok := func(dir string) bool {
		for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
			if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
				return false
			}
		}
		return true
	}
	if d := os.Getenv("PG_BIN"); d != "" && ok(d) {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if ok(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && ok(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", ErrNoBinaries
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Options for Start.
type Options struct {
	// Dir is the cluster directory. Empty: a new temporary directory.
	Dir string
	// Port to listen on (127.0.0.1). Zero: a free port.
	Port int
	// Reuse: when Dir already holds a running cluster started by Start,
	// return it instead of failing.
	Reuse bool
	// Settings are more server settings ("name=value", passed as -c after
	// the defaults, so they override them), e.g. "synchronous_commit=on"
	// where a figure must not depend on the test default (off).
	Settings []string
}

// Start initialises (if needed) and starts a cluster. The caller stops it
// with Stop, or leaves it running for reuse (the test helper does).
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	var extra []string
	for _, s := range opts.Settings {
		if strings.ContainsAny(s, " \t'\"") || !strings.Contains(s, "=") {
			return nil, fmt.Errorf("pgcluster: setting %q: name=value without spaces or quotes", s)
		}
		extra = append(extra, "-c "+s)
	}
	bin, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "saldo-pg-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c = &Cluster{Dir: dir, bin: bin, cred: cred, extra: strings.Join(extra, " ")}
	if opts.Dir == "" {
		// A throwaway directory never outlives a failed start (an initdb
		// or a start cut short by a signal): its server, if one came up,
		// is stopped and the directory removed.
		started := c
		defer func() {
			if err != nil {
				_ = started.stopAfterFailedStart()
				_ = os.RemoveAll(dir)
			}
		}()
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
		// The postgres user must be able to reach dir through its parents.
		_ = os.Chmod(dir, 0o700)
	}
	if opts.Reuse {
		if b, err := os.ReadFile(filepath.Join(dir, "port")); err == nil {
			if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				c.Port = p
				if c.ping(ctx) == nil {
					return c, nil
				}
			}
		}
	}
	data := filepath.Join(dir, "data")
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err != nil {
		if out, err := c.run(ctx, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
			return nil, fmt.Errorf("pgcluster: initdb: %w: %s", err, out)
		}
	}
	c.Port = opts.Port
	if c.Port == 0 {
		if c.Port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// start starts the server of c.Dir/data on c.Port (with c.extra) and waits
// until it accepts connections.
func (c *Cluster) start(ctx context.Context) error {
	data := filepath.Join(c.Dir, "data")
	_ = os.Remove(filepath.Join(data, "postmaster.pid")) // stale pid from a killed run; pg_ctl refuses to start otherwise
	pgOpts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300", c.Port, c.Dir)
	if c.extra != "" {
		pgOpts += " " + c.extra
	}
	// pg_ctl is never killed half way: killed after it forked the
	// postmaster but before postmaster.pid exists, it would leave a server
	// nobody can find to stop (a start cut short by a signal must leave
	// nothing behind). It runs to its own end (-t 60), and a cancelled ctx
	// is answered once it is back, when the pid file names what to stop.
	pgCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 90*time.Second)
	defer cancel()
	if out, err := c.run(pgCtx, "pg_ctl", "-D", data, "-o", pgOpts, "-l", filepath.Join(c.Dir, "postgres.log"), "-w", "-t", "60", "start"); err != nil {
		return fmt.Errorf("pgcluster: pg_ctl start: %w: %s", err, out)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pgcluster: start: %w", err)
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "port"), []byte(strconv.Itoa(c.Port)), 0o644); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.ping(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgcluster: server did not accept connections: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop stops the server (fast shutdown).
func (c *Cluster) Stop() error {
	out, err := c.run(context.Background(), "pg_ctl", "-D", filepath.Join(c.Dir, "data"), "-m", "fast", "-w", "stop")
	if err != nil {
		return fmt.Errorf("pgcluster: pg_ctl stop: %w: %s", err, out)
	}
	return nil
}

// stopAfterFailedStart stops, without waiting for clients, a server a
// failed start may have left running.
func (c *Cluster) stopAfterFailedStart() error {
	data := filepath.Join(c.Dir, "data")
	if _, err := os.Stat(filepath.Join(data, "postmaster.pid")); err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.run(ctx, "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
	return err
}

// Remove stops the server and deletes its directory.
// A cluster already stopped is only deleted.
func (c *Cluster) Remove() error {
	var err error
	if c.Running() {
		err = c.Stop()
	}
	return errors.Join(err, c.dropSlot(), os.RemoveAll(c.Dir))
}

// Running reports whether the cluster's server runs (pg_ctl status).
func (c *Cluster) Running() bool {
	_, err := c.run(context.Background(), "pg_ctl", "-D", filepath.Join(c.Dir, "data"), "status")
	return err == nil
}

func (c *Cluster) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// ServerEnv is the allocator settings the server runs with (inherited by
// its backends from pg_ctl): glibc then keeps a backend's heap instead of
// giving it back to the kernel after every statement that used more than
// 128 KB and taking it again for the next, as every ledger.Poster batch
// does. On the same server the Poster wrote 20-24 % more transfers per
// second with them (docs/performance.md). The same lines belong in a
// production server's environment (docs/configuration.md).
var ServerEnv = []string{"MALLOC_TRIM_THRESHOLD_=67108864", "MALLOC_TOP_PAD_=16777216", "MALLOC_MMAP_THRESHOLD_=67108864"}

func (c *Cluster) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.Dir
	cmd.Env = append(append(os.Environ(), "LC_ALL=C"), ServerEnv...)
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
		cmd.Env = append(cmd.Env, "HOME="+c.Dir, "USER=postgres")
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// credential returns the postgres user's credential when running as root.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: running as root needs a 'postgres' user to run initdb/postgres as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// FreePort gives a port for a server started later (a cluster, a child
// process). It is taken below the
// kernel's usual ephemeral range (32768-60999), where neither outgoing
// connections nor ":0" listeners can take it between this check and the
// server's listen (a port from ":0" can be reused by any connection opened
// meanwhile), and never twice in this process.
func FreePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := 20000 + rand.IntN(12000)
		if portsGiven[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		portsGiven[port] = true
		return port, nil
	}
	return 0, errors.New("pgcluster: no free port in 20000-31999 after 1000 tries")
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)
