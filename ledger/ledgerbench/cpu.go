package ledgerbench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// clockTick is USER_HZ, the unit of /proc/<pid>/stat CPU times (100 on
// Linux everywhere that matters).
const clockTick = 100

// MachineTicks is a reading of the machine's CPU counters (/proc/stat).
type MachineTicks struct{ busy, total int64 }

// MachineCPU reads the machine's CPU counters; zero when /proc/stat cannot
// be read.
func MachineCPU() MachineTicks {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return MachineTicks{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return MachineTicks{}
	}
	var t MachineTicks
	// user nice system idle iowait irq softirq steal ...: idle and iowait
	// are not busy; guest time is already counted in user.
	for i, s := range f[1:] {
		if i >= 8 {
			break
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return MachineTicks{}
		}
		t.total += v
		if i != 3 && i != 4 {
			t.busy += v
		}
	}
	return t
}

// BusySince is the share of all cores busy between m0 and m (0..1).
func (m MachineTicks) BusySince(m0 MachineTicks) float64 {
	if m.total <= m0.total || m0.total == 0 {
		return 0
	}
	return float64(m.busy-m0.busy) / float64(m.total-m0.total)
}

// ProcessCPU returns the CPU time (user + system) this process has used.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BackendsCPU sums the CPU time of the backends connected to the pool's
// database, from /proc. It returns 0 when they cannot be read (remote
// server, other user), which turns the server CPU figure off.
func BackendsCPU(ctx context.Context, pool *pgxpool.Pool) time.Duration {
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return 0
	}
	var pids []int
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			pids = append(pids, pid)
		}
	}
	rows.Close()
	var ticks int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0
		}
		// Fields after the parenthesised command name; utime and stime are
		// fields 14 and 15 of the whole line.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			return 0
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 13 {
			return 0
		}
		u, err1 := strconv.ParseInt(f[11], 10, 64)
		st, err2 := strconv.ParseInt(f[12], 10, 64)
		if err1 != nil || err2 != nil {
			return 0
		}
		ticks += u + st
	}
	return time.Duration(ticks) * time.Second / clockTick
}
