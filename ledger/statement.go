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
	// descending order the smallest seq consumed (seq < bound); -1: the
	// account has nothing more in the statement.
	bound int64
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
	scope := statementScope(req)
	var pos map[int64]int64
	if req.Cursor != "" {
		var err error
		if pos, err = parseStatementCursor(req.Cursor, scope, req.Order); err != nil {
			return StatementPage{}, err
		}
	}
	// One round trip: the accounts, and the page from the cursor's
	// positions (ledger_statement_page: an account the cursor does not name
	// starts at its end, newest first, or its beginning, oldest first, or
	// at the range's start when the range has one on that side; newest
	// first, an account opened after the first page is left out).
	ids, bounds := positionArrays(pos)
	b := &pgx.Batch{}
	b.Queue(statementAccountsSQL, req.MerchantID, req.Currency.Code())
	from, to := timeArgs(req)
	b.Queue(statementSQLFor(req.Order), ids, bounds, limit+1, from, to, req.MerchantID, req.Currency.Code(),
		req.Cursor != "" && req.Order == Descending)
	res := db.SendBatch(ctx, b)
	defer res.Close()
	rows, err := res.Query()
	if err != nil {
		return StatementPage{}, fmt.Errorf("ledger: statement of %s: accounts: %w", req.MerchantID, err)
	}
	accs, err := scanStatementAccounts(rows, req.MerchantID)
	if err != nil {
		return StatementPage{}, err
	}
	if rows, err = res.Query(); err != nil {
		return StatementPage{}, fmt.Errorf("ledger: statement of %s: %w", req.MerchantID, err)
	}
	entries, used, more, err := scanStatementRows(rows, req.MerchantID, accs, limit)
	if err != nil {
		return StatementPage{}, err
	}
	if err := res.Close(); err != nil {
		return StatementPage{}, fmt.Errorf("ledger: statement of %s: %w", req.MerchantID, err)
	}
	// The cursor is checked against the merchant's accounts (the query
	// read only the merchant's, whatever the cursor named); then every
	// account takes the position the page was read from.
	if err := checkPositions(pos, accs); err != nil {
		return StatementPage{}, err
	}
	for _, a := range accs {
		bound, ok := used[a.id]
		if !ok {
			// The page's statement reads the accounts after the first one
			// did, and accounts are never deleted: not expected.
			return StatementPage{}, fmt.Errorf("ledger: statement of %s: no position for account %s", req.MerchantID, a.code)
		}
		a.bound = bound
	}
	return statementPageOf(scope, req.Order, accs, entries, more), nil
}

// statementPageOf moves each account's position past what the page took
// and makes the next cursor.
func statementPageOf(scope string, order Order, accs []*statementAccount, entries []StatementEntry, more bool) StatementPage {
	byID := make(map[int64]*statementAccount, len(accs))
	for _, a := range accs {
		byID[a.id] = a
	}
	for _, e := range entries {
		byID[e.AccountID].bound = e.Seq
	}
	page := StatementPage{Entries: entries}
	if more {
		page.NextCursor = encodeStatementCursor(scope, order, accs)
	}
	return page
}

func timeArgs(req StatementRequest) (from, to *time.Time) {
	if !req.From.IsZero() {
		f := CeilMicrosecond(req.From)
		from = &f
	}
	if !req.To.IsZero() {
		t := CeilMicrosecond(req.To)
		to = &t
	}
	return from, to
}

func positionArrays(pos map[int64]int64) (ids, bounds []int64) {
	ids, bounds = []int64{}, []int64{}
	for id, b := range pos {
		ids = append(ids, id)
		bounds = append(bounds, b)
	}
	return ids, bounds
}

// statementScope names the listing a cursor belongs to: the merchant, the
// currency filter and the time range.
func statementScope(req StatementRequest) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%d\x00%t\x00%t", req.MerchantID, req.Currency.Code(),
		req.From.UnixNano(), req.To.UnixNano(), req.From.IsZero(), req.To.IsZero())
	return strconv.FormatUint(h.Sum64(), 36)
}

const statementAccountsSQL = `SELECT id, code, purpose, currency, last_seq FROM ledger_accounts
	WHERE owner_kind = 'merchant' AND owner_id = $1 AND ($2 = '' OR currency = $2)
	ORDER BY id`

