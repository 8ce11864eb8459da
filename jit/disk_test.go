package jit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestDiskRoundTripSecondCacheCompilesNothing(t *testing.T) {
	dir := t.TempDir()
	s := src("disk", 3)
	fa := newFake(0)
	a, _ := newCache(t, fa, dir)
	imgA, err := a.Get(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	fb := newFake(0)
	b, _ := newCache(t, fb, dir)
	imgB, err := b.Get(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(imgA.Data, imgB.Data) || !imgB.FromDisk || imgB.CompileTime != 0 {
		t.Errorf("disk image differs or is not marked as from disk")
	}
	if st := b.Stats(); fb.calls.Load() != 0 || st.DiskHits != 1 || st.Compiles != 0 {
		t.Errorf("second cache: %d compiler calls, stats %+v", fb.calls.Load(), st)
	}
	ents, err := List(dir)
	if err != nil || len(ents) != 1 || ents[0].Err != nil {
		t.Fatalf("List: %v %+v", err, ents)
	}
	m := ents[0].Meta
	if m.Family != "disk" || m.Arch != "sm_90" || m.Compiler != "fake 1.0" || m.Params["variant"] != "3" ||
		len(m.Options) != 1 || m.Created.IsZero() {
		t.Errorf("meta %+v", m)
	}
}

// rewrite replaces the bytes of the single cache file in dir.
func rewrite(t *testing.T, dir string, f func(path string, data []byte) (string, []byte)) {
	t.Helper()
	ents, err := List(dir)
	if err != nil || len(ents) != 1 {
		t.Fatalf("List: %v, %d entries", err, len(ents))
	}
	data, err := os.ReadFile(ents[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	path, data := f(ents[0].Path, data)
	if path != ents[0].Path {
		os.Remove(ents[0].Path)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// reseal recomputes the checksum so that only the changed field is wrong.
func reseal(data []byte) []byte {
	h := sha256.New()
	h.Write(data[:56])
	h.Write(data[headerSize:])
	h.Sum(data[56:56])
	return data
}

func TestDiskCorruptionIsDiscardedAndRebuilt(t *testing.T) {
	other := src("disk", 99)
	cases := []struct {
		name   string
		mutate func(path string, data []byte) (string, []byte)
		reason string
	}{
		{"empty file", func(p string, d []byte) (string, []byte) { return p, nil }, "truncated: 0 bytes"},
		{"truncated header", func(p string, d []byte) (string, []byte) { return p, d[:40] }, "truncated: 40 bytes"},
		{"truncated image", func(p string, d []byte) (string, []byte) { return p, d[:len(d)-100] }, "truncated: image of 4096 bytes, 3996 bytes"},
		{"trailing bytes", func(p string, d []byte) (string, []byte) { return p, append(d, 1, 2, 3) }, "3 trailing bytes"},
		{"flipped image byte", func(p string, d []byte) (string, []byte) { d[len(d)-7] ^= 0x40; return p, d }, "checksum mismatch"},
		{"flipped metadata byte", func(p string, d []byte) (string, []byte) { d[headerSize+3] ^= 0x01; return p, d }, "checksum mismatch"},
		{"flipped checksum", func(p string, d []byte) (string, []byte) { d[60] ^= 0xff; return p, d }, "checksum mismatch"},
		{"foreign file", func(p string, d []byte) (string, []byte) {
			return p, append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, 200)...)
		}, "foreign file"},
		{"other format version", func(p string, d []byte) (string, []byte) {
			binary.LittleEndian.PutUint32(d[8:12], FormatVersion+1)
			return p, reseal(d)
		}, fmt.Sprintf("format version %d, this build reads %d", FormatVersion+1, FormatVersion)},
		// Resealed headers whose lengths disagree with the file: once a
		// slice-bounds panic, when the sum of the lengths wrapped around.
		{"metadata length past the end, resealed", func(p string, d []byte) (string, []byte) {
			binary.LittleEndian.PutUint32(d[12:16], uint32(len(d)))
			return p, reseal(d)
		}, "truncated: metadata of"},
		{"lengths whose sum wraps, resealed", func(p string, d []byte) (string, []byte) {
			binary.LittleEndian.PutUint32(d[12:16], math.MaxUint32)
			// headerSize+m+n == len(d) mod 2^64
			binary.LittleEndian.PutUint64(d[16:24], uint64(len(d)-headerSize)-math.MaxUint32)
			return p, reseal(d)
		}, "truncated: metadata of"},
		{"image length past the end, resealed", func(p string, d []byte) (string, []byte) {
			binary.LittleEndian.PutUint64(d[16:24], binary.LittleEndian.Uint64(d[16:24])+50)
			return p, reseal(d)
		}, "truncated: image of 4146 bytes, 4096 bytes"},
		{"image length short, resealed", func(p string, d []byte) (string, []byte) {
			binary.LittleEndian.PutUint64(d[16:24], 1)
			return p, reseal(d)
		}, "4095 trailing bytes"},
		{"metadata that disagrees with the key", func(p string, d []byte) (string, []byte) {
			key, meta, image, err := decodeFile(p, d, Key{})
			if err != nil {
				t.Fatal(err)
			}
			meta.Options = []string{"-DVARIANT=6"}
			out, _ := encodeFile(key, meta, image)
			return p, out
		}, "records arch"},
		{"file of another key", func(p string, d []byte) (string, []byte) {
			dir := filepath.Dir(p)
			c, _ := New(Config{Compiler: newFake(0), Dir: t.TempDir()})
			otherData, _ := encodeFile(c.Key(other), Meta{Family: "disk"}, fakeImage(other, 4096))
			return filepath.Join(dir, filepath.Base(p)), otherData
		}, "holds key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := src("disk", 5)
			a, _ := newCache(t, newFake(0), dir)
			if _, err := a.Get(context.Background(), s); err != nil {
				t.Fatal(err)
			}
			rewrite(t, dir, tc.mutate)
			fb := newFake(0)
			b, logs := newCache(t, fb, dir)
			img, err := b.Get(context.Background(), s)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(img.Data, fakeImage(s, fb.size)) || img.FromDisk {
				t.Error("served a bad image")
			}
			st := b.Stats()
			if fb.calls.Load() != 1 || st.DiskDiscarded != 1 || st.DiskHits != 0 || st.DiskWrites != 1 {
				t.Errorf("%d compiler calls, stats %+v; want 1 compile, 1 discard, 1 write", fb.calls.Load(), st)
			}
			if !strings.Contains(logs.String(), tc.reason) || !strings.Contains(logs.String(), "discarding") {
				t.Errorf("log lacks %q:\n%s", tc.reason, logs.String())
			}
			// the rebuilt file is whole and trusted by a third process
			fc := newFake(0)
			c, _ := newCache(t, fc, dir)
			if img, err := c.Get(context.Background(), s); err != nil || !img.FromDisk || fc.calls.Load() != 0 {
				t.Errorf("rebuilt file not served from disk: %v", err)
			}
		})
	}
}

func TestDiskWriteFailureKeepsServingFromMemory(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, logs := newCache(t, newFake(0), notDir)
	for i := 0; i < 3; i++ {
		if _, err := c.Get(context.Background(), src("w", i)); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Stats(); st.DiskWriteErrors != 3 || st.Compiles != 3 {
		t.Errorf("stats %+v", st)
	}
	if n := strings.Count(logs.String(), "cannot write the kernel cache"); n != 1 {
		t.Errorf("warned %d times, want once:\n%s", n, logs.String())
	}
}

func TestListStatClear(t *testing.T) {
	dir := t.TempDir()
	c, _ := newCache(t, newFake(0), dir)
	for i := 0; i < 3; i++ {
		if _, err := c.Get(context.Background(), src("a", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Get(context.Background(), src("b", 10)); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, strings.Repeat("ab", 32)+fileExt)
	os.WriteFile(bad, []byte("garbage"), 0o644)
	tmp := filepath.Join(dir, ".0123456789ab-42"+tmpExt)
	os.WriteFile(tmp, []byte("half a file"), 0o644)
	keep := filepath.Join(dir, "notes.txt")
	os.WriteFile(keep, []byte("not ours"), 0o644)

	st, err := StatDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries != 4 || st.Invalid != 1 || st.Temp != 1 || st.Families["a"] != 3 || st.Families["b"] != 1 || st.Bytes <= 4*4096 {
		t.Errorf("StatDir %+v", st)
	}
	files, _, err := Clear(dir)
	if err != nil || files != 6 {
		t.Errorf("Clear: %d files, %v; want 6", files, err)
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 1 || left[0].Name() != "notes.txt" {
		t.Errorf("after Clear: %v", left)
	}
	if ents, err := List(filepath.Join(dir, "missing")); err != nil || ents != nil {
		t.Errorf("List of a missing dir: %v %v", ents, err)
	}
}

func TestTempFilesAreNeverRead(t *testing.T) {
	dir := t.TempDir()
	s := src("tmp", 1)
	fc := newFake(0)
	c, _ := newCache(t, fc, dir)
	// a crashed writer left a half file under a temp name
	os.WriteFile(filepath.Join(dir, "."+c.Key(s).Short()+"-1"+tmpExt), []byte("DFLKRNL\x00half"), 0o644)
	if _, err := c.Get(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Compiles != 1 || st.DiskDiscarded != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestDefaultDir(t *testing.T) {
	cases := []struct {
		cache, xdg, home string
		want, why        string
	}{
		{"/explicit", "/xdg", "/home/u", "/explicit", "$DFLASH_KERNEL_CACHE"},
		{"off", "/xdg", "/home/u", "", "$DFLASH_KERNEL_CACHE=off (memory only)"},
		{"", "/xdg", "/home/u", "/xdg/dflash/kernels", "$XDG_CACHE_HOME"},
		{"", "relative", "/home/u", "/home/u/.cache/dflash/kernels", "~/.cache"},
		{"", "", "/home/u", "/home/u/.cache/dflash/kernels", "~/.cache"},
	}
	for _, c := range cases {
		t.Setenv("DFLASH_KERNEL_CACHE", c.cache)
		t.Setenv("XDG_CACHE_HOME", c.xdg)
		t.Setenv("HOME", c.home)
		dir, why, err := DefaultDir()
		if err != nil || dir != c.want || why != c.why {
			t.Errorf("%+v: DefaultDir = %q, %q, %v", c, dir, why, err)
		}
	}
}

func TestExcerptAndFirstErrorLine(t *testing.T) {
	log := "flex_common.cuh(3): error: in a header\nflex.cu(12): warning: unused\nflex.cu(14): error: identifier \"x\" is undefined\nflex.cu(20): error: second"
	if got := firstErrorLine(log, "flex.cu"); got != 14 {
		t.Errorf("firstErrorLine = %d, want 14 (errors in headers and warnings skipped)", got)
	}
	if got := firstErrorLine("/tmp/x/flex.cu(7): catastrophic error: cannot open", "flex.cu"); got != 7 {
		t.Errorf("catastrophic error line = %d", got)
	}
	if got := firstErrorLine("no errors", "flex.cu"); got != 0 {
		t.Errorf("no error: %d", got)
	}
	code := "l1\nl2\nl3"
	if got, want := excerpt(code, 1, 3), "> 1 | l1\n  2 | l2\n  3 | l3"; got != want {
		t.Errorf("excerpt at the top = %q, want %q", got, want)
	}
	if excerpt(code, 9, 3) != "" {
		t.Error("excerpt past the end is not empty")
	}
}

// zeros reads as zero bytes without end.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestReadContentIsBoundedByTheHeader reads cache files whose content
// differs from the size they had when opened: one being appended to (once
// read until it stopped growing), one already past what its header allows,
// one that shrank. The read must stop at most one byte past the length
// the header gives and say why the file is refused.
func TestReadContentIsBoundedByTheHeader(t *testing.T) {
	s := src("grow", 1)
	good, err := encodeFile(KeyOf(s, "fake 1.0"), Meta{Family: s.Family}, fakeImage(s, 4096))
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(good))
	appended := func() io.Reader { return io.MultiReader(bytes.NewReader(good), io.LimitReader(zeros{}, 1<<30)) }
	cases := []struct {
		name   string
		r      io.Reader
		size   int64 // at the open
		reason string
	}{
		{"appended to after the open", appended(), size, fmt.Sprintf("grew past the %d bytes its header gives while it was read", size)},
		{"past its header at the open", appended(), size + 1<<30, "1073741824 trailing bytes after the image"},
		{"shrank after the open", bytes.NewReader(good[:size-10]), size, "truncated: image of 4096 bytes, 4086 bytes after the metadata"},
		{"shrank below its header", bytes.NewReader(good[:50]), size, "truncated: 50 bytes, header needs 88"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &countingReader{r: tc.r}
			data, err := readContent("grow.kimg", r, tc.size)
			if err == nil {
				_, _, _, err = decodeFile("grow.kimg", data, Key{})
			}
			var ce *corruptError
			if !errors.As(err, &ce) || ce.reason != tc.reason {
				t.Errorf("got %v, want %q", err, tc.reason)
			}
			if r.n > size+1 {
				t.Errorf("read %d bytes of a file whose header gives %d", r.n, size)
			}
		})
	}
}

// TestDiskKeepsBytesThatAreNotUTF8 stores a kernel whose options, arch,
// compiler version, params, family and log hold bytes that are not UTF-8
// (JSON metadata turned them into U+FFFD, so every process discarded the
// file, recompiled and rewrote it). A second cache must be served from
// disk, and List must return the metadata byte for byte.
func TestDiskKeepsBytesThatAreNotUTF8(t *testing.T) {
	dir := t.TempDir()
	s := src("caf\xe9", 1)
	s.Options = []string{"-DNAME=\"caf\xe9\"", "\xff\xfe", ""}
	s.Arch = "sm_90\x80"
	s.Params = map[string]string{"\xc3(": "\xa0\xa1", "b": ""}
	compiler := func() *fakeCompiler {
		f := newFake(0)
		f.version, f.log = "fake \xf0\x28\x8c\xbc", "warning: \xfe"
		return f
	}
	a, _ := newCache(t, compiler(), dir)
	if _, err := a.Get(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	fb := compiler()
	b, logs := newCache(t, fb, dir)
	img, err := b.Get(context.Background(), s)
	if err != nil || !img.FromDisk || !bytes.Equal(img.Data, fakeImage(s, fb.size)) || img.Log != fb.log {
		t.Fatalf("second cache: %v, from disk %v", err, img != nil && img.FromDisk)
	}
	if st := b.Stats(); fb.calls.Load() != 0 || st.DiskHits != 1 || st.DiskDiscarded != 0 {
		t.Errorf("second cache: %d compiles, stats %+v; log:\n%s", fb.calls.Load(), st, logs.String())
	}
	ents, err := List(dir)
	if err != nil || len(ents) != 1 || ents[0].Err != nil {
		t.Fatalf("List: %v %+v", err, ents)
	}
	m := ents[0].Meta
	if m.Family != s.Family || m.Program != s.ProgramName() || m.Arch != s.Arch || m.Compiler != fb.version ||
		!slices.Equal(m.Options, s.Options) || !maps.Equal(m.Params, s.Params) || m.Log != fb.log {
		t.Errorf("List's metadata %#v, want the source's bytes", m)
	}
}

// TestOversizedPartsAreNotWritten: encodeFile refuses metadata longer than
// maxMetaBytes (a uint32 in the header, whose length once wrapped at 4 GiB)
// and images longer than maxImageBytes, which no reader accepts; the cache
// then keeps the kernel in memory and says why.
func TestOversizedPartsAreNotWritten(t *testing.T) {
	if maxMetaBytes > math.MaxUint32 {
		t.Fatalf("maxMetaBytes %d does not fit the header's uint32", maxMetaBytes)
	}
	var key Key
	empty, err := encodeFile(key, Meta{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The largest metadata is written and read back.
	room := maxMetaBytes - int(binary.LittleEndian.Uint32(empty[12:16]))
	full, err := encodeFile(key, Meta{Log: strings.Repeat("x", room)}, []byte("img"))
	if err != nil {
		t.Fatalf("metadata of exactly %d bytes: %v", maxMetaBytes, err)
	}
	if _, meta, _, err := decodeFile("full.kimg", full, key); err != nil || len(meta.Log) != room {
		t.Errorf("metadata of exactly %d bytes does not read back: %v", maxMetaBytes, err)
	}
	if _, err := encodeFile(key, Meta{Log: strings.Repeat("x", room+1)}, nil); err == nil ||
		!strings.Contains(err.Error(), fmt.Sprintf("metadata of %d bytes (a compiler log of %d)", maxMetaBytes+1, room+1)) {
		t.Errorf("metadata of %d bytes: %v", maxMetaBytes+1, err)
	}
	if _, err := encodeFile(key, Meta{}, make([]byte, maxImageBytes+1)); err == nil ||
		!strings.Contains(err.Error(), fmt.Sprintf("image of %d bytes", maxImageBytes+1)) {
		t.Errorf("image of %d bytes: %v", maxImageBytes+1, err)
	}

	dir := t.TempDir()
	fc := newFake(0)
	fc.log = strings.Repeat("w", maxMetaBytes)
	c, logs := newCache(t, fc, dir)
	s := src("big log", 1)
	img, err := c.Get(context.Background(), s)
	if err != nil || !bytes.Equal(img.Data, fakeImage(s, fc.size)) {
		t.Fatalf("Get: %v", err)
	}
	if st := c.Stats(); st.DiskWrites != 0 || st.DiskWriteErrors != 1 || !strings.Contains(logs.String(), "metadata of") {
		t.Errorf("stats %+v; want the write refused; log:\n%.300s", st, logs.String())
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("files written: %v", left)
	}
}
