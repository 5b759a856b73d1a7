package sqlcols

import "testing"

func TestQualify(t *testing.T) {
	got := Qualify("a", "id, kind,\n\tsubject_id")
	if want := "a.id, a.kind, a.subject_id"; got != want {
		t.Fatalf("Qualify = %q, want %q", got, want)
	}
}
