package api_test

import (
	"encoding/csv"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers/sim"
)

// An account's CSV export streams in chunks (issue 19): across chunk
// boundaries and within a from/to window it has exactly the account's
// postings, formatted as the postings API formats them; an unknown account
// is 404 and a bad code 400 before anything is written.
func TestAccountCSVExportMatchesPostings(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	avail, err := ledger.EnsureAccount(e.ctx, e.pool, ledger.MerchantAvailable("m1", money.BRL))
	require.NoError(t, err)
	funding, err := ledger.EnsureAccount(e.ctx, e.pool, ledger.PlatformFunding(money.BRL))
	require.NoError(t, err)
	// 12,500 postings on m1's account: more than one export chunk.
	for batch := range 5 {
		var ins []ledger.TransactionInput
		for i := range 2500 {
			amt := decimal.New(int64(100+i), -2)
			if i%7 == 0 {
				amt = decimal.NewFromInt(int64(i + 1)) // no decimals given: still exported with two
			}
			ins = append(ins, ledger.TransactionInput{IdempotencyKey: fmt.Sprintf("csv-%d-%d", batch, i), CauseKind: "funding", CauseID: "m1",
				Postings: []ledger.PostingInput{{AccountID: funding.ID, Amount: amt.Neg(), Currency: money.BRL}, {AccountID: avail.ID, Amount: amt, Currency: money.BRL}}})
		}
		require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error { _, err := ledger.PostMany(e.ctx, tx, ins); return err }))
	}
	var want [][]string
	cursor := ""
	for {
		pg, err := ledger.ListPostings(e.ctx, e.pool, avail.Code, ledger.PageRequest{Cursor: cursor, Limit: ledger.MaxPageSize})
		require.NoError(t, err)
		for _, p := range pg.Postings {
			want = append(want, []string{strconv.FormatInt(p.TransactionID, 10), strconv.Itoa(p.Leg), p.AccountCode,
				strconv.FormatInt(p.Seq, 10), p.Amount.StringFixed(2), "BRL", p.BalanceAfter.StringFixed(2),
				p.PostedAt.UTC().Format(time.RFC3339Nano), "", "", hex.EncodeToString(p.Hash)})
		}
		if cursor = pg.NextCursor; cursor == "" {
			break
		}
	}
	require.Len(t, want, 12501)
	read := func(query string) [][]string {
		r := e.get("/v1/ledger/export.csv?account="+url.QueryEscape(avail.Code)+query, e.auditor)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		rows, err := csv.NewReader(strings.NewReader(string(r.Body))).ReadAll()
		require.NoError(t, err)
		require.Equal(t, strings.Split(strings.TrimSuffix("transaction_id,leg,account_code,seq,amount,currency,balance_after,posted_at,cause_kind,cause_id,hash", "\n"), ","), rows[0])
		return rows[1:]
	}
	require.Equal(t, want, read(""))
	// A window: the postings of the second batch through the fourth.
	at := func(i int) time.Time {
		ts, err := time.Parse(time.RFC3339Nano, want[i][7])
		require.NoError(t, err)
		return ts
	}
	from, to := at(2600), at(10000)
	var window [][]string
	for i, w := range want {
		if !at(i).Before(from) && at(i).Before(to) {
			window = append(window, w)
		}
	}
	require.NotEmpty(t, window)
	require.Equal(t, window, read("&from="+url.QueryEscape(from.Format(time.RFC3339Nano))+"&to="+url.QueryEscape(to.Format(time.RFC3339Nano))))
	require.Empty(t, read("&to=2000-01-01T00:00:00Z"))

	r := e.get("/v1/ledger/export.csv?account=merchant/ghost/available/BRL", e.auditor)
	require.Equal(t, http.StatusNotFound, r.Status)
	require.Equal(t, "not_found", r.code(t))
	r = e.get("/v1/ledger/export.csv?account=nope", e.auditor)
	require.Equal(t, http.StatusBadRequest, r.Status)
}
