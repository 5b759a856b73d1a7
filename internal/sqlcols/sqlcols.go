// Package sqlcols rewrites SQL column lists.
package sqlcols

import "strings"

// Qualify prefixes every column of a comma-separated column list with a
// table alias: Qualify("a", "id, status") is "a.id, a.status". It is for
// statements where an unqualified column would be ambiguous (UPDATE ...
// FROM, joins).
func Qualify(alias, columns string) string {
	parts := strings.Split(columns, ",")
	for i, p := range parts {
		parts[i] = alias + "." + strings.TrimSpace(p)
	}
	return strings.Join(parts, ", ")
}
