package api_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

type statementEntry struct {
	Account       string    `json:"account"`
	Purpose       string    `json:"purpose"`
	Seq           int64     `json:"seq"`
	TransactionID int64     `json:"transaction_id"`
	Amount        string    `json:"amount"`
	Currency      string    `json:"currency"`
	BalanceAfter  string    `json:"balance_after"`
	PostedAt      time.Time `json:"posted_at"`
	Cause         struct {
		Kind      string `json:"kind"`
		Object    string `json:"object"`
		ObjectID  string `json:"object_id"`
		AttemptID string `json:"attempt_id"`
		ChargeID  string `json:"charge_id"`
	} `json:"cause"`
}

type statementPage struct {
	Data       []statementEntry `json:"data"`
	NextCursor string           `json:"next_cursor"`
}

// statementPageOf reads one page (validated against the OpenAPI document).
func (e *env) statementPage(merchant, key string, q url.Values) (statementPage, error) {
	r, err := e.exchange(req{method: http.MethodGet, path: "/v1/merchants/" + merchant + "/statement?" + q.Encode(), key: key})
	if err != nil {
		return statementPage{}, err
	}
	if r.Status != http.StatusOK {
		return statementPage{}, fmt.Errorf("statement: %d %s", r.Status, r.Body)
	}
	var p statementPage
	return p, json.Unmarshal(r.Body, &p)
}

// statementAll pages through the whole statement.
func (e *env) statementAll(merchant, key string, q url.Values) []statementEntry {
	e.t.Helper()
	var all []statementEntry
	q = cloneValues(q)
	for range 10000 {
		p, err := e.statementPage(merchant, key, q)
		require.NoError(e.t, err)
		all = append(all, p.Data...)
		if p.NextCursor == "" {
			return all
		}
		q.Set("cursor", p.NextCursor)
	}
	e.t.Fatal("statement never ended")
	return nil
}

