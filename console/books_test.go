package console_test

import (
	"encoding/csv"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
)

// The object pages link to their ledger entries and back: a card charge
// and its credit, its refund, a split and its legs; the account page pages
// with keyset cursors and exports what is on screen as CSV; the charts are
// SVG drawn on the server.
func TestBooksPages(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{insecure: true})
	ch, err := e.e.Charges.Create(e.ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindCard,
		Amount: money.MustParse("20.00", "BRL"), CardToken: "tok_visa"})
	require.NoError(t, err)
	_, err = e.e.Attempts.Execute(e.ctx, *ch.AttemptID)
	require.NoError(t, err)
	ch, err = e.e.Charges.Get(e.ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, ch.Status)
	refund, err := e.e.Payouts.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: "m1", ChargeID: ch.ID,
		Amount: money.MustParse("5.00", "BRL")})
	require.NoError(t, err)
	_, err = e.e.Attempts.Execute(e.ctx, *refund.CurrentAttemptID)
	require.NoError(t, err)
	sp, err := e.e.Payouts.CreateSplit(e.ctx, payouts.SplitRequest{MerchantID: "m1", Legs: []payouts.SplitLeg{
		{Operation: providers.OpPixTransfer, Amount: money.MustParse("3.00", "BRL"), Destination: pixDestination()},
		{Operation: providers.OpPixTransfer, Amount: money.MustParse("2.00", "BRL"), Destination: pixDestination()}}})
	require.NoError(t, err)
	for _, l := range sp.Legs {
		r, err := e.e.Attempts.Execute(e.ctx, *l.CurrentAttemptID)
		require.NoError(t, err)
		require.Equal(t, attempts.StatusSucceeded, r.Attempt.Status)
	}
	for i := range 60 {
		_, err := merchants.Fund(e.ctx, e.pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("1.00", "BRL"),
			Key: fmt.Sprintf("top-up-%d", i), Reason: "top-up", Actor: "test"})
		require.NoError(t, err)
	}

	c := e.client()
	c.signIn(e.secret["auditor"])
	res, body := c.get("/console/merchants/m1/charges/" + ch.ID)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "charge_credit")
	require.Contains(t, body, fmt.Sprintf(`/console/ledger/transactions/%d`, ch.CreditTransactionID))
	require.Contains(t, body, "/console/merchants/m1/payouts/"+refund.ID, "the charge lists its refund")
	res, body = c.get(fmt.Sprintf("/console/ledger/transactions/%d", ch.CreditTransactionID))
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `href="/console/merchants/m1/charges/`+ch.ID+`"`, "the credit links back to its charge")
	require.Regexp(t, `[0-9a-f]{64}`, body, "hashes")

	res, body = c.get("/console/merchants/m1/payouts/" + refund.ID)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "/console/merchants/m1/charges/"+ch.ID, "the refund links to its charge")
	require.Contains(t, body, "payout_settle")
	res, body = c.get("/console/merchants/m1/splits/" + sp.ID)
	require.Equal(t, http.StatusOK, res.StatusCode)
	for _, l := range sp.Legs {
		require.Contains(t, body, "/console/merchants/m1/payouts/"+l.ID)
	}
	res, body = c.get("/console/merchants/m1/payouts/" + sp.Legs[0].ID)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "/console/merchants/m1/splits/"+sp.ID)

	// Keyset pages of an account, and the CSV of each page.
	code := url.QueryEscape("merchant/m1/available/BRL")
	res, body = c.get("/console/ledger/account?code=" + code)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, 50, strings.Count(body, `<tr><td>`), "a page of 50 postings")
	next := regexp.MustCompile(`href="([^"]+)" id="next"`).FindStringSubmatch(body)
	require.NotNil(t, next)
	csvHref := regexp.MustCompile(`href="([^"]+)" id="csv"`).FindStringSubmatch(body)
	res, body = c.get(html.UnescapeString(csvHref[1]))
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/csv; charset=utf-8", res.Header.Get("Content-Type"))
	recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 51, "header + what is on screen")
	require.Equal(t, "transaction_id", recs[0][0])

	res, body = c.get(html.UnescapeString(next[1]))
	require.Equal(t, http.StatusOK, res.StatusCode)
	rest := strings.Count(body, `<tr><td>`)
	require.Positive(t, rest)
	csvHref = regexp.MustCompile(`href="([^"]+)" id="csv"`).FindStringSubmatch(body)
	_, body = c.get(html.UnescapeString(csvHref[1]))
	recs, err = csv.NewReader(strings.NewReader(body)).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, rest+1)
	require.Equal(t, "1", recs[len(recs)-1][3], "newest first: the last page ends at seq 1")
	res, _ = c.get("/console/ledger/account?code=" + code + "&cursor=bogus")
	require.Equal(t, http.StatusBadRequest, res.StatusCode)

	res, body = c.get("/console/ledger?prefix=" + url.QueryEscape("merchant/m1/"))
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "merchant/m1/available/BRL")
	require.NotContains(t, body, "provider/sim/clearing/BRL")
	res, body = c.get("/console/ledger?prefix=" + url.QueryEscape("merchant/m1/") + "&format=csv")
	require.Equal(t, http.StatusOK, res.StatusCode)
	recs, err = csv.NewReader(strings.NewReader(body)).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 3, "header, m1's available and reserved")
	res, _ = c.get("/console/static/")
	require.Equal(t, http.StatusNotFound, res.StatusCode, "no directory listing")
	res, _ = c.get("/console/static/console.css")
	require.Equal(t, http.StatusOK, res.StatusCode)

	res, body = c.get("/console/charts")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, 3, strings.Count(body, "<svg"))
	require.Contains(t, body, "sim (")
	require.Contains(t, body, "succeeded")

	m2 := e.client()
	m2.signIn(e.secret["m2"])
	res, _ = m2.get("/console/merchants/m1/charges/" + ch.ID)
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	m1 := e.client()
	m1.signIn(e.secret["m1"])
	res, body = m1.get("/console/merchants/m1/charges/" + ch.ID)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NotContains(t, body, "charge_credit", "merchants do not read the ledger")
}
