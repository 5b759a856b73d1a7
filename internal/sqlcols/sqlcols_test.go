package sqlcols

import "testing"

func TestQualify(t *testing.T) {
	got := Qualify("a", "id, kind,\n\tsubject_id")
	if want := "a.id, a.kind, a.subject_id"; got != want {
		t.Fatalf("Qualify = %q, want %q", got, want)
	}
}

func TestNullableDerefOrEmpty(t *testing.T) {
	if Nullable("") != nil {
		t.Fatal(`Nullable("") is not nil`)
	}
	if p := Nullable("x"); p == nil || *p != "x" {
		t.Fatalf(`Nullable("x") = %v`, p)
	}
	if Deref(nil) != "" || Deref(Nullable("y")) != "y" {
		t.Fatal("Deref does not undo Nullable")
	}
	if m := OrEmpty(nil); m == nil || len(m) != 0 {
		t.Fatalf("OrEmpty(nil) = %#v, want an empty map", m)
	}
	if m := OrEmpty(map[string]string{"a": "b"}); m["a"] != "b" {
		t.Fatalf("OrEmpty changed its map: %#v", m)
	}
}
