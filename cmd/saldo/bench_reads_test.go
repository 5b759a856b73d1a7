package main

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
)

// saldo bench reads end to end at a tiny size: it builds, measures every
// read without and with writers, exports CSV, and its audit is clean (a
// violation would return an exit error). Then --reuse measures the same
// ledger again without building.
func TestBenchReadsSmall(t *testing.T) {
	pool := testdb.New(t)
	ctx := context.Background()
	o := readsOptions{Postings: 4000, Merchants: 4, Builders: 2, Batch: 300, Samples: 40, Rounds: 2, WriterShare: 0.5,
		CSVRows: 500, DeepPage: 10, Calibrate: 300 * time.Millisecond, PayoutsPerS: 20, PayoutsMerchantPayouts: 30}
	out := captureStdout(t, func() { require.NoError(t, benchReads(ctx, pool, o)) })
	for _, want := range []string{"build: 4000 postings", "merchant balances", "entries page 10 (50 rows)",
		"balance at an instant", "statement page 1 (50 rows", "statement of payouts, page 1 (50 rows)", "statement until a date, page 1", "CSV export of one account", "audit (ledger", "audit OK"} {
		require.Contains(t, out, want)
	}
	// The test's role may not CHECKPOINT: the bench says so and goes on.
	require.Regexp(t, `(?m)^checkpoint( \(the build's pages written out before measuring\)|: not allowed for this role)`, out)
	var run string
	require.NoError(t, pool.QueryRow(ctx, `SELECT left(id, length(id) - 1) FROM merchants ORDER BY id LIMIT 1`).Scan(&run))
	o.Reuse = run
	out = captureStdout(t, func() { require.NoError(t, benchReads(ctx, pool, o)) })
	require.Contains(t, out, "reusing run "+run)
	require.NotContains(t, out, "build:")
	require.Contains(t, out, "audit OK")
	// The payouts merchant is reused, not given its payouts twice.
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM payouts WHERE merchant_id = $1`, run+"p").Scan(&n))
	require.Equal(t, 30, n)
}

func captureStdout(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stdout = old }()
	fn()
	w.Close()
	os.Stdout = old
	s := <-done
	if testing.Verbose() {
		t.Log(strings.TrimSpace(s))
	}
	return s
}
