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
