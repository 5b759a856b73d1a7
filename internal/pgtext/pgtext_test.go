package pgtext

import "testing"

func TestValid(t *testing.T) {
	for s, want := range map[string]bool{"": true, "ü€😀": true, "a\x00b": false, "\xff\xfe": false, "abc": true} {
		if Valid(s) != want {
			t.Errorf("Valid(%q) = %v", s, !want)
		}
	}
}

func TestTruncateKeepsRunes(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{{"abc", 10, "abc"}, {"abç", 3, "ab"} /* ç is 2 bytes: never cut in half */, {"abçd", 4, "abç"}} {
		if got := Truncate(c.s, c.n); got != c.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
