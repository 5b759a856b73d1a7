package ledger

import (
	"context"
	"encoding/base64"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/money"
)

// StatementRequest asks for one page of a merchant's statement: the
// postings of every account the merchant owns, merged in posting-time
// order.
type StatementRequest struct {
	MerchantID string
	// Currency keeps the accounts in that currency only (zero: all).
	Currency money.Currency
	// From (inclusive) and To (exclusive) bound posted_at (zero: open).
	From, To time.Time
	// Cursor is the previous page's NextCursor ("" for the first page). It
	// only works with the merchant, order and filters that issued it.
	Cursor string
	Limit  int   // capped at MaxPageSize; <= 0 means DefaultPageSize
	Order  Order // Descending: newest first
}

// StatementEntry is one posting of a merchant's statement, with its
// account and the cause of its transaction.
type StatementEntry struct {
	Posting
	Purpose   Purpose
	CauseKind string
	CauseID   string
}

// StatementPage is one page of a merchant's statement.
type StatementPage struct {
	Entries []StatementEntry
	// NextCursor continues the statement; "" when this page is the last.
	NextCursor string
}

// maxStatementAccounts bounds the accounts of one statement (and so the
// cursor's size): a merchant has three purposes per currency.
const maxStatementAccounts = 64

type statementAccount struct {
	id       int64
	code     string
	purpose  Purpose
	currency money.Currency
	lastSeq  int64
	// bound is the position the next page continues from: in ascending
	// order the last seq consumed (the next page reads seq > bound), in
	// descending order the smallest seq consumed (seq < bound). done: the
	// account has nothing more in the statement's time range.
	bound int64
	done  bool
}

// MerchantStatement returns one page of the merchant's statement: the
// postings of all its accounts (available, reserved, pending, in every
// currency unless req.Currency is set), in posted_at order (ties by account
// id, then seq), each with its balance after and its transaction's cause.
//
// The cursor holds one position per account (its sequence number), so a
// page never skips or repeats a posting however writers interleave: an
// account's postings are numbered without gaps and only ever appended. In
// descending order (newest first) the statement is the one visible when
// its first page was read; later postings are not inserted into it. In
// ascending order a posting committed after a page was read comes on a
// later page, even if its posted_at is earlier than that page's last
// entry (it was not visible yet): never skipped, but possibly after
// entries of other accounts that are slightly newer.
//
// An unknown merchant has an empty statement: callers check the merchant.
func MerchantStatement(ctx context.Context, db DBTX, req StatementRequest) (StatementPage, error) {
	limit := pageSize(req.Limit)
	if !req.From.IsZero() && !req.To.IsZero() && !req.From.Before(req.To) {
		return StatementPage{}, invalid("from must be before to")
	}
	accs, err := statementAccounts(ctx, db, req)
	if err != nil {
		return StatementPage{}, err
	}
	scope := statementScope(req)
	if req.Cursor != "" {
		if err := applyStatementCursor(req.Cursor, scope, req.Order, accs); err != nil {
			return StatementPage{}, err
		}
	}
	if err := initialBounds(ctx, db, req, accs); err != nil {
		return StatementPage{}, err
	}
	entries, more, err := statementRows(ctx, db, req, accs, limit)
	if err != nil {
		return StatementPage{}, err
	}
	page := StatementPage{Entries: entries}
	if more {
		page.NextCursor = encodeStatementCursor(scope, req.Order, accs)
	}
	return page, nil
}

// statementScope names the listing a cursor belongs to: the merchant, the
// currency filter and the time range.
func statementScope(req StatementRequest) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%d\x00%t\x00%t", req.MerchantID, req.Currency.Code(),
		req.From.UnixNano(), req.To.UnixNano(), req.From.IsZero(), req.To.IsZero())
	return strconv.FormatUint(h.Sum64(), 36)
}

