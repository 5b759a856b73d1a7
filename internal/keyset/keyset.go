// Package keyset encodes the opaque cursors of keyset pagination over
// (created_at, id) in descending order, the order every list of saldo's
// domain objects uses.
package keyset

import (
	"encoding/hex"
	"encoding/json"
	"time"
)

// Encode returns the cursor of the row (t, id): the next page starts after it.
func Encode(t time.Time, id string) string {
	b, _ := json.Marshal([2]string{t.UTC().Format(time.RFC3339Nano), id})
	return hex.EncodeToString(b)
}

// Decode reads a cursor made by Encode.
func Decode(c string) (time.Time, string, error) {
	b, err := hex.DecodeString(c)
	if err != nil {
		return time.Time{}, "", err
	}
	var v [2]string
	if err := json.Unmarshal(b, &v); err != nil {
		return time.Time{}, "", err
	}
	t, err := time.Parse(time.RFC3339Nano, v[0])
	return t, v[1], err
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
