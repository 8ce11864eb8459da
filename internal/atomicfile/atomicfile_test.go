package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for _, content := range []string{"first version\n", "second, longer version\n", "3\n"} {
		if err := WriteFile(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != content {
			t.Errorf("content %q, want %q", got, content)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o644 {
			t.Errorf("mode %v, want 0644", st.Mode().Perm())
		}
	}
	assertOnly(t, dir, "state.json")
}

func TestWriteFailureKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.bin")
	if err := WriteFile(path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("encoder failed")
	err := Write(path, func(w io.Writer) error {
		if _, err := io.WriteString(w, "partial new content"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), path) {
		t.Errorf("err = %v, want %v naming %s", err, boom, path)
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("after a failed write the file holds %q, want the old content", got)
	}
	assertOnly(t, dir, "model.bin")
}

func TestWriteMissingDir(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent", "f")
	if err := WriteFile(path, []byte("x")); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("err = %v, want an error naming %s", err, path)
	}
}

func TestTempPrefix(t *testing.T) {
	// Owners of a directory remove leftovers of interrupted writes by this prefix:
	// the temporary file of a write in progress must carry it.
	dir := t.TempDir()
	path := filepath.Join(dir, "latest")
	var seen []string
	err := Write(path, func(io.Writer) error {
		ents, err := os.ReadDir(dir)
		for _, e := range ents {
			seen = append(seen, e.Name())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || !strings.HasPrefix(seen[0], TempPrefix("latest")) {
		t.Errorf("during the write the directory held %v, want one file starting %q", seen, TempPrefix("latest"))
	}
}

func assertOnly(t *testing.T, dir, name string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != name {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only %s (no temporary files left)", names, name)
	}
}

// TestOptionsTempPattern: Options.TempPattern names the temporary file (the
// kernel cache recognises its own leftovers by it), and the result is the
// same replacement as WriteFile's.
func TestOptionsTempPattern(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "entry.bin")
	o := Options{TempPattern: ".entry-*.tmp", BestEffortDirSync: true}
	var seen []string
	err := o.Write(path, func(w io.Writer) error {
		ents, err := os.ReadDir(dir)
		for _, e := range ents {
			seen = append(seen, e.Name())
		}
		if err != nil {
			return err
		}
		_, err = io.WriteString(w, "image")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || !strings.HasPrefix(seen[0], ".entry-") || !strings.HasSuffix(seen[0], ".tmp") {
		t.Errorf("during the write the directory held %v, want one .entry-*.tmp file", seen)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "image" {
		t.Errorf("content %q, %v", got, err)
	}
	assertOnly(t, dir, "entry.bin")
}
