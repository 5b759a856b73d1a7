package ledger

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/money"
)

// Page sizes for the list functions.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

func pageSize(limit int) int {
	switch {
	case limit <= 0:
		return DefaultPageSize
	case limit > MaxPageSize:
		return MaxPageSize
	}
	return limit
}

// Order of a listing.
type Order int

// The orders: oldest first (the default) or newest first.
const (
	Ascending Order = iota
	Descending
)

// Cursors are opaque to callers: base64url of "<kind>:<scope>:<order>:<key>".
// The scope (the account id for postings) and the order are checked, so a
// cursor cannot be replayed against another listing.
func encodeCursor(kind string, scope int64, order Order, key int64) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%s:%d:%d:%d", kind, scope, order, key))
}

func decodeCursor(c, kind string, scope int64, order Order) (int64, error) {
	got, key, err := parseCursor(c, kind, order)
	if err != nil {
		return 0, err
	}
	if got != scope {
		return 0, fmt.Errorf("%w: issued for another listing", ErrInvalidCursor)
	}
	return key, nil
}

// parseCursor reads a cursor of the kind and order, and returns its scope
// (which the caller must check) and position.
func parseCursor(c, kind string, order Order) (scope, key int64, err error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: not base64url", ErrInvalidCursor)
	}
	parts := strings.Split(string(raw), ":")
	if len(parts) != 4 || parts[0] != kind {
		return 0, 0, fmt.Errorf("%w: not a %s cursor", ErrInvalidCursor, kind)
	}
	if parts[2] != strconv.Itoa(int(order)) {
		return 0, 0, fmt.Errorf("%w: issued for another listing", ErrInvalidCursor)
	}
	scope, err1 := strconv.ParseInt(parts[1], 10, 64)
	key, err2 := strconv.ParseInt(parts[3], 10, 64)
	if err1 != nil || err2 != nil || key < 0 {
		return 0, 0, fmt.Errorf("%w: bad position", ErrInvalidCursor)
	}
	return scope, key, nil
}

const postingColumns = `p.transaction_id, p.leg, p.account_id, a.code, p.seq, p.amount::text, p.currency,
	p.balance_after::text, p.posted_at, p.hash`

// pagePostingColumns are postingColumns for a query whose $1 is the
// account's code.
const pagePostingColumns = `p.transaction_id, p.leg, p.account_id, $1::text, p.seq, p.amount::text, p.currency,
	p.balance_after::text, p.posted_at, p.hash`

