package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// ExportRow is one posting as StreamPostings hands it over. The byte
// slices are only valid during the callback (they point into the
// connection's read buffer): copy what you keep.
type ExportRow struct {
	TransactionID int64
	Leg           int16
	Seq           int64
	// Amount and BalanceAfter are decimal text with exactly the currency's
	// minor units ("-12.30").
	Amount, BalanceAfter []byte
	PostedAt             time.Time
	Hash                 []byte
}

// CeilMicrosecond is a from or to bound of a half-open [from, to) range
// over posted_at, rounded up to the next whole microsecond (a whole
// microsecond, or the zero time, is returned as is). posted_at holds
// microseconds and pgx truncates a finer instant when it sends it, which
// would take in a posting before from and leave out one before to; for a
// whole-microsecond p, p >= t iff p >= CeilMicrosecond(t), and p < t iff
// p < CeilMicrosecond(t), so the rounded range is exact. Every path
// taking such bounds (StreamPostings, MerchantStatement, the ledger-wide
// CSV export's filter) rounds with it.
func CeilMicrosecond(t time.Time) time.Time {
	if c := t.Truncate(time.Microsecond); !c.Equal(t) {
		return c.Add(time.Microsecond)
	}
	return t
}

// exportChunk is how many postings one query of StreamPostings reads: a
// short query each (no snapshot held for the whole export), few enough
// rows that nothing piles up.
const exportChunk = 10_000

// StreamPostings calls fn for every posting of the account with the code
// whose posted_at is in [from, to) (a zero time leaves that side open), in
// sequence order, with one reused row: memory stays constant however long
// the history. The range is found by binary search over the account's
// sequence (posted_at never goes backwards within an account), and the
// postings are read in chunks of exportChunk by primary key. The export
// covers the postings committed when it started; fn's error stops it.
func StreamPostings(ctx context.Context, db DBTX, code string, from, to time.Time, fn func(acc Account, r *ExportRow) error) error {
	acc, err := AccountByCode(ctx, db, code)
	if err != nil {
		return err
	}
	from, to = CeilMicrosecond(from), CeilMicrosecond(to)
	lo, hi := int64(0), acc.LastSeq
	if !from.IsZero() {
		if err := db.QueryRow(ctx, lastSeqBeforeSQL, acc.ID, acc.LastSeq, from).Scan(&lo); err != nil {
			return fmt.Errorf("ledger: export %s: position of %s: %w", code, from, err)
		}
	}
	if !to.IsZero() {
		if err := db.QueryRow(ctx, lastSeqBeforeSQL, acc.ID, acc.LastSeq, to).Scan(&hi); err != nil {
			return fmt.Errorf("ledger: export %s: position of %s: %w", code, to, err)
		}
	}
	minor := acc.Currency.MinorUnits()
	var (
		row           ExportRow
		amount, after pgtype.DriverBytes
		hash          pgtype.DriverBytes
	)
	for lo < hi {
		rows, err := db.Query(ctx, `SELECT seq, transaction_id, leg, round(amount, $4)::text, round(balance_after, $4)::text, posted_at, hash
			FROM ledger_postings WHERE account_id = $1 AND seq > $2 AND seq <= $3 ORDER BY seq LIMIT $5`,
			acc.ID, lo, hi, minor, exportChunk)
		if err != nil {
			return fmt.Errorf("ledger: export %s: %w", code, err)
		}
		n := 0
		for rows.Next() {
			if err := rows.Scan(&row.Seq, &row.TransactionID, &row.Leg, &amount, &after, &row.PostedAt, &hash); err != nil {
				rows.Close()
				return fmt.Errorf("ledger: export %s: %w", code, err)
			}
			row.Amount, row.BalanceAfter, row.Hash = amount, after, hash
			if err := fn(acc, &row); err != nil {
				rows.Close()
				return err
			}
			lo = row.Seq
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("ledger: export %s: %w", code, err)
		}
		if n == 0 {
			return errors.New("ledger: export " + code + ": postings missing below the account's last sequence number")
		}
	}
	return nil
}
