package main

import (
	"runtime/debug"
	"testing"
)

// saldo runs with GOGC=400 unless the operator set GOGC.
func TestGCDefaultUnlessGOGCIsSet(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })

	t.Setenv("GOGC", "50")
	if applyGCDefault() {
		t.Fatal("applied the default with GOGC set")
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GC percent %d after GOGC=50 was left to the runtime, want the runtime's (100 here)", got)
	}

	t.Setenv("GOGC", "") // unset, for the runtime and for saldo
	if !applyGCDefault() {
		t.Fatal("did not apply the default with GOGC unset")
	}
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Fatalf("GC percent %d, want %d", got, defaultGCPercent)
	}
}
