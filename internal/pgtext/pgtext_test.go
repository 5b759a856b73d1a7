package pgtext

import "testing"

func TestValid(t *testing.T) {
	for s, want := range map[string]bool{"": true, "ü€😀": true, "a\x00b": false, "\xff\xfe": false, "abc": true} {
		if Valid(s) != want {
			t.Errorf("Valid(%q) = %v", s, !want)
		}
	}
}