func scanStatementAccounts(rows pgx.Rows, merchantID string) ([]*statementAccount, error) {
	defer rows.Close()
	var out []*statementAccount
	for rows.Next() {
		a := &statementAccount{bound: -1}
		var purpose, cur string
		if err := rows.Scan(&a.id, &a.code, &purpose, &cur, &a.lastSeq); err != nil {
			return nil, fmt.Errorf("ledger: statement of %s: accounts: %w", merchantID, err)
		}
		a.purpose = Purpose(purpose)
		var err error
		if a.currency, err = money.LookupCurrency(cur); err != nil {
			return nil, fmt.Errorf("ledger: account %s: %w", a.code, err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger: statement of %s: accounts: %w", merchantID, err)
	}
	if len(out) > maxStatementAccounts {
		return nil, fmt.Errorf("ledger: statement of %s: %d accounts (at most %d)", merchantID, len(out), maxStatementAccounts)
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
		b.WriteString(strconv.FormatInt(a.id, 10))
		b.WriteByte('.')
		b.WriteString(strconv.FormatInt(a.bound, 10))
	}
	return base64.RawURLEncoding.EncodeToString([]byte(b.String()))
}

// parseStatementCursor reads a statement cursor of this listing: each
// account's position (-1: nothing more).
func parseStatementCursor(c, scope string, order Order) (map[int64]int64, error) {
	if len(c) > 4096 {
		return nil, fmt.Errorf("%w: too long", ErrInvalidCursor)
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, fmt.Errorf("%w: not base64url", ErrInvalidCursor)
	}
	parts := strings.Split(string(raw), ":")
	if len(parts) != 4 || parts[0] != "statement" {
		return nil, fmt.Errorf("%w: not a statement cursor", ErrInvalidCursor)
	}
	if parts[1] != scope || parts[2] != strconv.Itoa(int(order)) {
		return nil, fmt.Errorf("%w: issued for another listing", ErrInvalidCursor)
	}
	pos := make(map[int64]int64)
	for _, item := range strings.Split(parts[3], ",") {
		if item == "" {
			continue
		}
		ids, bs, ok := strings.Cut(item, ".")
		id, err1 := strconv.ParseInt(ids, 10, 64)
		bound, err2 := strconv.ParseInt(bs, 10, 64)
		if _, dup := pos[id]; !ok || err1 != nil || err2 != nil || dup || bound < -1 || len(pos) >= maxStatementAccounts {
			return nil, fmt.Errorf("%w: bad position", ErrInvalidCursor)
		}
		pos[id] = bound
	}
	return pos, nil
}

// checkPositions refuses a cursor that names an account that is not one
// of the merchant's (accs), or a position its history does not have.
func checkPositions(pos map[int64]int64, accs []*statementAccount) error {
	byID := make(map[int64]*statementAccount, len(accs))
	for _, a := range accs {
		byID[a.id] = a
	}
	for id, bound := range pos {
		if a := byID[id]; a == nil || bound > a.lastSeq+1 {
			return fmt.Errorf("%w: %w: account %d position %d", ErrInvalidCursor, ErrCursorAhead, id, bound)
		}
	}
	return nil
}

// lastSeqBeforeSQL binary-searches the account's sequence for its last
// posting with posted_at < $3 (0 when there is none): O(log n) primary-key
// probes in one round trip, like BalanceAt (the CSV export's range;
// ledger_statement_page searches the same way).
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

// scanStatementRows reads a page's rows: first the position each account
// was read from (leg 0, which no posting has: used), then at most limit+1
// postings, the last only the sign of a next page. A row of an account
// opened between the two statements of the round trip is not on this page
// (the next one has it, oldest first; newest first it is newer than the
// statement), but it counts for the next page's existence.
func scanStatementRows(rows pgx.Rows, merchantID string, accs []*statementAccount, limit int) (entries []StatementEntry, used map[int64]int64, more bool, err error) {
	defer rows.Close()
	byID := make(map[int64]*statementAccount, len(accs))
	for _, a := range accs {
		byID[a.id] = a
	}
	out := make([]StatementEntry, 0, limit)
	used = make(map[int64]int64, len(accs))
	n := 0
	for rows.Next() {
		var (
			e             StatementEntry
			leg           int16
			amount, after string
		)
		if err := rows.Scan(&e.AccountID, &e.Seq, &e.TransactionID, &leg, &amount, &after, &e.PostedAt, &e.CauseKind, &e.CauseID); err != nil {
			return nil, nil, false, fmt.Errorf("ledger: statement of %s: %w", merchantID, err)
		}
		if leg == 0 {
			used[e.AccountID] = e.Seq
			continue
		}
		n++
		a := byID[e.AccountID]
		if n > limit || a == nil {
			continue
		}
		e.Leg, e.AccountCode, e.Currency, e.Purpose = int(leg), a.code, a.currency, a.purpose
		if e.Amount, err = decimal.NewFromString(amount); err != nil {
			return nil, nil, false, err
		}
		if e.BalanceAfter, err = decimal.NewFromString(after); err != nil {
			return nil, nil, false, err
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, false, fmt.Errorf("ledger: statement of %s: %w", merchantID, err)
	}
	return out, used, n > limit, nil
}

// statementSQL reads a page through ledger_statement_page (migration
// 00017): the merchant's accounts with their positions (from the cursor's
// arrays $1 and $2; an account they do not name is left out when $8, else
// starts at its end newest first, at its beginning oldest first, or at the
// range's start when the range has one on that side, by binary search;
// -1: left out), returned first as leg-0 rows; then each account's next $3
// (limit+1) postings by primary key, the time range [$4, $5), the merge in
// statement order, and the causes of the page's transactions only. The
// function keeps its queries' generic plans for the session: sent as a
// statement of its own, the page was planned on every call, and planning
// cost more than running it.
const statementSQL = `SELECT account_id, seq, transaction_id, leg, amount, balance_after, posted_at, cause_kind, cause_id
	FROM ledger_statement_page(%t, $1, $2, $3, $4, $5, $6, $7, $8)`

var (
	statementAscSQL  = fmt.Sprintf(statementSQL, false)
	statementDescSQL = fmt.Sprintf(statementSQL, true)
)

func statementSQLFor(o Order) string {
	if o == Descending {
		return statementDescSQL
	}
	return statementAscSQL
}
