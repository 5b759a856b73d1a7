package console

import (
	"context"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/keyset"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/payouts"
)

// ---- merchants ----

func (c *Console) merchantsPage(w http.ResponseWriter, r *http.Request, s *Session) {
	after := r.URL.Query().Get("after")
	ms, err := merchants.List(r.Context(), c.db(r.Context()), after, 101)
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	next := ""
	if len(ms) > 100 {
		ms = ms[:100]
		next = ms[len(ms)-1].ID
	}
	c.render(w, r, http.StatusOK, "merchants", view{S: s, Title: "Merchants", Nav: "merchants",
		Data: map[string]any{"Merchants": ms, "Next": next}})
}

// movement is one posting to a merchant's account, for the merchant view.
type movement struct {
	ledger.Posting
	Purpose string
}

type merchantData struct {
	M         merchants.Merchant
	Balances  []ledger.MerchantBalance
	Movements []movement
	Payouts   []payouts.Payout
	Charges   []charges.Charge
}

// recentMovements is how many postings the merchant view lists.
const recentMovements = 30

// merchantView: balances (available, reserved, pending) per currency, the
// recent movements of the merchant's accounts, its recent payouts and
// charges. The page a merchant dashboard would show.
func (c *Console) merchantView(w http.ResponseWriter, r *http.Request, s *Session) {
	ctx := r.Context()
	mid := r.PathValue("mid")
	m, err := merchants.Get(ctx, c.db(ctx), mid)
	if errors.Is(err, merchants.ErrNotFound) {
		c.notFound(w, r, s)
		return
	}
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	d := merchantData{M: m}
	if d.Balances, err = ledger.MerchantBalances(ctx, c.db(ctx), mid); err != nil {
		c.internal(w, r, s, err)
		return
	}
	for _, b := range d.Balances {
		for _, spec := range []ledger.AccountSpec{ledger.MerchantAvailable(mid, b.Currency), ledger.MerchantReserved(mid, b.Currency),
			ledger.MerchantPending(mid, b.Currency)} {
			pg, err := ledger.ListPostings(ctx, c.db(ctx), spec.Code(), ledger.PageRequest{Limit: recentMovements, Order: ledger.Descending})
			if errors.Is(err, ledger.ErrAccountNotFound) {
				continue
			}
			if err != nil {
				c.internal(w, r, s, err)
				return
			}
			for _, p := range pg.Postings {
				d.Movements = append(d.Movements, movement{Posting: p, Purpose: string(spec.Purpose)})
			}
		}
	}
	sort.SliceStable(d.Movements, func(i, j int) bool {
		if !d.Movements[i].PostedAt.Equal(d.Movements[j].PostedAt) {
			return d.Movements[i].PostedAt.After(d.Movements[j].PostedAt)
		}
		return d.Movements[i].TransactionID > d.Movements[j].TransactionID
	})
	if len(d.Movements) > recentMovements {
		d.Movements = d.Movements[:recentMovements]
	}
	if d.Payouts, _, err = c.pay.List(ctx, payouts.ListParams{MerchantID: mid, Limit: 20}); err != nil {
		c.internal(w, r, s, err)
		return
	}
	if c.ch != nil {
		if d.Charges, _, err = c.ch.List(ctx, charges.ListParams{MerchantID: mid, Limit: 20}); err != nil {
			c.internal(w, r, s, err)
			return
		}
	}
	c.render(w, r, http.StatusOK, "merchant", view{S: s, Title: m.Name, Nav: navMerchant(s), Data: d})
}

func navMerchant(s *Session) string {
	if s.Role == RoleMerchant {
		return "merchant"
	}
	return "merchants"
}

// ---- payouts, splits, charges ----

type attemptTxs struct {
	A   payouts.AttemptView
	Txs []ledger.Transaction
}

type payoutData struct {
	P        payouts.View
	Attempts []attemptTxs
}

func (c *Console) payoutPage(w http.ResponseWriter, r *http.Request, s *Session) {
	ctx := r.Context()
	v, err := c.pay.Get(ctx, r.PathValue("mid"), r.PathValue("id"))
	if errors.Is(err, payouts.ErrNotFound) {
		c.notFound(w, r, s)
		return
	}
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	d := payoutData{P: v}
	for _, av := range v.Attempts {
		at := attemptTxs{A: av}
		if s.Can(RoleAuditor, RoleAdmin) {
			if at.Txs, err = c.attemptTransactions(ctx, attempts.Attempt{ID: av.ID}); err != nil {
				c.internal(w, r, s, err)
				return
			}
		}
		d.Attempts = append(d.Attempts, at)
	}
	c.render(w, r, http.StatusOK, "payout", view{S: s, Title: "Payout " + v.ID, Nav: navMerchant(s), Data: d})
}

