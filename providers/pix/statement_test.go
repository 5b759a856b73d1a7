package pix_test

import (
	"context"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/pix"
	"github.com/saldo/saldo/providers/pix/pixtest"
)

// R19: a day's statement walks every page of GET /pix and of the sends'
// list (paginacao), with inicio and fim bounding the UTC day.
func TestStatementPagination_R19(t *testing.T) {
	e := newEnv(t, pixtest.Options{SendsFinal: true, RefundsFinal: true})
	e.p = e.adapter(func(c *pix.Config) { c.PageSize = 2 })
	// The fake stamps the cob, the refund and the sends with the wall
	// clock: a test that straddled midnight UTC would find them on the
	// next day's statement. Near midnight, wait it out (as reconcile's
	// adapter tests do).
	if now := time.Now().UTC(); now.Add(3*time.Minute).Day() != now.Day() {
		time.Sleep(now.Truncate(24 * time.Hour).Add(24*time.Hour + time.Second).Sub(now))
	}
	day := time.Now().UTC().Truncate(24 * time.Hour)
	for i := range 4 {
		e.srv.ReceivePix("", "1.0"+strconv.Itoa(i), day.Add(time.Duration(i+1)*time.Hour))
	}
	e.srv.ReceivePix("", "9.99", day.Add(-time.Hour)) // the day before: not listed
	txid := ref(t)
	e.submit(providers.OpPixCharge, cobInput(), txid)
	e2e, _ := e.srv.PayCob(txid)
	rr := ref(t)
	e.submit(providers.OpRefund, providers.OperationInput{Amount: "0.50", Currency: "BRL", ChargeProviderID: e2e}, rr)
	var sends []string
	for range 3 {
		r := ref(t)
		sends = append(sends, r)
		e.submit(providers.OpPixTransfer, providers.OperationInput{Amount: "2.00", Currency: "BRL", Destination: keyDest("a@b.c")}, r)
	}
	entries, err := e.p.Statement(context.Background(), day.Add(13*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	count := map[providers.Operation]int{}
	for _, en := range entries {
		count[en.Operation]++
		if en.Currency != "BRL" || en.State == "" || en.ProviderID == "" || en.At.IsZero() {
			t.Errorf("entry %+v", en)
		}
		switch {
		case en.Reference == txid:
			if en.Operation != providers.OpPixCharge || en.ProviderID != e2e || en.Amount != "10.50" {
				t.Errorf("cob entry %+v", en)
			}
		case en.Reference == rr:
			if en.Operation != providers.OpRefund || en.State != providers.StateSucceeded || en.Amount != "0.50" {
				t.Errorf("refund entry %+v", en)
			}
		}
	}
	if count[providers.OpPixCharge] != 5 || count[providers.OpRefund] != 1 || count[""] != 3 {
		t.Fatalf("entries by operation %v: %+v", count, entries)
	}
	var pages []int
	for _, path := range []string{pixtest.StandardPrefix + "/pix", "/v2/gn/pix/enviados"} {
		pages = pages[:0]
		for _, r := range e.srv.Requests() {
			if r.Method != http.MethodGet || r.Path != path {
				continue
			}
			q, _ := url.ParseQuery(r.Query)
			if q.Get("inicio") != day.Format(time.RFC3339Nano) || q.Get("fim") != day.Add(24*time.Hour-1).Format(time.RFC3339Nano) ||
				q.Get("paginacao.itensPorPagina") != "2" {
				t.Errorf("%s query %s", path, r.Query)
			}
			n, _ := strconv.Atoi(q.Get("paginacao.paginaAtual"))
			pages = append(pages, n)
		}
		sort.Ints(pages)
		want := map[string][]int{pixtest.StandardPrefix + "/pix": {0, 1, 2}, "/v2/gn/pix/enviados": {0, 1}}[path]
		if len(pages) != len(want) || pages[0] != 0 || pages[len(pages)-1] != want[len(want)-1] {
			t.Errorf("%s pages %v, want %v", path, pages, want)
		}
	}
	// A page that fails fails the statement (never a partial list).
	e.srv.FailNext(503, `{"title":"x","status":503}`)
	if _, err := e.p.Statement(context.Background(), day); err == nil {
		t.Fatal("a failed page gave a statement")
	}
}

// R19: Statement lists a devolucao with the Pix it returns, on that Pix's
// day, which the Pix rules allow up to 90 days before the refund: the
// adapter declares it. Pix received and sends are listed on their day.
func TestStatementDatingDeclared_R19(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	if w := providers.StatementWindow(e.p, providers.OpRefund); w.Before != pix.RefundWindowDays+1 || w.After != 1 {
		t.Errorf("refund window %+v", w)
	}
	for _, op := range []providers.Operation{providers.OpPixCharge, providers.OpPixTransfer, providers.OpBankPayout} {
		if w := providers.StatementWindow(e.p, op); w != providers.DefaultStatementDating {
			t.Errorf("%s: window %+v", op, w)
		}
	}
}
