package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/internal/testdb"
)

// saldo bench payouts, briefly, with its payout-shaped baseline (issue 19,
// decision 0004 option 2): the baseline's figures and ratios are printed
// beside the pipeline's and the ledger's, and the baseline's payouts are
// final and balanced in the same database, so the audit after the bench is
// clean (R22: every reserve settled, reserved balance = open attempts; R8,
// R9: one attempt per payout with a valid history). Then the rows it wrote
// are checked to be a payout's: the same tables, the same number of rows
// per payout as the pipeline's, and its River jobs completed. No
// assertion on throughput.
func TestBenchPayoutsBaseline_R8_R9_R22(t *testing.T) {
	u := testdb.NewURL(t)
	ctx := context.Background()
	out := captureStdout(t, func() {
		require.NoError(t, runBenchPayouts(ctx, []string{"--database-url", u, "--duration", "1s", "--rounds", "1",
			"--merchants", "3", "--workers", "2", "--warmup", "300ms"}))
	})
	for _, want := range []string{"round 1 payouts:", "ratio payouts/s / ledger transfers/s:", "payout-shaped baseline:",
		"3 commits per payout, a round trip per statement; synchronous_commit=", "ratio payouts/s / payout-shaped baseline:",
		"audit OK", "sim oracle: nobody paid twice"} {
		require.Contains(t, out, want)
	}
	if strings.Contains(out, "CPU/payout client") {
		require.Contains(t, out, "CPU per payout, payout-shaped baseline / payouts:")
	}

	pool, err := pgxpool.New(ctx, u)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())

	// Per payout, for the baseline's merchants (bl...) and the pipeline's
	// (pb...): attempts, events, ledger transactions and postings, submit
	// jobs, client keys, and how many are not final.
	shape := func(prefix string) []int64 {
		var n, attemptsN, events, txs, postings, jobs, requests, open int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM payouts WHERE merchant_id LIKE $1),
				(SELECT count(*) FROM attempts a JOIN payouts p ON p.id = a.subject_id WHERE p.merchant_id LIKE $1),
				(SELECT count(*) FROM attempt_events e JOIN attempts a ON a.id = e.attempt_id
					JOIN payouts p ON p.id = a.subject_id WHERE p.merchant_id LIKE $1),
				(SELECT count(*) FROM ledger_transactions t JOIN attempts a ON t.cause_id = a.id::text
					JOIN payouts p ON p.id = a.subject_id WHERE p.merchant_id LIKE $1),
				(SELECT count(*) FROM ledger_postings po JOIN ledger_transactions t ON t.id = po.transaction_id
					JOIN attempts a ON t.cause_id = a.id::text JOIN payouts p ON p.id = a.subject_id WHERE p.merchant_id LIKE $1),
				(SELECT count(*) FROM river_job j JOIN attempts a ON j.args->>'attempt_id' = a.id::text
					JOIN payouts p ON p.id = a.subject_id
					WHERE p.merchant_id LIKE $1 AND j.kind = 'attempts.submit' AND j.state = 'completed'),
				(SELECT count(*) FROM payout_requests WHERE merchant_id LIKE $1),
				(SELECT count(*) FROM payouts WHERE merchant_id LIKE $1 AND status <> 'succeeded')`,
			prefix).Scan(&n, &attemptsN, &events, &txs, &postings, &jobs, &requests, &open))
		require.Positive(t, n, prefix)
		return []int64{attemptsN / n, events / n, txs / n, postings / n, jobs / n, requests / n, open,
			attemptsN % n, events % n, txs % n, postings % n, jobs % n, requests % n}
	}
	baseline := shape(`bl%`)
	require.Equal(t, []int64{1, 3, 2, 4, 1, 1, 0, 0, 0, 0, 0, 0, 0}, baseline)
	require.Equal(t, shape(`pb%`), baseline)
	// Its submit jobs are the rows River writes: the same unique states,
	// max attempts and priority as the pipeline's, on a queue of their own
	// that no River client works.
	var same bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT
			(SELECT array_agg(DISTINCT (unique_states, max_attempts, priority, length(unique_key))::text) FROM river_job
				WHERE kind = 'attempts.submit' AND queue = 'payout_baseline') =
			(SELECT array_agg(DISTINCT (unique_states, max_attempts, priority, length(unique_key))::text) FROM river_job
				WHERE kind = 'attempts.submit' AND queue <> 'payout_baseline')`).Scan(&same))
	require.True(t, same)
}

// Without the baseline, saldo bench payouts prints what it printed before.
func TestBenchPayoutsWithoutBaseline(t *testing.T) {
	u := testdb.NewURL(t)
	out := captureStdout(t, func() {
		require.NoError(t, runBenchPayouts(context.Background(), []string{"--database-url", u, "--duration", "500ms",
			"--rounds", "1", "--merchants", "2", "--workers", "1", "--warmup", "200ms", "--ledger=false", "--baseline=false"}))
	})
	require.Contains(t, out, "round 1 payouts:")
	require.Contains(t, out, "audit OK")
	require.NotContains(t, out, "baseline")
}
