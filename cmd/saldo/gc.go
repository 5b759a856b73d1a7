package main

import (
	"os"
	"runtime/debug"
)

// defaultGCPercent is the garbage collector's target saldo runs with when
// GOGC is not set: the heap may grow to five times what is live between
// collections, instead of Go's default of twice. saldo's live heap is small
// (tens of MB) and its allocation rate high (every request, batch and
// provider call), so with the default the collector ran often enough to
// show in the reads' tail: under saldo bench reads with writers at half the
// ledger's throughput (in the same process, as in saldo serve), an
// account's entries page had a p99 of 4.8-5.8 ms at GOGC=100 against
// 3.6-5.0 ms at 400, four alternating pairs (docs/performance.md), for
// about 15 MB more resident memory. In a memory-limited container, set
// GOMEMLIMIT (about 80 % of the limit) as well: the collector then runs
// earlier when the heap nears it (docs/configuration.md).
const defaultGCPercent = 400

// applyGCDefault sets defaultGCPercent unless GOGC is set (the runtime
// already applied it; an empty GOGC is unset, as for the runtime); it
// returns whether it did.
func applyGCDefault() bool {
	if os.Getenv("GOGC") != "" {
		return false
	}
	debug.SetGCPercent(defaultGCPercent)
	return true
}
