// Package jsonkeys checks a JSON report's schema against a golden file in
// tests: the keys of its encoding, one "key kind" line each, sorted.
package jsonkeys

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Lines returns the keys of v's JSON encoding as sorted "key kind" lines:
// nested keys as a.b, the keys of an array of objects as a[].b, every other
// value's kind (number, string, bool, array).
func Lines(v any) (string, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	var m any
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", err
	}
	keys := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		kind := "number"
		switch x := v.(type) {
		case map[string]any:
			for k, y := range x {
				walk(strings.TrimPrefix(prefix+"."+k, "."), y)
			}
			return
		case []any:
			if len(x) > 0 {
				if _, ok := x[0].(map[string]any); ok {
					for _, y := range x {
						walk(prefix+"[]", y)
					}
					return
				}
			}
			kind = "array"
		case string:
			kind = "string"
		case bool:
			kind = "bool"
		}
		keys[prefix+" "+kind] = true
	}
	walk("", m)
	var lines []string
	for k := range keys {
		lines = append(lines, k)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n", nil
}

// Golden compares Lines(v) with the file at path, rewriting the file first
// when update is set (after a deliberate change of the schema).
func Golden(t testing.TB, v any, path string, update bool) {
	t.Helper()
	got, err := Lines(v)
	if err != nil {
		t.Fatal(err)
	}
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("JSON keys differ from %s (go test -update after a deliberate change):\ngot\n%s\nwant\n%s", path, got, want)
	}
}
