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
