package ledger_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// TestTransactionWalkIsOneSnapshot (audit: the ledger-wide CSV export an
// auditor replays is whole): the export (api exportCSV) walks
// ledger.WalkTransactions page by page. Were each page its own statement, a
// transaction whose id was drawn before a listed one, and which committed
// while the walk was under way, would be left out although a transaction
// committed after it is listed: no state the ledger was ever in. In one
// snapshot, the walk lists everything committed when it started and
// nothing committed later.
func TestTransactionWalkIsOneSnapshot(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	x := f.merchant(t, ctx, "x", "")
	y := f.merchant(t, ctx, "y", "")
	suspense, err := ledger.EnsureAccount(ctx, f.pool, ledger.PlatformSuspense(money.BRL))
	require.NoError(t, err)

	inFlight, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	defer inFlight.Rollback(ctx)
	a, err := ledger.Post(ctx, inFlight, transfer("a", f.funding.Code, x.Code, "1")) // id drawn, not committed
	require.NoError(t, err)
	b, err := ledger.Post(ctx, f.pool, transfer("b", suspense.Code, y.Code, "1"))
	require.NoError(t, err)
	c, err := ledger.Post(ctx, f.pool, transfer("c", suspense.Code, y.Code, "1"))
	require.NoError(t, err)
	require.Less(t, a.ID, b.ID)

	var d ledger.Transaction
	seen := map[int64]bool{}
	pages := 0
	err = ledger.WalkTransactions(ctx, f.pool, ledger.TransactionFilter{}, 1, func(pg ledger.TransactionsPage) error {
		for _, tx := range pg.Transactions {
			seen[tx.ID] = true
		}
		if pages++; pages == 1 {
			// While the walk is under way (past b): a commits, then d.
			require.NoError(t, inFlight.Commit(ctx))
			var err error
			d, err = ledger.Post(ctx, f.pool, transfer("d", suspense.Code, y.Code, "1"))
			require.NoError(t, err)
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, pages, 1, "the walk read one page")
	require.True(t, seen[b.ID] && seen[c.ID], "committed before the walk: %v", seen)
	require.False(t, seen[d.ID] && !seen[a.ID],
		"the walk lists %d but not %d, which committed before it", d.ID, a.ID)
	assert.False(t, seen[a.ID] || seen[d.ID], "committed after the walk's snapshot: %v", seen)

	// A walk started afterwards lists all four.
	all := map[int64]bool{}
	require.NoError(t, ledger.WalkTransactions(ctx, f.pool, ledger.TransactionFilter{}, 1, func(pg ledger.TransactionsPage) error {
		for _, tx := range pg.Transactions {
			all[tx.ID] = true
		}
		return nil
	}))
	require.True(t, all[a.ID] && all[b.ID] && all[c.ID] && all[d.ID], "%v", all)
}

// TestExportRangeSubMicrosecond (audit: an export or statement range is
// exactly [from, to), ledger.CeilMicrosecond): posted_at has microseconds;
// a from/to with nanoseconds was truncated when sent, so [from, to) took
// in a posting before from and left out one before to.
func TestExportRangeSubMicrosecond(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	x := f.merchant(t, ctx, "x", "5")
	acc, err := ledger.AccountByCode(ctx, f.pool, x.Code)
	require.NoError(t, err)
	pg, err := ledger.ListPostings(ctx, f.pool, acc.Code, ledger.PageRequest{})
	require.NoError(t, err)
	require.Len(t, pg.Postings, 1)
	p := pg.Postings[0].PostedAt

	count := func(from, to time.Time) int {
		n := 0
		require.NoError(t, ledger.StreamPostings(ctx, f.pool, acc.Code, from, to, func(ledger.Account, *ledger.ExportRow) error {
			n++
			return nil
		}))
		return n
	}
	assert.Equal(t, 0, count(p.Add(500*time.Nanosecond), time.Time{}), "posting at %s is before from", p)
	assert.Equal(t, 1, count(time.Time{}, p.Add(500*time.Nanosecond)), "posting at %s is before to", p)

	// The statement's range is the same.
	entries := func(from, to time.Time) int {
		pg, err := ledger.MerchantStatement(ctx, f.pool, ledger.StatementRequest{MerchantID: "x", From: from, To: to})
		require.NoError(t, err)
		return len(pg.Entries)
	}
	assert.Equal(t, 0, entries(p.Add(500*time.Nanosecond), time.Time{}), "statement: posting at %s is before from", p)
	assert.Equal(t, 1, entries(time.Time{}, p.Add(500*time.Nanosecond)), "statement: posting at %s is before to", p)
	assert.Equal(t, 1, entries(p, p.Add(time.Nanosecond)), "statement: posting at %s is in [P, P+1ns)", p)
}
