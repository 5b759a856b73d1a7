package hostile

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLeafPathsAndWith(t *testing.T) {
	var doc any
	require.NoError(t, json.Unmarshal([]byte(`{"a":{"b":[1,{"c":"x"}]},"d":true}`), &doc))
	paths := LeafPaths(doc)
	require.Equal(t, []string{"a", "a.b", "a.b.0", "a.b.1", "a.b.1.c", "d"}, paths)

	got := With(doc, []string{"a", "b", "1", "c"}, nil)
	b, err := json.Marshal(got)
	require.NoError(t, err)
	require.JSONEq(t, `{"a":{"b":[1,{"c":null}]},"d":true}`, string(b))
	b, err = json.Marshal(doc)
	require.NoError(t, err)
	require.JSONEq(t, `{"a":{"b":[1,{"c":"x"}]},"d":true}`, string(b), "the original is unchanged")

	got = With(doc, []string{"d", "e"}, 1)
	b, err = json.Marshal(got)
	require.NoError(t, err)
	require.JSONEq(t, `{"a":{"b":[1,{"c":"x"}]},"d":{"e":1}}`, string(b))
}

func TestEach(t *testing.T) {
	base := map[string]any{"a": 1, "b": map[string]any{"c": 2}}
	var got []string
	Each(base, LeafPaths(base), []any{"x", nil}, func(f string, v, body any) {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		got = append(got, f+"="+string(b))
	})
	require.Equal(t, []string{
		`a={"a":"x","b":{"c":2}}`, `a={"a":null,"b":{"c":2}}`,
		`b={"a":1,"b":"x"}`, `b={"a":1,"b":null}`,
		`b.c={"a":1,"b":{"c":"x"}}`, `b.c={"a":1,"b":{"c":null}}`,
	}, got)
}
