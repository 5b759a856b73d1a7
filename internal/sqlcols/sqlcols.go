// Package sqlcols rewrites SQL column lists and converts nullable column
// values.
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

// Nullable is s as a nullable text argument: NULL for "".
func Nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Deref is a nullable text column read back: "" for NULL.
func Deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// OrEmpty is m, or an empty map for nil (a JSON object, never null).
func OrEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
