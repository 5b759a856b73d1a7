package api_test

import (
	"encoding/csv"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers/sim"
)

// Admin funding adjustments are balanced ledger transactions with a reason
// and the admin's key id; auditors read transactions and postings with
// keyset cursors, an account's balance at an instant, and a CSV export.
func TestFundingAndLedgerReads(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	before := time.Now().UTC()

	body := map[string]any{"amount": "250.00", "currency": "BRL", "reason": "wire 123 received"}
	r := e.post("/v1/merchants/m2/fundings", e.admin, "", body)
	require.Equal(t, http.StatusBadRequest, r.Status, "money moves: the key is required")
	r = e.post("/v1/merchants/m2/fundings", e.admin, "fund-1", body)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	tx := r.json(t)
	require.Equal(t, "funding", tx["cause_kind"])
	require.Equal(t, "wire 123 received", tx["description"])
	require.Len(t, tx["postings"], 2)
	again := e.post("/v1/merchants/m2/fundings", e.admin, "fund-1", body)
	require.Equal(t, string(r.Body), string(again.Body))
	require.Equal(t, http.StatusForbidden, e.post("/v1/merchants/m2/fundings", e.m2, "fund-2", body).Status)
	require.Equal(t, http.StatusNotFound, e.post("/v1/merchants/ghost/fundings", e.admin, "fund-3", body).Status)
	r = e.post("/v1/merchants/m2/fundings", e.admin, "fund-4", map[string]any{"amount": "-300.00", "currency": "BRL", "reason": "too much"})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status)
	require.Equal(t, "insufficient_balance", r.code(t))
	r = e.post("/v1/merchants/m2/fundings", e.admin, "fund-5", map[string]any{"amount": "-50.00", "currency": "BRL", "reason": "chargeback fee"})
	require.Equal(t, http.StatusCreated, r.Status)
	r = e.post("/v1/merchants/m2/fundings", e.admin, "fund-6", map[string]any{"amount": "5.00", "currency": "BRL", "reason": " "})
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "reason", r.json(t)["field"])
	av, _ := e.balances("m2", e.m2)
	require.Equal(t, "200.00", av)

	// Transactions, one per page, with a cursor; merchants may not.
	seen := map[any]bool{}
	cursor := ""
	for range 10 {
		path := "/v1/ledger/transactions?limit=1"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		pg := e.get(path, e.auditor).json(t)
		for _, x := range pg["data"].([]any) {
			seen[x.(map[string]any)["id"]] = true
		}
		c, ok := pg["next_cursor"].(string)
		if !ok {
			break
		}
		cursor = c
	}
	require.Len(t, seen, 3, "initial m1 funding and two m2 adjustments")
	r = e.get("/v1/ledger/transactions?cause_kind=funding&cause_id=m2&order=desc", e.admin)
	require.Equal(t, http.StatusOK, r.Status)
	require.Len(t, r.json(t)["data"], 2)
	r = e.get("/v1/ledger/transactions?cursor=garbage", e.auditor)
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "cursor", r.json(t)["field"])
	r = e.get(fmt.Sprintf("/v1/ledger/transactions/%v", tx["id"]), e.auditor)
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, http.StatusNotFound, e.get("/v1/ledger/transactions/999999", e.auditor).Status)

	acct := url.QueryEscape("merchant/m2/available/BRL")
	r = e.get("/v1/ledger/postings?limit=1&account="+acct, e.auditor)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	pg := r.json(t)
	require.Len(t, pg["data"], 1)
	require.Equal(t, "250.00", pg["data"].([]any)[0].(map[string]any)["balance_after"])
	r = e.get("/v1/ledger/postings?limit=1&account="+acct+"&cursor="+url.QueryEscape(pg["next_cursor"].(string)), e.auditor)
	require.Equal(t, "200.00", r.json(t)["data"].([]any)[0].(map[string]any)["balance_after"])
	require.Equal(t, http.StatusBadRequest, e.get("/v1/ledger/postings", e.auditor).Status)
	require.Equal(t, http.StatusNotFound, e.get("/v1/ledger/postings?account="+url.QueryEscape("merchant/ghost/available/BRL"), e.auditor).Status)
	require.Equal(t, http.StatusForbidden, e.get("/v1/ledger/postings?account="+acct, e.operator).Status)

	// Balance at an instant: zero before the funding, 200.00 after.
	at := func(t0 time.Time) string {
		r := e.get("/v1/ledger/balance?account="+acct+"&at="+url.QueryEscape(t0.Format(time.RFC3339Nano)), e.auditor)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		return r.json(t)["balance"].(string)
	}
	require.Equal(t, "0.00", at(before.Add(-time.Hour)))
	require.Equal(t, "200.00", at(time.Now().Add(time.Minute)))
	require.Equal(t, http.StatusBadRequest, e.get("/v1/ledger/balance?account="+acct+"&at=yesterday", e.auditor).Status)

	// CSV: the whole ledger, then one account.
	r = e.get("/v1/ledger/export.csv", e.auditor)
	require.Equal(t, http.StatusOK, r.Status)
	require.True(t, strings.HasPrefix(r.Header.Get("Content-Type"), "text/csv"))
	rows, err := csv.NewReader(strings.NewReader(string(r.Body))).ReadAll()
	require.NoError(t, err)
	require.Equal(t, "transaction_id", rows[0][0])
	require.Len(t, rows, 1+6, "three transactions of two postings")
	r = e.get("/v1/ledger/export.csv?account="+acct, e.admin)
	rows, err = csv.NewReader(strings.NewReader(string(r.Body))).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 3)
	require.Equal(t, []string{"250.00", "-50.00"}, []string{rows[1][4], rows[2][4]})
	r = e.get("/v1/ledger/export.csv?from="+url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339)), e.auditor)
	rows, err = csv.NewReader(strings.NewReader(string(r.Body))).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 1, "nothing after from")
	require.Equal(t, http.StatusForbidden, e.get("/v1/ledger/export.csv", e.m1).Status)
}