func scanPostings(rows pgx.Rows) ([]Posting, error) {
	defer rows.Close()
	var out []Posting
	for rows.Next() {
		var (
			p                  Posting
			leg                int16
			amount, cur, after string
		)
		if err := rows.Scan(&p.TransactionID, &leg, &p.AccountID, &p.AccountCode, &p.Seq, &amount, &cur, &after, &p.PostedAt, &p.Hash); err != nil {
			return nil, err
		}
		p.Leg = int(leg)
		var err error
		if p.Amount, err = decimal.NewFromString(amount); err != nil {
			return nil, err
		}
		if p.BalanceAfter, err = decimal.NewFromString(after); err != nil {
			return nil, err
		}
		if p.Currency, err = money.LookupCurrency(cur); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

const transactionColumns = `t.id, t.idempotency_key, t.cause_kind, t.cause_id, t.description, t.metadata,
	t.effective_at, t.posted_at, coalesce(t.reverses_id, 0)`

func scanTransaction(row pgx.Row) (Transaction, error) {
	var t Transaction
	err := row.Scan(&t.ID, &t.IdempotencyKey, &t.CauseKind, &t.CauseID, &t.Description, &t.Metadata,
		&t.EffectiveAt, &t.PostedAt, &t.ReversesID)
	if len(t.Metadata) == 0 {
		t.Metadata = nil
	}
	return t, err
}

// TransactionByID returns the transaction with its postings (in leg order),
// or ErrTransactionNotFound.
func TransactionByID(ctx context.Context, db DBTX, id int64) (Transaction, error) {
	return transactionWhere(ctx, db, "t.id = $1", id)
}

// TransactionByKey returns the transaction posted under the idempotency key,
// or ErrTransactionNotFound.
func TransactionByKey(ctx context.Context, db DBTX, key string) (Transaction, error) {
	return transactionWhere(ctx, db, "t.idempotency_key = $1", key)
}

func transactionWhere(ctx context.Context, db DBTX, where string, arg any) (Transaction, error) {
	t, err := scanTransaction(db.QueryRow(ctx, `SELECT `+transactionColumns+` FROM ledger_transactions t WHERE `+where, arg))
	if errors.Is(err, pgx.ErrNoRows) {
		return Transaction{}, fmt.Errorf("%w: %v", ErrTransactionNotFound, arg)
	}
	if err != nil {
		return Transaction{}, fmt.Errorf("ledger: read transaction %v: %w", arg, err)
	}
	rows, err := db.Query(ctx, `SELECT `+postingColumns+`
		FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id
		WHERE p.transaction_id = $1 ORDER BY p.leg`, t.ID)
	if err != nil {
		return Transaction{}, fmt.Errorf("ledger: read postings of %d: %w", t.ID, err)
	}
	if t.Postings, err = scanPostings(rows); err != nil {
		return Transaction{}, fmt.Errorf("ledger: read postings of %d: %w", t.ID, err)
	}
	return t, nil
}

// BalanceAt returns the balance of the account with the code as of instant
// at: the balance after its last posting with PostedAt <= at, or zero if
// there is none. PostedAt never goes backwards within an account (Post
// guarantees it and Verify checks it), so this is exact, and it is found by
// a binary search over the account's sequence numbers (O(log n) primary-key
// probes, one round trip). It is stable once no transaction that started
// before at is still in flight.
func BalanceAt(ctx context.Context, db DBTX, code string, at time.Time) (money.Amount, error) {
	// One round trip: the account by its code, then the search.
	var cur string
	var s *string
	err := db.QueryRow(ctx, `
		WITH RECURSIVE acc AS (
			SELECT id, last_seq, currency FROM ledger_accounts WHERE code = $1
		), search(lo, hi) AS (
			SELECT 0::bigint, acc.last_seq FROM acc
			UNION ALL
			SELECT CASE WHEN p.posted_at <= $2 THEN (s.lo + s.hi + 1) / 2 ELSE s.lo END,
			       CASE WHEN p.posted_at <= $2 THEN s.hi ELSE (s.lo + s.hi + 1) / 2 - 1 END
			FROM search s
			JOIN ledger_postings p ON p.account_id = (SELECT id FROM acc) AND p.seq = (s.lo + s.hi + 1) / 2
			WHERE s.lo < s.hi
		)
		SELECT acc.currency,
		       (SELECT p.balance_after::text FROM ledger_postings p WHERE p.account_id = acc.id AND p.seq = s.lo)
		FROM search s, acc WHERE s.lo >= s.hi`, code, at).Scan(&cur, &s)
	if errors.Is(err, pgx.ErrNoRows) {
		return money.Amount{}, fmt.Errorf("%w: %s", ErrAccountNotFound, code)
	}
	if err != nil {
		return money.Amount{}, fmt.Errorf("ledger: balance of %s at %s: %w", code, at, err)
	}
	c, err := money.LookupCurrency(cur)
	if err != nil {
		return money.Amount{}, fmt.Errorf("ledger: account %s: %w", code, err)
	}
	if s == nil {
		return money.Zero(c), nil
	}
	d, err := decimal.NewFromString(*s)
	if err != nil {
		return money.Amount{}, err
	}
	return money.New(d, c)
}

// PageRequest asks for one page of a listing. Cursor is the NextCursor of
// the previous page ("" for the first page); Limit is capped at MaxPageSize
// (<= 0 means DefaultPageSize). A cursor only works with the listing (and
// Order) that issued it.
type PageRequest struct {
	Cursor string
	Limit  int
	Order  Order
}

// PostingsPage is one page of an account's history.
type PostingsPage struct {
	Postings []Posting
	// NextCursor continues the listing; "" when this page is the last.
	NextCursor string
}

// ListPostings pages through the history of the account with the code, in
// sequence order (Ascending: oldest first). The order is stable: new
// postings only ever append at the end.
func ListPostings(ctx context.Context, db DBTX, code string, req PageRequest) (PostingsPage, error) {
	limit := pageSize(req.Limit)
	var after, scope int64
	if req.Order == Descending {
		after = 1<<63 - 1
	}
	if req.Cursor != "" {
		var err error
		if scope, after, err = parseCursor(req.Cursor, "postings", req.Order); err != nil {
			return PostingsPage{}, err
		}
	}
	// One round trip: the account and the page, the page reaching the
	// account through its code.
	// No join with ledger_accounts per row: the code is the parameter, and a
	// busy account's row is a chain of updated versions to walk.
	q := `SELECT ` + pagePostingColumns + ` FROM ledger_postings p
		WHERE p.account_id = (SELECT id FROM ledger_accounts WHERE code = $1) AND p.seq > $2 ORDER BY p.seq LIMIT $3`
	if req.Order == Descending {
		q = `SELECT ` + pagePostingColumns + ` FROM ledger_postings p
		WHERE p.account_id = (SELECT id FROM ledger_accounts WHERE code = $1) AND p.seq < $2 ORDER BY p.seq DESC LIMIT $3`
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT `+accountColumns+` FROM ledger_accounts WHERE code = $1`, code)
	b.Queue(q, code, after, limit+1)
	res := db.SendBatch(ctx, b)
	defer res.Close()
	acc, err := scanAccount(res.QueryRow())
	if errors.Is(err, pgx.ErrNoRows) {
		return PostingsPage{}, fmt.Errorf("%w: %s", ErrAccountNotFound, code)
	}
	if err != nil {
		return PostingsPage{}, fmt.Errorf("ledger: list postings of %s: %w", code, err)
	}
	rows, err := res.Query()
	if err != nil {
		return PostingsPage{}, fmt.Errorf("ledger: list postings of %s: %w", code, err)
	}
	ps, err := scanPostings(rows)
	if err != nil {
		return PostingsPage{}, fmt.Errorf("ledger: list postings of %s: %w", code, err)
	}
	if err := res.Close(); err != nil {
		return PostingsPage{}, fmt.Errorf("ledger: list postings of %s: %w", code, err)
	}
	if req.Cursor != "" && scope != acc.ID {
		return PostingsPage{}, fmt.Errorf("%w: issued for another listing", ErrInvalidCursor)
	}
	page := PostingsPage{Postings: ps}
	if len(ps) > limit {
		page.Postings = ps[:limit]
		page.NextCursor = encodeCursor("postings", acc.ID, req.Order, ps[limit-1].Seq)
	}
	return page, nil
}

// TransactionFilter narrows ListTransactions. Zero fields match everything.
type TransactionFilter struct {
	CauseKind string
	CauseID   string // only with CauseKind
}

// TransactionsPage is one page of transactions.
type TransactionsPage struct {
	Transactions []Transaction // each with its postings
	NextCursor   string
}

// ListTransactions pages through transactions in id order (Ascending:
// oldest first), each with its postings, for auditors. Ids grow with time of
// insertion; a page never skips a committed transaction that was visible
// when the cursor's page was read, but a transaction committed later with a
// smaller id (it started earlier) can appear behind an existing cursor: a
// page walk outside one snapshot can miss such in-flight ids (a walk that
// must be whole reads its pages in one snapshot: WalkTransactions).
func ListTransactions(ctx context.Context, db DBTX, f TransactionFilter, req PageRequest) (TransactionsPage, error) {
	limit := pageSize(req.Limit)
	var after int64
	if req.Order == Descending {
		after = 1<<63 - 1
	}
	if req.Cursor != "" {
		var err error
		if after, err = decodeCursor(req.Cursor, "transactions", 0, req.Order); err != nil {
			return TransactionsPage{}, err
		}
	}
	if f.CauseID != "" && f.CauseKind == "" {
		return TransactionsPage{}, invalid("filter by cause id needs the cause kind")
	}
	cmp, dir := ">", "ASC"
	if req.Order == Descending {
		cmp, dir = "<", "DESC"
	}
	q := `SELECT ` + transactionColumns + ` FROM ledger_transactions t
		WHERE t.id ` + cmp + ` $1
		  AND ($2 = '' OR t.cause_kind = $2) AND ($3 = '' OR t.cause_id = $3)
		ORDER BY t.id ` + dir + ` LIMIT $4`
	rows, err := db.Query(ctx, q, after, f.CauseKind, f.CauseID, limit+1)
	if err != nil {
		return TransactionsPage{}, fmt.Errorf("ledger: list transactions: %w", err)
	}
	var txs []Transaction
	for rows.Next() {
		t, err := scanTransaction(rows)
		if err != nil {
			rows.Close()
			return TransactionsPage{}, fmt.Errorf("ledger: list transactions: %w", err)
		}
		txs = append(txs, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return TransactionsPage{}, fmt.Errorf("ledger: list transactions: %w", err)
	}
	page := TransactionsPage{Transactions: txs}
	if len(txs) > limit {
		page.Transactions = txs[:limit]
		page.NextCursor = encodeCursor("transactions", 0, req.Order, txs[limit-1].ID)
	}
	if len(page.Transactions) == 0 {
		return page, nil
	}
	ids := make([]int64, len(page.Transactions))
	byID := make(map[int64]int, len(ids))
	for i, t := range page.Transactions {
		ids[i], byID[t.ID] = t.ID, i
	}
	prow, err := db.Query(ctx, `SELECT `+postingColumns+` FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id
		WHERE p.transaction_id = ANY($1) ORDER BY p.transaction_id, p.leg`, ids)
	if err != nil {
		return TransactionsPage{}, fmt.Errorf("ledger: list transactions: postings: %w", err)
	}
	ps, err := scanPostings(prow)
	if err != nil {
		return TransactionsPage{}, fmt.Errorf("ledger: list transactions: postings: %w", err)
	}
	for _, p := range ps {
		i := byID[p.TransactionID]
		page.Transactions[i].Postings = append(page.Transactions[i].Postings, p)
	}
	return page, nil
}

// TxStarter opens a transaction: a *pgxpool.Pool or a *pgx.Conn.
type TxStarter interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// WalkTransactions calls fn with every page of ListTransactions (the
// filter, oldest first, limit transactions a page), all read in one
// REPEATABLE READ READ ONLY transaction: the walk is the ledger as of one
// snapshot (taken by its first page), whole, never a transaction committed
// after another that it lists left out, as paging in separate statements
// would (an id drawn before a later one committed, committing after the
// walk passed that later id). The snapshot is held until the walk ends.
// fn's error stops the walk and is returned.
func WalkTransactions(ctx context.Context, db TxStarter, f TransactionFilter, limit int, fn func(TransactionsPage) error) error {
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("ledger: walk transactions: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read only: nothing to keep
	cursor := ""
	for {
		pg, err := ListTransactions(ctx, tx, f, PageRequest{Cursor: cursor, Limit: limit})
		if err != nil {
			return err
		}
		if err := fn(pg); err != nil {
			return err
		}
		if cursor = pg.NextCursor; cursor == "" {
			return nil
		}
	}
}
