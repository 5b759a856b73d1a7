// Package hostile helps tests send hostile requests: it lists the paths of
// every value inside a decoded JSON document and copies a document with
// one of them replaced, so a test can start from a valid body and make
// every field, at any depth, hostile in turn.
package hostile

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// LeafPaths lists the dotted paths of every value in v (a decoded JSON
// document: maps, slices, scalars), at any depth, an array's elements by
// index, sorted (a sweep runs in the same order every time):
// {"a":{"b":[1]}} gives a, a.b, a.b.0.
func LeafPaths(v any) []string {
	out := leafPaths("", v)
	sort.Strings(out)
	return out
}

func leafPaths(prefix string, v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, y := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out = append(out, p)
			out = append(out, leafPaths(p, y)...)
		}
	case []any:
		for i, y := range x {
			p := fmt.Sprintf("%s.%d", prefix, i)
			out = append(out, p)
			out = append(out, leafPaths(p, y)...)
		}
	}
	return out
}

// With copies v with the value at path (as LeafPaths gives it, split at
// the dots) set to val; v itself is not changed. A path through a value
// that is not a map or a slice replaces that value with a map.
func With(v any, path []string, val any) any {
	if len(path) == 0 {
		return val
	}
	switch x := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(x)+1)
		for k, y := range x {
			c[k] = y
		}
		c[path[0]] = With(x[path[0]], path[1:], val)
		return c
	case []any:
		c := append([]any(nil), x...)
		if i, err := strconv.Atoi(path[0]); err == nil && i >= 0 && i < len(c) {
			c[i] = With(c[i], path[1:], val)
		}
		return c
	}
	return With(map[string]any{}, path, val)
}

// Each calls fn once for every field (a dotted path, as LeafPaths gives
// them) and every value: with body, a copy of base where that field holds
// that value.
func Each(base any, fields []string, values []any, fn func(field string, value, body any)) {
	for _, f := range fields {
		for _, v := range values {
			fn(f, v, With(base, strings.Split(f, "."), v))
		}
	}
}

// Malformed are bodies no JSON reader should take: empty, null, the wrong
// kind of value, cut short, nested past any sane depth, a NUL.
var Malformed = []string{"", "null", "[]", `"x"`, "{", `{"id":`, strings.Repeat("[", 10000), "\x00"}
