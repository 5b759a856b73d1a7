// Package keyset encodes the opaque cursors of keyset pagination over
// (created_at, id) in descending order, the order every list of saldo's
// domain objects uses.
package keyset

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/saldo/saldo/internal/pgtext"
)

// Encode returns the cursor of the row (t, id): the next page starts after it.
func Encode(t time.Time, id string) string {
	b, _ := json.Marshal([2]string{t.UTC().Format(time.RFC3339Nano), id})
	return hex.EncodeToString(b)
}

// ErrMalformed: a cursor Encode did not make (every Decode error is one),
// its id text PostgreSQL would refuse (a NUL, invalid UTF-8) included.
var ErrMalformed = errors.New("keyset: malformed cursor")

// Decode reads a cursor made by Encode. It refuses (ErrMalformed) an id that
// is not text PostgreSQL stores (pgtext.Valid): it becomes a query
// parameter, and the server's refusal would be a 500 where the caller's
// usual 400 for a bad cursor is due.
func Decode(c string) (time.Time, string, error) {
	b, err := hex.DecodeString(c)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if !utf8.Valid(b) { // Encode writes JSON, always UTF-8
		return time.Time{}, "", ErrMalformed
	}
	var v [2]string
	if err := json.Unmarshal(b, &v); err != nil {
		return time.Time{}, "", fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if !pgtext.Valid(v[1]) {
		return time.Time{}, "", ErrMalformed
	}
	t, err := time.Parse(time.RFC3339Nano, v[0])
	if err != nil {
		return time.Time{}, "", fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return t, v[1], nil
}

// Limit clamps a requested page size to 1..max; zero or less means max.
func Limit(n, max int) int {
	if n <= 0 || n > max {
		return max
	}
	return n
}

// Trim takes the rows of a query run with LIMIT limit+1 and returns the page
// (at most limit rows) and the cursor of the next page ("" at the end).
func Trim[T any](rows []T, limit int, key func(T) (time.Time, string)) ([]T, string) {
	if len(rows) <= limit {
		return rows, ""
	}
	rows = rows[:limit]
	return rows, Encode(key(rows[len(rows)-1]))
}
