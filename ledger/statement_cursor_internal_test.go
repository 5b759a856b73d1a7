package ledger

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/money"
)

// TestStatementCursorPositionsReview: a cursor crafted with the listing's
// true scope (the scope is an unkeyed hash anyone can compute) naming
// another merchant's account is refused as a bad cursor on every path
// (newest first, oldest first, oldest first from a time with an account the
// cursor does not name) and reads nothing; and every page size, order and
// time window pages through the statement without a skip or a repeat.
func TestStatementCursorPositionsReview(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	funding, err := EnsureAccount(ctx, pool, PlatformFunding(money.BRL))
	require.NoError(t, err)
	acc := func(s AccountSpec) Account {
		a, err := EnsureAccount(ctx, pool, s)
		require.NoError(t, err)
		return a
	}
	m1a, m1r := acc(MerchantAvailable("m1", money.BRL)), acc(MerchantReserved("m1", money.BRL))
	m2a := acc(MerchantAvailable("m2", money.BRL))
	post := func(key string, legs ...any) {
		in := TransactionInput{IdempotencyKey: key, CauseKind: "test", CauseID: key, Description: key}
		for i := 0; i < len(legs); i += 2 {
			in.Postings = append(in.Postings, PostingInput{AccountCode: legs[i].(string),
				Amount: decimal.RequireFromString(legs[i+1].(string)), Currency: money.BRL})
		}
		_, err := Post(ctx, pool, in)
		require.NoError(t, err)
	}
	for i := range 9 {
		post(fmt.Sprint("f", i), funding.Code, "-3", m1a.Code, "2", m2a.Code, "1")
		if i%2 == 0 { // m1's two accounts in one transaction: the same posted_at
			post(fmt.Sprint("r", i), m1a.Code, "-1", m1r.Code, "1")
		}
	}

	all := func(order Order) []StatementEntry {
		pg, err := MerchantStatement(ctx, pool, StatementRequest{MerchantID: "m1", Limit: MaxPageSize, Order: order})
		require.NoError(t, err)
		require.Empty(t, pg.NextCursor)
		return pg.Entries
	}
	asc := all(Ascending)
	require.Len(t, asc, 9+2*5)

	// Crafted cursors naming m2's account.
	from := asc[6].PostedAt
	for _, c := range []struct {
		req StatementRequest
		pos string
	}{
		{StatementRequest{MerchantID: "m1", Order: Descending}, fmt.Sprintf("%d.10", m2a.ID)},
		{StatementRequest{MerchantID: "m1", Order: Ascending}, fmt.Sprintf("%d.0", m2a.ID)},
		{StatementRequest{MerchantID: "m1", Order: Ascending}, fmt.Sprintf("%d.0,%d.0,%d.0", m1a.ID, m1r.ID, m2a.ID)},
		{StatementRequest{MerchantID: "m1", Order: Ascending, From: from}, fmt.Sprintf("%d.0", m2a.ID)},
		{StatementRequest{MerchantID: "m1", Order: Descending, To: from}, fmt.Sprintf("%d.5", m2a.ID)},
	} {
		c.req.Cursor = base64.RawURLEncoding.EncodeToString([]byte(
			fmt.Sprintf("statement:%s:%d:%s", statementScope(c.req), c.req.Order, c.pos)))
		pg, err := MerchantStatement(ctx, pool, c.req)
		require.True(t, errors.Is(err, ErrInvalidCursor), "%s: %v", c.pos, err)
		require.Empty(t, pg.Entries)
	}

	// Every page size, order and window: the pages are the listing.
	key := func(e StatementEntry) string { return fmt.Sprint(e.AccountID, ".", e.Seq) }
	windows := []struct{ from, to time.Time }{{}, {from: from}, {to: asc[12].PostedAt}, {from: asc[3].PostedAt, to: asc[15].PostedAt}}
	for _, order := range []Order{Ascending, Descending} {
		for _, win := range windows {
			var want []string
			for _, e := range all(order) {
				if (win.from.IsZero() || !e.PostedAt.Before(win.from)) && (win.to.IsZero() || e.PostedAt.Before(win.to)) {
					want = append(want, key(e))
				}
			}
			for limit := 1; limit <= 6; limit++ {
				req := StatementRequest{MerchantID: "m1", Order: order, From: win.from, To: win.to, Limit: limit}
				var got []string
				for pages := 0; ; pages++ {
					require.Less(t, pages, 100)
					pg, err := MerchantStatement(ctx, pool, req)
					require.NoError(t, err)
					require.LessOrEqual(t, len(pg.Entries), limit)
					for _, e := range pg.Entries {
						got = append(got, key(e))
					}
					if pg.NextCursor == "" {
						break
					}
					req.Cursor = pg.NextCursor
				}
				require.Equal(t, want, got, "order %d window %v limit %d", order, win, limit)
			}
		}
	}
}
