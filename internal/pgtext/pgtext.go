// Package pgtext says whether a string is text PostgreSQL stores: valid
// UTF-8 without NUL. Anything else reaching a text or jsonb column (or a
// comparison with one) is an error from the server, a 500 for whoever sent
// it; callers refuse it first, naming the field.
package pgtext

import (
	"strings"
	"unicode/utf8"
)

// Valid reports whether PostgreSQL accepts s as text: valid UTF-8 without
// NUL.
func Valid(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// Truncate cuts s to at most n bytes on a character boundary (a multi-byte
// character is never cut in half, which PostgreSQL would refuse as invalid
// UTF-8): for the texts saldo stores with a bounded length.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