func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// R21, R22, R24: a merchant's statement names what caused each entry: the
// payout (its reserve, settle, release), the refund and the charge it gives
// back for, the charge credited, a split recipient's share (without the
// other merchant's charge id), a funding and a reversal; each entry carries
// its balance after, and the entries are the merchant's postings exactly.
func TestMerchantStatementCauses_R21_R22(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	ok := e.createPix("10.00", "st-ok")
	require.Equal(t, attempts.StatusSucceeded, e.execute(ok["current_attempt_id"].(string)).Status)
	declined := e.post("/v1/merchants/m1/pix-transfers", e.m1, "st-declined", map[string]any{"amount": "5.00", "currency": "BRL",
		"destination": map[string]any{"pix_key": map[string]any{"type": "email", "value": sim.DeclinedPixKey}}})
	require.Equal(t, http.StatusCreated, declined.Status, string(declined.Body))
	dp := declined.json(t)
	require.Equal(t, attempts.StatusFailed, e.execute(dp["current_attempt_id"].(string)).Status)

	r := e.post("/v1/merchants/m1/charges", e.m1, "st-ch", map[string]any{"kind": "card", "amount": "100.00", "currency": "BRL",
		"card_token": "tok_visa", "splits": []any{map[string]any{"recipient_id": "m2", "percent": "10"}}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	ch := r.json(t)
	require.Equal(t, attempts.StatusSucceeded, e.execute(ch["attempt_id"].(string)).Status)
	r = e.post("/v1/merchants/m1/charges/"+ch["id"].(string)+"/refunds", e.m1, "st-rf", map[string]any{"amount": "30.00", "currency": "BRL"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	rf := r.json(t)
	require.Equal(t, attempts.StatusSucceeded, e.execute(rf["current_attempt_id"].(string)).Status)

	fund, err := merchants.Fund(e.ctx, e.pool, merchants.Funding{MerchantID: "m1", Amount: brl("50.00"), Key: "st-extra", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	rev, err := ledger.Reverse(e.ctx, e.pool, fund.ID, "st-reverse", "funded by mistake")
	require.NoError(t, err)

	all := e.statementAll("m1", e.m1, url.Values{"limit": {"3"}})
	// The entries are m1's postings, newest first, each once.
	rows, err := e.pool.Query(e.ctx, `SELECT a.code, p.seq, p.amount::text, p.balance_after::text FROM ledger_postings p
		JOIN ledger_accounts a ON a.id = p.account_id WHERE a.owner_kind = 'merchant' AND a.owner_id = 'm1'
		ORDER BY p.posted_at DESC, p.account_id DESC, p.seq DESC`)
	require.NoError(t, err)
	var want []string
	for rows.Next() {
		var code, amount, after string
		var seq int64
		require.NoError(t, rows.Scan(&code, &seq, &amount, &after))
		want = append(want, fmt.Sprintf("%s#%d %s -> %s", code, seq, money.MustParse(amount, "BRL"), money.MustParse(after, "BRL")))
	}
	require.NoError(t, rows.Err())
	var got []string
	for _, x := range all {
		got = append(got, fmt.Sprintf("%s#%d %s BRL -> %s BRL", x.Account, x.Seq, x.Amount, x.BalanceAfter))
	}
	require.Equal(t, want, got)

	type cause struct{ kind, object, objectID, attemptID, chargeID string }
	seen := map[cause]int{}
	for _, x := range all {
		seen[cause{x.Cause.Kind, x.Cause.Object, x.Cause.ObjectID, x.Cause.AttemptID, x.Cause.ChargeID}]++
		require.Equal(t, "BRL", x.Currency)
		require.Contains(t, []string{"available", "reserved"}, x.Purpose)
	}
	okA, dpA, rfA := ok["current_attempt_id"].(string), dp["current_attempt_id"].(string), rf["current_attempt_id"].(string)
	require.Equal(t, map[cause]int{
		{"funding", "funding", "", "", ""}:                                      2, // setup's funding and the extra one
		{"payout_reserve", "pix_transfer", ok["id"].(string), okA, ""}:          2, // available and reserved
		{"payout_settle", "pix_transfer", ok["id"].(string), okA, ""}:           1, // reserved only (the other leg is the provider's)
		{"payout_reserve", "pix_transfer", dp["id"].(string), dpA, ""}:          2,
		{"payout_release", "pix_transfer", dp["id"].(string), dpA, ""}:          2,
		{"charge_credit", "charge", ch["id"].(string), "", ""}:                  1,
		{"payout_reserve", "refund", rf["id"].(string), rfA, ch["id"].(string)}: 2,
		{"payout_settle", "refund", rf["id"].(string), rfA, ch["id"].(string)}:  1,
		{"reversal", "reversal", fmt.Sprint(fund.ID), "", ""}:                   1,
	}, seen)
	require.Equal(t, rev.ID, all[0].TransactionID, "newest first")
	require.Equal(t, "-50.00", all[0].Amount)

	// m2 received a share of m1's charge: a split, without m1's charge id.
	m2 := e.statementAll("m2", e.m2, nil)
	require.Len(t, m2, 1)
	require.Equal(t, "charge_credit", m2[0].Cause.Kind)
	require.Equal(t, "charge_split", m2[0].Cause.Object)
	require.Empty(t, m2[0].Cause.ObjectID)
	require.Equal(t, "10.00", m2[0].Amount)

	// Oldest first is the same statement reversed.
	asc := e.statementAll("m1", e.auditor, url.Values{"order": {"asc"}, "limit": {"4"}})
	require.Len(t, asc, len(all))
	for i := range asc {
		require.Equal(t, all[len(all)-1-i].Account+fmt.Sprint(all[len(all)-1-i].Seq), asc[i].Account+fmt.Sprint(asc[i].Seq))
	}
}

// A merchant key reads only its own statement: another merchant's answers
// exactly what a merchant that does not exist answers (404, no probing);
// auditors and admins read any; operators none.
func TestMerchantStatementScoping(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	other := e.get("/v1/merchants/m1/statement", e.m2)
	ghost := e.get("/v1/merchants/ghost/statement", e.m2)
	ghostAuditor := e.get("/v1/merchants/ghost/statement", e.auditor)
	for _, r := range []resp{other, ghost, ghostAuditor} {
		require.Equal(t, http.StatusNotFound, r.Status)
		require.Equal(t, "not_found", r.code(t))
	}
	require.Equal(t, ghost.json(t)["detail"], other.json(t)["detail"])
	require.Equal(t, ghost.json(t)["title"], other.json(t)["title"])
	// A cursor of m1's statement does not open it to m2 either.
	p, err := e.statementPage("m1", e.m1, url.Values{"limit": {"1"}})
	require.NoError(t, err)
	require.Len(t, p.Data, 1)
	e.createPix("1.00", "scope-st")
	p, err = e.statementPage("m1", e.m1, url.Values{"limit": {"1"}})
	require.NoError(t, err)
	require.NotEmpty(t, p.NextCursor)
	r := e.get("/v1/merchants/m1/statement?limit=1&cursor="+p.NextCursor, e.m2)
	require.Equal(t, http.StatusNotFound, r.Status)
	r = e.get("/v1/merchants/m2/statement?limit=1&cursor="+p.NextCursor, e.m2)
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "cursor", r.json(t)["field"])

	for _, k := range []string{e.m1, e.auditor, e.admin} {
		r := e.get("/v1/merchants/m1/statement", k)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.Len(t, r.json(t)["data"], 3)
	}
	require.Equal(t, http.StatusForbidden, e.get("/v1/merchants/m1/statement", e.operator).Status)
	require.Equal(t, http.StatusUnauthorized, e.get("/v1/merchants/m1/statement", "").Status)
	// m2 has no account yet: an empty statement, not an error.
	r = e.get("/v1/merchants/m2/statement", e.m2)
	require.Equal(t, http.StatusOK, r.Status)
	require.Empty(t, r.json(t)["data"])
}

// Bad filters and cursors are 400s naming the field; nothing else answers.
func TestMerchantStatementRefusesBadInput(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	e.createPix("1.00", "bad-st")
	p, err := e.statementPage("m1", e.m1, url.Values{"limit": {"1"}})
	require.NoError(t, err)
	require.NotEmpty(t, p.NextCursor)
	postings := e.get("/v1/ledger/postings?limit=1&account=merchant/m1/available/BRL", e.auditor).json(t)["next_cursor"].(string)
	cases := []struct{ query, field string }{
		{"currency=XYZ", "currency"},
		{"currency=brl", "currency"},
		{"from=yesterday", "from"},
		{"to=2026-13-01T00:00:00Z", "to"},
		{"from=2026-12-02T00:00:00Z&to=2026-12-01T00:00:00Z", "to"},
		{"from=2026-12-02T00:00:00Z&to=2026-12-02T00:00:00Z", "to"},
		{"limit=0", "limit"},
		{"limit=501", "limit"},
		{"limit=ten", "limit"},
		{"order=sideways", "order"},
		{"cursor=%%%", ""},
		{"cursor=not-a-cursor", "cursor"},
		{"cursor=" + postings, "cursor"},
		{"cursor=" + p.NextCursor + "&order=asc", "cursor"},
		{"cursor=" + p.NextCursor + "&currency=BRL", "cursor"},
		{"cursor=" + p.NextCursor + "&from=2026-01-01T00:00:00Z", "cursor"},
		{"cursor=" + url.QueryEscape(p.NextCursor+"x"), "cursor"},
	}
	for _, c := range cases {
		r := e.get("/v1/merchants/m1/statement?"+c.query, e.m1)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", c.query, r.Body)
		if c.field != "" {
			require.Equal(t, c.field, r.json(t)["field"], c.query)
		}
	}
	// Tampered positions: an account the merchant does not own, a position
	// past the account's end.
	for _, raw := range []string{"statement:x:1:999999.3", "statement:x:1:1.99999999"} {
		r := e.get("/v1/merchants/m1/statement?cursor="+b64(raw), e.m1)
		require.Equal(t, http.StatusBadRequest, r.Status, raw)
	}
}

// Pages never skip or repeat an entry while writers post to the merchant's
// accounts in two currencies and a third account opens: each account's
// entries come out numbered 1..n without a gap. Newest first reads the statement as of its first
// page; oldest first reaches at least what the first page could see, and
// a fresh read once the writers stop sees everything.
func TestMerchantStatementPagesWhileWritersPost_R22(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	usd := func(s string) money.Amount { return money.MustParse(s, "USD") }
	_, err := merchants.Fund(e.ctx, e.pool, merchants.Funding{MerchantID: "m1", Amount: usd("100.00"), Key: "usd", Reason: "t", Actor: "t"})
	require.NoError(t, err)
	for i := range 20 {
		_, err := merchants.Fund(e.ctx, e.pool, merchants.Funding{MerchantID: "m1", Amount: brl("1.00"), Key: fmt.Sprint("pre-", i), Reason: "t", Actor: "t"})
		require.NoError(t, err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var posted atomic.Int64
	var eurOpened atomic.Bool
	writer := func(w int) {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var err error
			if w == 0 && i == 40 {
				// A new account (EUR) opens while pages are being read.
				_, err = merchants.Fund(e.ctx, e.pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("1.00", "EUR"), Key: "eur", Reason: "t", Actor: "t"})
				if err != nil {
					t.Error(err)
					return
				}
				eurOpened.Store(true)
			}
			switch (w + i) % 3 {
			case 0:
				_, err = merchants.Fund(e.ctx, e.pool, merchants.Funding{MerchantID: "m1", Amount: brl("2.00"), Key: fmt.Sprintf("w%d-%d", w, i), Reason: "t", Actor: "t"})
			case 1:
				_, err = merchants.Fund(e.ctx, e.pool, merchants.Funding{MerchantID: "m1", Amount: usd("-0.01"), Key: fmt.Sprintf("w%d-%d", w, i), Reason: "t", Actor: "t"})
			case 2:
				_, err = e.pay.CreatePayout(e.ctx, payouts.PayoutRequest{MerchantID: "m1", ClientKey: fmt.Sprintf("w%d-%d", w, i),
					Operation: providers.OpPixTransfer, Amount: brl("0.50"),
					Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "a@example.com"}}})
			}
			if err != nil {
				t.Error(err)
				return
			}
			posted.Add(1)
		}
	}
	for w := range 3 {
		wg.Add(1)
		go writer(w)
	}
	lastSeqs := func() map[string]int64 {
		out := map[string]int64{}
		rows, err := e.pool.Query(e.ctx, `SELECT code, last_seq FROM ledger_accounts WHERE owner_kind = 'merchant' AND owner_id = 'm1'`)
		require.NoError(t, err)
		for rows.Next() {
			var c string
			var n int64
			require.NoError(t, rows.Scan(&c, &n))
			out[c] = n
		}
		require.NoError(t, rows.Err())
		return out
	}
	// contiguous checks that each account's seqs are 1..n exactly once and
	// returns n per account.
	contiguous := func(es []statementEntry) map[string]int64 {
		bySeq := map[string][]int64{}
		for _, x := range es {
			bySeq[x.Account] = append(bySeq[x.Account], x.Seq)
		}
		out := map[string]int64{}
		for acc, seqs := range bySeq {
			sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
			for i, s := range seqs {
				require.Equal(t, int64(i+1), s, "%s: a gap or a repeat at position %d", acc, i)
			}
			out[acc] = int64(len(seqs))
		}
		return out
	}
	for posted.Load() < 30 {
		time.Sleep(5 * time.Millisecond)
	}
	// At least three rounds, and until the EUR account has opened (on a
	// slow machine the rounds can end before writer 0's 40th transfer).
	for round := 0; round < 3 || !eurOpened.Load(); round++ {
		require.Less(t, round, 1000, "the EUR account never opened")
		before := lastSeqs()
		desc := e.statementAll("m1", e.m1, url.Values{"limit": {"7"}})
		after := lastSeqs()
		n := contiguous(desc)
		for acc, k := range n {
			require.GreaterOrEqual(t, k, before[acc], "round %d %s: desc lost entries visible before it started", round, acc)
			require.LessOrEqual(t, k, after[acc])
		}
		for i := 1; i < len(desc); i++ {
			require.False(t, desc[i].PostedAt.After(desc[i-1].PostedAt), "newest first")
		}
		before = lastSeqs()
		asc := e.statementAll("m1", e.m1, url.Values{"limit": {"9"}, "order": {"asc"}})
		for acc, k := range contiguous(asc) {
			require.GreaterOrEqual(t, k, before[acc], "round %d %s: asc stopped short", round, acc)
		}
		// The USD account alone.
		only := e.statementAll("m1", e.m1, url.Values{"limit": {"5"}, "currency": {"USD"}})
		for _, x := range only {
			require.Equal(t, "USD", x.Currency)
		}
		contiguous(only)
	}
	close(stop)
	wg.Wait()
	final := lastSeqs()
	got := contiguous(e.statementAll("m1", e.auditor, url.Values{"limit": {"50"}, "order": {"asc"}}))
	require.Equal(t, final, got)
	require.Len(t, final, 4, "available and reserved BRL, available USD and EUR")
}

// from (inclusive) and to (exclusive) bound posted_at: the window pages
// the same entries, in both orders, as the merchant's postings filtered
// directly.
func TestMerchantStatementTimeWindow(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	for i := range 30 {
		_, err := merchants.Fund(e.ctx, e.pool, merchants.Funding{MerchantID: "m1", Amount: brl("1.00"), Key: fmt.Sprint("tw-", i), Reason: "t", Actor: "t"})
		require.NoError(t, err)
		if i%3 == 0 {
			e.createPix("0.10", fmt.Sprint("tw-pix-", i))
		}
	}
	var times []time.Time
	rows, err := e.pool.Query(e.ctx, `SELECT DISTINCT p.posted_at FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id
		WHERE a.owner_kind = 'merchant' AND a.owner_id = 'm1' ORDER BY 1`)
	require.NoError(t, err)
	for rows.Next() {
		var at time.Time
		require.NoError(t, rows.Scan(&at))
		times = append(times, at)
	}
	require.NoError(t, rows.Err())
	require.Greater(t, len(times), 20)
	from, to := times[5], times[len(times)-6]
	var want []string
	rows, err = e.pool.Query(e.ctx, `SELECT a.code, p.seq FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id
		WHERE a.owner_kind = 'merchant' AND a.owner_id = 'm1' AND p.posted_at >= $1 AND p.posted_at < $2
		ORDER BY p.posted_at, p.account_id, p.seq`, from, to)
	require.NoError(t, err)
	for rows.Next() {
		var code string
		var seq int64
		require.NoError(t, rows.Scan(&code, &seq))
		want = append(want, fmt.Sprint(code, "#", seq))
	}
	require.NoError(t, rows.Err())
	q := url.Values{"from": {from.Format(time.RFC3339Nano)}, "to": {to.Format(time.RFC3339Nano)}, "limit": {"4"}}
	q.Set("order", "asc")
	var got []string
	for _, x := range e.statementAll("m1", e.m1, q) {
		got = append(got, fmt.Sprint(x.Account, "#", x.Seq))
	}
	require.Equal(t, want, got)
	q.Set("order", "desc")
	got = got[:0]
	for _, x := range e.statementAll("m1", e.m1, q) {
		got = append(got, fmt.Sprint(x.Account, "#", x.Seq))
	}
	for i, j := 0, len(got)-1; i < j; i, j = i+1, j-1 {
		got[i], got[j] = got[j], got[i]
	}
	require.Equal(t, want, got)
	// Only one side of the window.
	q = url.Values{"from": {from.Format(time.RFC3339Nano)}, "limit": {"6"}}
	n := len(e.statementAll("m1", e.m1, q))
	var wantN int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id
		WHERE a.owner_kind = 'merchant' AND a.owner_id = 'm1' AND p.posted_at >= $1`, from).Scan(&wantN))
	require.Equal(t, wantN, n)
	q = url.Values{"to": {to.Format(time.RFC3339Nano)}, "limit": {"6"}, "order": {"asc"}}
	n = len(e.statementAll("m1", e.m1, q))
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id
		WHERE a.owner_kind = 'merchant' AND a.owner_id = 'm1' AND p.posted_at < $1`, to).Scan(&wantN))
	require.Equal(t, wantN, n)
	// Oldest first from an instant, an account opened after the first page
	// is read from the range's start on the next pages (found by search).
	q = url.Values{"from": {from.Format(time.RFC3339Nano)}, "limit": {"4"}, "order": {"asc"}}
	p, err := e.statementPage("m1", e.m1, q)
	require.NoError(t, err)
	require.NotEmpty(t, p.NextCursor)
	_, err = merchants.Fund(e.ctx, e.pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("3.00", "EUR"), Key: "tw-eur", Reason: "t", Actor: "t"})
	require.NoError(t, err)
	q.Set("cursor", p.NextCursor)
	rest := e.statementAll("m1", e.m1, q)
	seen := map[string]bool{}
	for _, x := range append(p.Data, rest...) {
		require.False(t, seen[x.Account+fmt.Sprint(x.Seq)], "repeated")
		seen[x.Account+fmt.Sprint(x.Seq)] = true
	}
	require.True(t, seen["merchant/m1/available/EUR1"], "the new account's entry")
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id
		WHERE a.owner_kind = 'merchant' AND a.owner_id = 'm1' AND p.posted_at >= $1`, from).Scan(&wantN))
	require.Equal(t, wantN, len(seen))

	// A window before anything: empty, no cursor.
	r := e.get("/v1/merchants/m1/statement?to=2000-01-01T00:00:00Z", e.m1)
	require.Equal(t, http.StatusOK, r.Status)
	require.Empty(t, r.json(t)["data"])
	require.Nil(t, r.json(t)["next_cursor"])
}

func b64(s string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

// A payout-kind entry whose cause id names no attempt (not a uuid, or a
// uuid no attempt has) is still listed, as a payout without an object id:
// only cause ids that parse as uuids are looked up, so no cause id can make
// a page fail (every 5xx a client can trigger is a defect). Such entries
// are what the audit's payouts/effect_orphan reports: it does, for each.
func TestMerchantStatementCausesNamingNothing(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	e.expected = map[string]bool{"payouts/effect_orphan": true}
	t.Cleanup(func() {
		res, err := audit.Run(e.ctx, e.pool)
		require.NoError(t, err)
		require.Len(t, res.Violations, 3, res.Summary())
	})
	from, err := ledger.EnsureAccount(e.ctx, e.pool, ledger.MerchantAvailable("m1", money.BRL))
	require.NoError(t, err)
	to, err := ledger.EnsureAccount(e.ctx, e.pool, ledger.MerchantAvailable("m2", money.BRL))
	require.NoError(t, err)
	post := func(kind, id string) {
		_, err := ledger.Post(e.ctx, e.pool, ledger.TransactionInput{IdempotencyKey: "st-odd-" + kind + id, CauseKind: kind, CauseID: id,
			Postings: []ledger.PostingInput{{AccountID: from.ID, Amount: brl("-1.00").Decimal(), Currency: money.BRL},
				{AccountID: to.ID, Amount: brl("1.00").Decimal(), Currency: money.BRL}}})
		require.NoError(t, err)
	}
	post("payout_reserve", "not-a-uuid")
	post("payout_release", "{00000000-0000-4000-8000-00000000000}") // neither
	post("payout_settle", "00000000-0000-4000-8000-000000000000")   // a uuid no attempt has
	for _, m := range []struct{ id, key string }{{"m1", e.m1}, {"m2", e.m2}} {
		all := e.statementAll(m.id, m.key, url.Values{"limit": {"2"}})
		type cause struct{ kind, object, objectID, attemptID string }
		seen := map[cause]int{}
		for _, x := range all {
			seen[cause{x.Cause.Kind, x.Cause.Object, x.Cause.ObjectID, x.Cause.AttemptID}]++
		}
		want := map[cause]int{
			{"payout_reserve", "payout", "", ""}:                                    1,
			{"payout_release", "payout", "", ""}:                                    1,
			{"payout_settle", "payout", "", "00000000-0000-4000-8000-000000000000"}: 1,
		}
		if m.id == "m1" {
			want[cause{"funding", "funding", "", ""}] = 1
		}
		require.Equal(t, want, seen, m.id)
	}
}
