package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fullDisk is a writer that takes room bytes and then fails with ENOSPC, as a
// file on a full disk does.
type fullDisk struct {
	w    io.Writer
	room int
}

func (d *fullDisk) Write(p []byte) (int, error) {
	n := min(len(p), d.room)
	d.room -= n
	if _, err := d.w.Write(p[:n]); err != nil {
		return 0, err
	}
	if n < len(p) {
		return n, &os.PathError{Op: "write", Path: "disk", Err: syscall.ENOSPC}
	}
	return n, nil
}

// TestWriteWholeFullDisk: spec's --out is written whole or not at all: when a
// write fails with ENOSPC part way through a line, the file keeps its previous
// content, no temporary file is left, and the error says the file was not written
// and how many lines had been; a run that succeeds replaces the file.
func TestWriteWholeFullDisk(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gen.jsonl")
	if err := os.WriteFile(path, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lines := func(w io.Writer) error {
		for i := range 5 {
			if _, err := fmt.Fprintf(w, "{\"line\": %d}\n", i); err != nil {
				return err
			}
		}
		return nil
	}
	err := writeWhole(path, 5, func(w io.Writer) error { return lines(&fullDisk{w: w, room: 30}) })
	want := "--out " + path + " not written (it is replaced only when complete; 2 of 5 lines had been written)"
	if !errors.Is(err, syscall.ENOSPC) || err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want ENOSPC and %q", err, want)
	}
	check := func(content string) {
		t.Helper()
		if b, err := os.ReadFile(path); err != nil || string(b) != content {
			t.Fatalf("%s holds %q (%v), want %q", path, b, err, content)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 1 {
			t.Fatalf("%s holds %d files, want only %s", dir, len(ents), path)
		}
	}
	check("old\n")
	if err := writeWhole(path, 5, lines); err != nil {
		t.Fatal(err)
	}
	check("{\"line\": 0}\n{\"line\": 1}\n{\"line\": 2}\n{\"line\": 3}\n{\"line\": 4}\n")
}