func statementAccounts(ctx context.Context, db DBTX, req StatementRequest) ([]*statementAccount, error) {
	rows, err := db.Query(ctx, `SELECT id, code, purpose, currency, last_seq FROM ledger_accounts
		WHERE owner_kind = 'merchant' AND owner_id = $1 AND ($2 = '' OR currency = $2)
		ORDER BY id`, req.MerchantID, req.Currency.Code())
	if err != nil {
		return nil, fmt.Errorf("ledger: statement of %s: accounts: %w", req.MerchantID, err)
	}
	defer rows.Close()
	var out []*statementAccount
	for rows.Next() {
		a := &statementAccount{bound: -1}
		var purpose, cur string
		if err := rows.Scan(&a.id, &a.code, &purpose, &cur, &a.lastSeq); err != nil {
			return nil, err
		}
		a.purpose = Purpose(purpose)
		if a.currency, err = money.LookupCurrency(cur); err != nil {
			return nil, fmt.Errorf("ledger: account %s: %w", a.code, err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger: statement of %s: accounts: %w", req.MerchantID, err)
	}
	if len(out) > maxStatementAccounts {
		return nil, fmt.Errorf("ledger: statement of %s: %d accounts (at most %d)", req.MerchantID, len(out), maxStatementAccounts)
	}
	return out, nil
}

// Statement cursors are base64url of
// "statement:<scope>:<order>:<account>.<bound>,..." where a bound of -1
// marks an account with nothing more in range.
func encodeStatementCursor(scope string, order Order, accs []*statementAccount) string {
	var b strings.Builder
	fmt.Fprintf(&b, "statement:%s:%d:", scope, order)
	for i, a := range accs {
		if i > 0 {
			b.WriteByte(',')
		}
		bound := a.bound
		if a.done {
			bound = -1
		}
		b.WriteString(strconv.FormatInt(a.id, 10))
		b.WriteByte('.')
		b.WriteString(strconv.FormatInt(bound, 10))
	}
	return base64.RawURLEncoding.EncodeToString([]byte(b.String()))
}

func applyStatementCursor(c, scope string, order Order, accs []*statementAccount) error {
	if len(c) > 4096 {
		return fmt.Errorf("%w: too long", ErrInvalidCursor)
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return fmt.Errorf("%w: not base64url", ErrInvalidCursor)
	}
	parts := strings.Split(string(raw), ":")
	if len(parts) != 4 || parts[0] != "statement" {
		return fmt.Errorf("%w: not a statement cursor", ErrInvalidCursor)
	}
	if parts[1] != scope || parts[2] != strconv.Itoa(int(order)) {
		return fmt.Errorf("%w: issued for another listing", ErrInvalidCursor)
	}
	byID := make(map[int64]*statementAccount, len(accs))
	for _, a := range accs {
		byID[a.id] = a
	}
	seen := make(map[int64]bool)
	for _, item := range strings.Split(parts[3], ",") {
		if item == "" {
			continue
		}
		ids, bs, ok := strings.Cut(item, ".")
		id, err1 := strconv.ParseInt(ids, 10, 64)
		bound, err2 := strconv.ParseInt(bs, 10, 64)
		a := byID[id]
		if !ok || err1 != nil || err2 != nil || a == nil || seen[id] || bound < -1 {
			return fmt.Errorf("%w: bad position", ErrInvalidCursor)
		}
		seen[id] = true
		if bound == -1 {
			a.done = true
			continue
		}
		if bound > a.lastSeq+1 {
			return fmt.Errorf("%w: bad position", ErrInvalidCursor)
		}
		a.bound = bound
	}
	// An account the cursor does not name was opened after the first page.
	// Newest first, it is newer than the statement being read: leave it
	// out. Oldest first, it starts from its beginning (initialBounds).
	for _, a := range accs {
		if !seen[a.id] && order == Descending {
			a.done = true
		}
	}
	return nil
}

// initialBounds positions the accounts the cursor did not: at the start of
// the time range. A range bound on the side the listing starts from is
// found by binary search over the account's sequence (posted_at never goes
// backwards within an account); the other side is checked on the rows read.
func initialBounds(ctx context.Context, db DBTX, req StatementRequest, accs []*statementAccount) error {
	var search []*statementAccount
	for _, a := range accs {
		if a.done || a.bound != -1 {
			continue
		}
		if req.Order == Descending {
			a.bound = a.lastSeq + 1
			if !req.To.IsZero() {
				search = append(search, a)
			}
		} else {
			a.bound = 0
			if !req.From.IsZero() {
				search = append(search, a)
			}
		}
		if a.lastSeq == 0 && req.Order == Descending {
			a.done = true
		}
	}
	if len(search) == 0 {
		return nil
	}
	at := req.From
	if req.Order == Descending {
		at = req.To
	}
	b := &pgx.Batch{}
	for _, a := range search {
		b.Queue(lastSeqBeforeSQL, a.id, a.lastSeq, at)
	}
	res := db.SendBatch(ctx, b)
	defer res.Close()
	for _, a := range search {
		var seq int64
		if err := res.QueryRow().Scan(&seq); err != nil {
			return fmt.Errorf("ledger: statement: position of %s at %s: %w", a.code, at, err)
		}
		// seq is the last posting before the instant (0: none).
		if req.Order == Descending {
			a.bound = seq + 1
		} else {
			a.bound = seq
		}
	}
	return res.Close()
}

// lastSeqBeforeSQL binary-searches the account's sequence for its last
// posting with posted_at < $3 (0 when there is none): O(log n) primary-key
// probes in one round trip, like BalanceAt.
const lastSeqBeforeSQL = `
	WITH RECURSIVE search(lo, hi) AS (
		SELECT 0::bigint, $2::bigint
		UNION ALL
		SELECT CASE WHEN p.posted_at < $3 THEN (s.lo + s.hi + 1) / 2 ELSE s.lo END,
		       CASE WHEN p.posted_at < $3 THEN s.hi ELSE (s.lo + s.hi + 1) / 2 - 1 END
		FROM search s
		JOIN ledger_postings p ON p.account_id = $1 AND p.seq = (s.lo + s.hi + 1) / 2
		WHERE s.lo < s.hi
	)
	SELECT lo FROM search WHERE lo >= hi`

// statementRows reads, in one statement, up to limit+1 postings of each
// open account past its bound, keeps those in the time range, merges them
// and takes the first limit+1 with their transactions' causes; it then
// moves each account's bound past what the page took. Rows past the
// range's far end are only ever at the end of an account's rows (posted_at
// never goes backwards along its sequence), so filtering after each
// account's LIMIT loses nothing.
func statementRows(ctx context.Context, db DBTX, req StatementRequest, accs []*statementAccount, limit int) ([]StatementEntry, bool, error) {
	var ids, bounds []int64
	byID := make(map[int64]*statementAccount, len(accs))
	for _, a := range accs {
		byID[a.id] = a
		if !a.done {
			ids = append(ids, a.id)
			bounds = append(bounds, a.bound)
		}
	}
	if len(ids) == 0 {
		return nil, false, nil
	}
	q := statementAscSQL
	if req.Order == Descending {
		q = statementDescSQL
	}
	var from, to *time.Time
	if !req.From.IsZero() {
		from = &req.From
	}
	if !req.To.IsZero() {
		to = &req.To
	}
	rows, err := db.Query(ctx, q, ids, bounds, limit+1, from, to)
	if err != nil {
		return nil, false, fmt.Errorf("ledger: statement of %s: %w", req.MerchantID, err)
	}
	defer rows.Close()
	out := make([]StatementEntry, 0, limit+1)
	for rows.Next() {
		var (
			e             StatementEntry
			leg           int16
			amount, after string
		)
		if err := rows.Scan(&e.AccountID, &e.Seq, &e.TransactionID, &leg, &amount, &after, &e.PostedAt, &e.CauseKind, &e.CauseID); err != nil {
			return nil, false, fmt.Errorf("ledger: statement of %s: %w", req.MerchantID, err)
		}
		a := byID[e.AccountID]
		e.Leg, e.AccountCode, e.Currency, e.Purpose = int(leg), a.code, a.currency, a.purpose
		if e.Amount, err = decimal.NewFromString(amount); err != nil {
			return nil, false, err
		}
		if e.BalanceAfter, err = decimal.NewFromString(after); err != nil {
			return nil, false, err
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("ledger: statement of %s: %w", req.MerchantID, err)
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	for _, e := range out {
		byID[e.AccountID].bound = e.Seq
	}
	return out, more, nil
}

// statementSQL: each account's next limit+1 postings by primary key (the
// LATERAL), the time range, the merge in statement order, and the causes
// of the page's transactions only.
const statementSQL = `SELECT p.account_id, p.seq, p.transaction_id, p.leg, p.amount::text, p.balance_after::text, p.posted_at,
		t.cause_kind, t.cause_id
	FROM (
		SELECT p.* FROM unnest($1::bigint[], $2::bigint[]) AS c(account_id, bound)
		CROSS JOIN LATERAL (
			SELECT p.account_id, p.seq, p.transaction_id, p.leg, p.amount, p.balance_after, p.posted_at
			FROM ledger_postings p WHERE p.account_id = c.account_id AND %s LIMIT $3) p
		WHERE ($4::timestamptz IS NULL OR p.posted_at >= $4) AND ($5::timestamptz IS NULL OR p.posted_at < $5)
		ORDER BY %s LIMIT $3) p
	JOIN ledger_transactions t ON t.id = p.transaction_id
	ORDER BY %[2]s`

var (
	statementAscSQL  = fmt.Sprintf(statementSQL, "p.seq > c.bound ORDER BY p.seq", "p.posted_at, p.account_id, p.seq")
	statementDescSQL = fmt.Sprintf(statementSQL, "p.seq < c.bound ORDER BY p.seq DESC", "p.posted_at DESC, p.account_id DESC, p.seq DESC")
)
