// Package chaos is saldo's chaos run (issue 17): a Go test that builds
// `saldo` from this tree, runs three `saldo serve` processes (two with the
// API and workers, one with workers only) on a PostgreSQL cluster the test
// owns, behind a TCP proxy that cuts connections and loses COMMIT answers,
// against a `saldo sim-provider` process with a fault profile behind a
// second cutting proxy, and drives them over HTTP as clients would while a
// killer SIGKILLs and restarts them (and once restarts PostgreSQL with
// `pg_ctl restart -m immediate`). When every operation is final or in
// review it proves the invariants and prints a table.
//
// The short form runs in `go test -race -count=1 ./...`; the long form with
//
//	go test -race -count=1 ./chaos -chaos.long -v -timeout 60m
//
// or SALDO_CHAOS_LONG=1. See docs/reliability.md.
package chaos
