package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReplicaOptions for StartReplica.
type ReplicaOptions struct {
	// Dir is the replica's cluster directory. Empty: a new temporary one.
	Dir string
	// Port to listen on (127.0.0.1). Zero: a free port.
	Port int
}

// StartReplica makes a streaming replica of the running cluster c, as an
// operator would: `pg_basebackup -R -X stream` (which writes standby.signal
// and a primary_conninfo naming c) into a new data directory, with a
// physical replication slot on c so the primary keeps the WAL the replica
// has not received yet, then starts it as a hot standby (with
// hot_standby_feedback, so the primary's vacuum does not cancel long reads
// on the replica). Like Start it runs everything as the postgres user when
// the process is root. It returns once the replica accepts connections.
//
// The replica is a Cluster: Stop, Restart and Remove work on it; Remove
// also drops its slot on the primary (when the primary still answers).
func (c *Cluster) StartReplica(ctx context.Context, opts ReplicaOptions) (*Cluster, error) {
	dir := opts.Dir
	var err error
	if dir == "" {
		if dir, err = os.MkdirTemp("", "saldo-pg-replica-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, err
		}
		_ = os.Chmod(dir, 0o700)
	}
	r := &Cluster{Dir: dir, Port: opts.Port, bin: c.bin, cred: c.cred, primary: c,
		extra: "-c hot_standby=on -c hot_standby_feedback=on"}
	if r.Port == 0 {
		if r.Port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	r.slot = fmt.Sprintf("saldo_replica_%d", r.Port)
	data := filepath.Join(dir, "data")
	// On failure nothing is left behind: the directory (when made here) and
	// the slot pg_basebackup may have created on the primary.
	fail := func(err error) (*Cluster, error) {
		if r.Running() {
			_ = r.Stop()
		}
		err = errors.Join(err, r.dropSlot())
		if opts.Dir == "" {
			_ = os.RemoveAll(dir)
		}
		return nil, err
	}
	if out, err := r.run(ctx, "pg_basebackup", "-h", "127.0.0.1", "-p", fmt.Sprint(c.Port), "-U", "postgres",
		"-D", data, "-R", "-X", "stream", "-c", "fast", "-C", "-S", r.slot, "--no-sync"); err != nil {
		return fail(fmt.Errorf("pgcluster: pg_basebackup: %w: %s", err, out))
	}
	if err := r.start(ctx); err != nil {
		return fail(err)
	}
	return r, nil
}

// Restart starts a stopped cluster again (same directory, port and options).
func (c *Cluster) Restart(ctx context.Context) error { return c.start(ctx) }

// IsReplica reports whether c was made by StartReplica.
func (c *Cluster) IsReplica() bool { return c.primary != nil }

// dropSlot drops a removed replica's slot on its primary. The primary's
// walsender for the replica may take a moment to exit (the slot is active
// until then). A primary that no longer answers has nothing to drop.
func (c *Cluster) dropSlot() error {
	if c.primary == nil || c.slot == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.primary.URL("postgres"))
	if err != nil {
		return nil
	}
	defer conn.Close(context.Background())
	for {
		_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, c.slot)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("pgcluster: drop replication slot %s", c.slot), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