func (c *Console) splitPage(w http.ResponseWriter, r *http.Request, s *Session) {
	sp, err := c.pay.GetSplit(r.Context(), r.PathValue("mid"), r.PathValue("id"))
	if errors.Is(err, payouts.ErrNotFound) {
		c.notFound(w, r, s)
		return
	}
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "split", view{S: s, Title: "Split " + sp.ID, Nav: navMerchant(s), Data: sp})
}

type chargeData struct {
	C       charges.Charge
	Credit  *ledger.Transaction
	Refunds []payouts.Payout
	// Diverged: the provider reported the charge paid after saldo resolved
	// it failed or expired, and no operator has settled it yet.
	Diverged bool
}

func (c *Console) chargePage(w http.ResponseWriter, r *http.Request, s *Session) {
	if c.ch == nil {
		c.notFound(w, r, s)
		return
	}
	ctx := r.Context()
	mid := r.PathValue("mid")
	ch, err := c.ch.Get(ctx, mid, r.PathValue("id"))
	if errors.Is(err, charges.ErrNotFound) {
		c.notFound(w, r, s)
		return
	}
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	d := chargeData{C: ch}
	if ch.AttemptID != nil {
		// A report of payment after the charge was resolved failed or
		// expired (an unsettled divergence): the payer's money arrived and
		// the ledger does not show it; the page says so.
		a, err := c.att.Get(ctx, c.pool, *ch.AttemptID)
		if err != nil {
			c.internal(w, r, s, err)
			return
		}
		d.Diverged = a.DivergedAt != nil && a.DivergenceSettledAt == nil
	}
	if ch.CreditTransactionID != 0 && s.Can(RoleAuditor, RoleAdmin) {
		t, err := ledger.TransactionByID(ctx, c.pool, ch.CreditTransactionID)
		if err != nil {
			c.internal(w, r, s, err)
			return
		}
		d.Credit = &t
	}
	// Refunds are payouts of kind refund naming the charge.
	cursor := ""
	for range 10 {
		ps, next, err := c.pay.List(ctx, payouts.ListParams{MerchantID: mid, Kind: attempts.KindRefund, Cursor: cursor, Limit: 100})
		if err != nil {
			c.internal(w, r, s, err)
			return
		}
		for _, p := range ps {
			if p.ChargeID == ch.ID {
				d.Refunds = append(d.Refunds, p)
			}
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	c.render(w, r, http.StatusOK, "charge", view{S: s, Title: "Charge " + ch.ID, Nav: navMerchant(s), Data: d})
}

// ---- ledger explorer ----

type accountRow struct {
	ID                         int64
	Code, OwnerKind, OwnerID   string
	Purpose, Currency, Balance string
	LastSeq                    int64
	CreatedAt                  time.Time
}

// accountsPage lists ledger accounts with their balances, newest first,
// with keyset pagination over (created_at, id) (internal/keyset).
// ?prefix= narrows to codes starting with it (merchant/m_42/).
func (c *Console) accountsPage(w http.ResponseWriter, r *http.Request, s *Session) {
	q := r.URL.Query()
	prefix := q.Get("prefix")
	var afterAt time.Time
	afterID := ""
	if cur := q.Get("cursor"); cur != "" {
		var err error
		if afterAt, afterID, err = keyset.Decode(cur); err != nil {
			c.renderError(w, r, s, http.StatusBadRequest, "That page cursor is not valid.")
			return
		}
		if _, err := strconv.ParseInt(afterID, 10, 64); err != nil {
			c.renderError(w, r, s, http.StatusBadRequest, "That page cursor is not valid.")
			return
		}
	}
	const limit = 100
	like := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(prefix) + "%"
	rows, err := c.db(r.Context()).Query(r.Context(), `SELECT id, code, owner_kind, owner_id, purpose, currency, balance::text, last_seq, created_at
		FROM ledger_accounts WHERE code LIKE $1 AND ($2 = '' OR (created_at, id) < ($3, $2::bigint))
		ORDER BY created_at DESC, id DESC LIMIT $4`, like, afterID, afterAt, limit+1)
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (accountRow, error) {
		var a accountRow
		err := row.Scan(&a.ID, &a.Code, &a.OwnerKind, &a.OwnerID, &a.Purpose, &a.Currency, &a.Balance, &a.LastSeq, &a.CreatedAt)
		return a, err
	})
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	list, next := keyset.Trim(list, limit, func(a accountRow) (time.Time, string) {
		return a.CreatedAt, strconv.FormatInt(a.ID, 10)
	})
	if q.Get("format") == "csv" {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.Header().Set("Content-Disposition", `attachment; filename="saldo-accounts.csv"`)
		cw := csv.NewWriter(w)
		_ = cw.Write([]string{"account_code", "owner_kind", "owner_id", "purpose", "currency", "balance", "postings", "created_at"})
		for _, a := range list {
			_ = cw.Write([]string{a.Code, a.OwnerKind, a.OwnerID, a.Purpose, a.Currency, a.Balance,
				strconv.FormatInt(a.LastSeq, 10), a.CreatedAt.UTC().Format(time.RFC3339Nano)})
		}
		cw.Flush()
		return
	}
	c.render(w, r, http.StatusOK, "accounts", view{S: s, Title: "Ledger accounts", Nav: "ledger",
		Data: map[string]any{"Accounts": list, "Next": next, "Prefix": prefix, "Cursor": q.Get("cursor")}})
}

type accountData struct {
	A        ledger.Account
	Postings []ledger.Posting
	Next     string
	Cursor   string
	Order    string
	At       string // the instant asked for, as typed
	AtBal    string // the balance at it
	AtTime   time.Time
}

// accountQuery reads the account page's parameters and its page of
// postings (ledger.ListPostings: keyset pagination over the account's
// sequence numbers).
func (c *Console) accountQuery(r *http.Request) (accountData, int, string, error) {
	q := r.URL.Query()
	code := q.Get("code")
	if _, err := ledger.ParseCode(code); err != nil {
		return accountData{}, http.StatusNotFound, "No such account.", nil
	}
	acc, err := ledger.AccountByCode(r.Context(), c.db(r.Context()), code)
	if errors.Is(err, ledger.ErrAccountNotFound) {
		return accountData{}, http.StatusNotFound, "No such account.", nil
	}
	if err != nil {
		return accountData{}, 0, "", err
	}
	d := accountData{A: acc, Cursor: q.Get("cursor"), Order: q.Get("order")}
	order := ledger.Descending
	if d.Order == "asc" {
		order = ledger.Ascending
	} else {
		d.Order = "desc"
	}
	pg, err := ledger.ListPostings(r.Context(), c.db(r.Context()), code, ledger.PageRequest{Cursor: d.Cursor, Limit: 50, Order: order})
	if errors.Is(err, ledger.ErrInvalidCursor) {
		return d, http.StatusBadRequest, "That page cursor is not valid for this account.", nil
	}
	if err != nil {
		return d, 0, "", err
	}
	d.Postings, d.Next = pg.Postings, pg.NextCursor
	return d, 0, "", nil
}

func (c *Console) accountPage(w http.ResponseWriter, r *http.Request, s *Session) {
	d, status, msg, err := c.accountQuery(r)
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	if status != 0 {
		c.renderError(w, r, s, status, msg)
		return
	}
	errMsg := ""
	if at := r.URL.Query().Get("at"); at != "" {
		d.At = at
		t, ok := parseInstant(at)
		if !ok {
			errMsg = "The instant must look like 2026-12-02T12:00 or 2026-12-02T12:00:00Z (UTC)."
		} else {
			b, err := ledger.BalanceAt(r.Context(), c.db(r.Context()), d.A.Code, t)
			if err != nil {
				c.internal(w, r, s, err)
				return
			}
			d.AtBal, d.AtTime = b.Format(), t
		}
	}
	c.render(w, r, http.StatusOK, "account", view{S: s, Title: d.A.Code, Nav: "ledger", Error: errMsg, Data: d})
}

// parseInstant reads RFC 3339 or an <input type=datetime-local> value,
// taken as UTC.
func parseInstant(v string) (time.Time, bool) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04"} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

var csvHeader = []string{"transaction_id", "leg", "account_code", "seq", "amount", "currency", "balance_after", "posted_at", "hash"}

func csvRow(p ledger.Posting) []string {
	m := p.Currency.MinorUnits()
	return []string{strconv.FormatInt(p.TransactionID, 10), strconv.Itoa(p.Leg), p.AccountCode,
		strconv.FormatInt(p.Seq, 10), p.Amount.StringFixed(m), p.Currency.Code(), p.BalanceAfter.StringFixed(m),
		p.PostedAt.UTC().Format(time.RFC3339Nano), hex.EncodeToString(p.Hash)}
}

func writeCSV(w http.ResponseWriter, name string, ps []ledger.Posting) {
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	cw := csv.NewWriter(w)
	_ = cw.Write(csvHeader)
	for _, p := range ps {
		_ = cw.Write(csvRow(p))
	}
	cw.Flush()
}

// accountCSV exports what the account page shows: the same page of
// postings (same cursor and order), as the API's CSV columns.
func (c *Console) accountCSV(w http.ResponseWriter, r *http.Request, s *Session) {
	d, status, msg, err := c.accountQuery(r)
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	if status != 0 {
		c.renderError(w, r, s, status, msg)
		return
	}
	writeCSV(w, "saldo-"+strings.ReplaceAll(d.A.Code, "/", "_")+".csv", d.Postings)
}

type postingHash struct {
	ledger.Posting
	PrevHash []byte
}

type txData struct {
	T        ledger.Transaction
	Postings []postingHash
	// Cause: the object behind the transaction.
	CauseLink, CauseLabel     string
	AttemptLink, AttemptLabel string
	ReversesID                int64
}

func (c *Console) loadTransaction(r *http.Request) (ledger.Transaction, bool, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return ledger.Transaction{}, false, nil
	}
	t, err := ledger.TransactionByID(r.Context(), c.db(r.Context()), id)
	if errors.Is(err, ledger.ErrTransactionNotFound) {
		return t, false, nil
	}
	return t, err == nil, err
}

