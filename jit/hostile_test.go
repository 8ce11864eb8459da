//go:build unix

package jit

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// within fails the test when f does not return in time (a blocked open).
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return within 10 s (blocked on a non-regular file?)", what)
	}
}

// TestNonRegularFileAtKeyPath puts what is not a regular file where a key's
// file belongs. Get must not block, must compile and serve the right image,
// and must replace the thing when it can be removed (a FIFO, a symbolic
// link, an empty directory) or else keep the kernel in memory (a directory
// with files in it, which it leaves alone). List, StatDir and Clear must
// not block either.
func TestNonRegularFileAtKeyPath(t *testing.T) {
	cases := []struct {
		name, kind string
		make       func(t *testing.T, path string)
		replaced   bool
	}{
		{"fifo", "named pipe", func(t *testing.T, p string) { mkfifo(t, p) }, true},
		{"symlink to a fifo", "symbolic link", func(t *testing.T, p string) {
			mkfifo(t, p+".pipe")
			if err := os.Symlink(p+".pipe", p); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"empty directory", "directory", func(t *testing.T, p string) { mkdir(t, p) }, true},
		{"directory with a file", "directory", func(t *testing.T, p string) {
			mkdir(t, p)
			if err := os.WriteFile(filepath.Join(p, "x"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := src("hostile", 1)
			fc := newFake(0)
			c, logs := newCache(t, fc, dir)
			path := filePath(dir, c.Key(s))
			tc.make(t, path)

			ents := listWithin(t, dir)
			if len(ents) != 1 || ents[0].Err == nil || !strings.Contains(ents[0].Err.Error(), "not a regular file ("+tc.kind+")") {
				t.Errorf("List: %+v", ents)
			}
			var img *Image
			var err error
			within(t, "Get", func() { img, err = c.Get(context.Background(), s) })
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(img.Data, fakeImage(s, fc.size)) || img.FromDisk {
				t.Error("served a wrong image")
			}
			st := c.Stats()
			if st.Compiles != 1 || st.DiskDiscarded != 1 || st.DiskHits != 0 {
				t.Errorf("stats %+v; want 1 compile, 1 discard", st)
			}
			if !strings.Contains(logs.String(), "not a regular file ("+tc.kind+")") {
				t.Errorf("log does not name the file type:\n%s", logs.String())
			}
			fi, err := os.Lstat(path)
			if got := err == nil && fi.Mode().IsRegular(); got != tc.replaced {
				t.Errorf("replaced by a cache file: %v, want %v (%v)", got, tc.replaced, err)
			}
			if !tc.replaced && st.DiskWriteErrors != 1 {
				t.Errorf("stats %+v; want the write to fail", st)
			}
			// a second process is served from disk when the file was replaced
			fc2 := newFake(0)
			c2, _ := newCache(t, fc2, dir)
			within(t, "Get", func() { img, err = c2.Get(context.Background(), s) })
			if err != nil || !bytes.Equal(img.Data, fakeImage(s, fc.size)) || img.FromDisk != tc.replaced {
				t.Errorf("second cache: from disk %v, err %v", img != nil && img.FromDisk, err)
			}
		})
	}
}

func TestListStatClearDoNotOpenFIFOs(t *testing.T) {
	dir := t.TempDir()
	pipe := filepath.Join(dir, strings.Repeat("cd", 32)+fileExt)
	mkfifo(t, pipe)
	mkfifo(t, filepath.Join(dir, ".0123456789ab-7"+tmpExt))
	ents := listWithin(t, dir)
	if len(ents) != 2 {
		t.Fatalf("List: %+v", ents)
	}
	var st DirStats
	var err error
	within(t, "StatDir", func() { st, err = StatDir(dir) })
	if err != nil || st.Invalid != 1 || st.Temp != 1 || st.Entries != 0 {
		t.Errorf("StatDir: %+v, %v", st, err)
	}
	var files int
	within(t, "Clear", func() { files, _, err = Clear(dir) })
	if err != nil || files != 2 {
		t.Errorf("Clear: %d files, %v", files, err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left after Clear: %v", left)
	}
}

// TestStaleTempFilesRemovedWhenCacheOpens leaves temporary files as killed
// writers do: those older than staleTempAge go when a cache opens the
// directory; a recent one (possibly a live writer's) and files that are
// not temporary stay.
func TestStaleTempFilesRemovedWhenCacheOpens(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-staleTempAge - time.Minute)
	stale := []string{".0123456789ab-111" + tmpExt, ".ba9876543210-222" + tmpExt}
	fresh := ".0123456789ab-333" + tmpExt
	other := []string{"notes.txt", "old" + tmpExt} // not named like a temporary file
	for _, n := range append(append(slices.Clone(stale), fresh), other...) {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("half a file"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range append(slices.Clone(stale), other...) {
		if err := os.Chtimes(filepath.Join(dir, n), old, old); err != nil {
			t.Fatal(err)
		}
	}
	_, logs := newCache(t, newFake(0), dir)
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	want := append([]string{fresh}, other...)
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
	if !strings.Contains(logs.String(), "files=2") {
		t.Errorf("log does not count the removed files:\n%s", logs.String())
	}
	// a memory-only cache and a missing directory are fine
	if _, err := New(Config{Compiler: newFake(0), Dir: filepath.Join(dir, "missing")}); err != nil {
		t.Error(err)
	}
}

func listWithin(t *testing.T, dir string) []DiskEntry {
	t.Helper()
	var ents []DiskEntry
	var err error
	within(t, "List", func() { ents, err = List(dir) })
	if err != nil {
		t.Fatal(err)
	}
	return ents
}

func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("cannot make a FIFO here: %v", err)
	}
}

func mkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestOpenRegularDoesNotFollowSymlinks opens a key path that was swapped
// to a symbolic link after the Lstat that found a regular file there (once
// 59 reads in 650,205 of a path swapped in a loop): the open itself must
// refuse the link, whatever it points to, rather than open its target and
// find out after.
func TestOpenRegularDoesNotFollowSymlinks(t *testing.T) {
	dir := t.TempDir()
	pipe := filepath.Join(dir, "pipe")
	mkfifo(t, pipe)
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("a regular file"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{pipe, good} {
		link := filepath.Join(dir, strings.Repeat("ef", 32)+fileExt)
		os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		var err error
		within(t, "openRegular", func() {
			var f *os.File
			if f, _, err = openRegular(link); f != nil {
				f.Close()
			}
		})
		var ce *corruptError
		if !errors.As(err, &ce) || ce.reason != "not a regular file (symbolic link)" {
			t.Errorf("openRegular of a link to %s: %v, want not a regular file (symbolic link)", filepath.Base(target), err)
		}
	}
}
