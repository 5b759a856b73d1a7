package ledger_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/ledger"
)

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
