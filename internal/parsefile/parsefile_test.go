package parsefile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRead: the parsed content of a file; a parse error wrapped with the
// path (errors.Is still sees it); a missing file's error from os.ReadFile.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	for p, s := range map[string]string{good: "42", bad: "forty-two"} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	atoi := func(b []byte) (int, error) { return strconv.Atoi(string(b)) }
	if v, err := Read(good, atoi); v != 42 || err != nil {
		t.Errorf("good: %d, %v; want 42", v, err)
	}
	v, err := Read(bad, atoi)
	if v != 0 || !errors.Is(err, strconv.ErrSyntax) || !strings.HasPrefix(err.Error(), bad+": ") {
		t.Errorf("bad: %d, %v; want 0 and a syntax error prefixed with %s", v, err, bad)
	}
	if _, err := Read(filepath.Join(dir, "missing"), atoi); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing: %v", err)
	}
}
