package jsonkeys

import "testing"

// TestLines: nested objects, arrays of objects and of values, and each
// kind, against lines written by hand.
func TestLines(t *testing.T) {
	v := map[string]any{"a": 1, "b": map[string]any{"c": "x", "d": true}, "e": []int{1, 2},
		"f": []map[string]any{{"g": 1}, {"h": "y"}}, "i": []any{}}
	got, err := Lines(v)
	if err != nil {
		t.Fatal(err)
	}
	want := "a number\nb.c string\nb.d bool\ne array\nf[].g number\nf[].h string\ni array\n"
	if got != want {
		t.Errorf("Lines =\n%s\nwant\n%s", got, want)
	}
}
