//go:build unix

package jit

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
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

// allocated returns the bytes the process allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// readBound is what reading a hostile cache file may allocate: its header
// and a good kernel's image and metadata, never the file's size.
const readBound = 32 << 20

// TestHugeFileAtKeyPath puts sparse files of gigabytes at a key's path
// (truncate costs no disk): whatever their header says, Get, List, StatDir
// and Clear must refuse them from the header and the file's size alone,
// allocating a bounded amount (once: all of the file, twice over), and
// Clear must remove them.
func TestHugeFileAtKeyPath(t *testing.T) {
	s := src("huge", 1)
	cases := []struct {
		name   string
		size   int64
		header func(c *Cache) []byte // nil: zeros
		reason string
	}{
		{"zeros 1 GiB", 1 << 30, nil, "foreign file"},
		{"zeros 4 GiB", 4 << 30, nil, "foreign file"},
		{"good file grown to 1 GiB", 1 << 30, func(c *Cache) []byte {
			d, err := encodeFile(c.Key(s), Meta{Family: s.Family}, fakeImage(s, 4096))
			if err != nil {
				t.Fatal(err)
			}
			return d
		}, "trailing bytes after the image"},
		{"image length that fills 1 GiB", 1 << 30, func(c *Cache) []byte {
			d, _ := encodeFile(c.Key(s), Meta{}, nil)
			binary.LittleEndian.PutUint64(d[16:24], 1<<30-headerSize-uint64(binary.LittleEndian.Uint32(d[12:16])))
			return reseal(d)
		}, fmt.Sprintf("bytes, more than the largest this build reads (%d)", maxImageBytes)},
		{"metadata length that fills 1 GiB", 1 << 30, func(c *Cache) []byte {
			d, _ := encodeFile(c.Key(s), Meta{}, nil)
			binary.LittleEndian.PutUint32(d[12:16], 1<<30-headerSize)
			return reseal(d)
		}, fmt.Sprintf("metadata of 1073741736 bytes, more than the largest this build reads (%d)", maxMetaBytes)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fc := newFake(0)
			c, logs := newCache(t, fc, dir)
			path := filePath(dir, c.Key(s))
			var head []byte
			if tc.header != nil {
				head = tc.header(c)
			}
			sparse(t, path, head, tc.size)

			var ents []DiskEntry
			if n := allocated(func() { ents = listWithin(t, dir) }); n > readBound {
				t.Errorf("List allocated %d bytes", n)
			}
			if len(ents) != 1 || ents[0].Err == nil || !strings.Contains(ents[0].Err.Error(), tc.reason) || ents[0].Size != tc.size {
				t.Errorf("List: %+v, want one invalid entry of %d bytes: %s", ents, tc.size, tc.reason)
			}
			var st DirStats
			if n := allocated(func() { within(t, "StatDir", func() { st, _ = StatDir(dir) }) }); n > readBound || st.Invalid != 1 {
				t.Errorf("StatDir allocated %d bytes: %+v", n, st)
			}
			var img *Image
			var err error
			if n := allocated(func() { within(t, "Get", func() { img, err = c.Get(context.Background(), s) }) }); n > readBound {
				t.Errorf("Get allocated %d bytes", n)
			}
			if err != nil || !bytes.Equal(img.Data, fakeImage(s, fc.size)) || img.FromDisk {
				t.Fatalf("Get: %v, want the compiled image", err)
			}
			if st := c.Stats(); st.DiskDiscarded != 1 || st.DiskWrites != 1 || !strings.Contains(logs.String(), tc.reason) {
				t.Errorf("stats %+v; want the file discarded and rewritten; log:\n%s", st, logs.String())
			}

			// Clear removes a huge file without reading it.
			sparse(t, path, head, tc.size)
			var files int
			var bytes int64
			if n := allocated(func() { within(t, "Clear", func() { files, bytes, err = Clear(dir) }) }); n > readBound {
				t.Errorf("Clear allocated %d bytes", n)
			}
			if err != nil || files != 1 || bytes != tc.size {
				t.Errorf("Clear: %d files, %d bytes, %v; want 1 file of %d bytes", files, bytes, err, tc.size)
			}
			if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("after Clear: %v", err)
			}
		})
	}
}

// sparse makes path a file of size bytes that starts with head.
func sparse(t *testing.T, path string, head []byte, size int64) {
	t.Helper()
	if err := os.WriteFile(path, head, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Skipf("cannot make a sparse file of %d bytes here: %v", size, err)
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