// transactionPage: a transaction with its postings and hashes (and each
// posting's predecessor hash in its account's chain), and links to what
// caused it.
func (c *Console) transactionPage(w http.ResponseWriter, r *http.Request, s *Session) {
	ctx := r.Context()
	t, ok, err := c.loadTransaction(r)
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	if !ok {
		c.notFound(w, r, s)
		return
	}
	d := txData{T: t}
	for _, p := range t.Postings {
		ph := postingHash{Posting: p}
		if p.Seq > 1 {
			if err := c.db(ctx).QueryRow(ctx, `SELECT hash FROM ledger_postings WHERE account_id = $1 AND seq = $2`,
				p.AccountID, p.Seq-1).Scan(&ph.PrevHash); err != nil && !errors.Is(err, pgx.ErrNoRows) {
				c.internal(w, r, s, err)
				return
			}
		}
		d.Postings = append(d.Postings, ph)
	}
	c.causeLinks(ctx, &d)
	c.render(w, r, http.StatusOK, "transaction", view{S: s, Title: "Transaction " + strconv.FormatInt(t.ID, 10), Nav: "ledger", Data: d})
}

// causeLinks names the object a transaction came from.
func (c *Console) causeLinks(ctx context.Context, d *txData) {
	t := d.T
	switch t.CauseKind {
	case payouts.CauseReserve, payouts.CauseSettle, payouts.CauseRelease:
		id, err := uuid.Parse(t.CauseID)
		if err != nil {
			return
		}
		d.AttemptLink, d.AttemptLabel = Prefix+"/attempts/"+id.String(), "attempt "+id.String()
		if a, err := c.att.Get(ctx, c.db(ctx), id); err == nil {
			if link, _ := c.subjectLink(ctx, a); link != "" {
				d.CauseLink, d.CauseLabel = link, string(a.Kind)+" "+a.SubjectID
			}
		}
	case charges.CauseCredit:
		var mid string
		if err := c.db(ctx).QueryRow(ctx, `SELECT merchant_id FROM charges WHERE id = $1`, t.CauseID).Scan(&mid); err == nil {
			d.CauseLink, d.CauseLabel = Prefix+"/merchants/"+mid+"/charges/"+t.CauseID, "charge "+t.CauseID
		}
	case merchants.CauseFunding:
		d.CauseLink, d.CauseLabel = Prefix+"/merchants/"+t.CauseID, "funding of merchant "+t.CauseID
	}
}

func (c *Console) transactionCSV(w http.ResponseWriter, r *http.Request, s *Session) {
	t, ok, err := c.loadTransaction(r)
	if err != nil {
		c.internal(w, r, s, err)
		return
	}
	if !ok {
		c.notFound(w, r, s)
		return
	}
	writeCSV(w, "saldo-transaction-"+strconv.FormatInt(t.ID, 10)+".csv", t.Postings)
}
