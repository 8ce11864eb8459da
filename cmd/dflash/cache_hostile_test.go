//go:build unix

package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"dflash/jit"
)

// cacheFile lays out a kernel cache file by the layout documented in
// jit/disk.go, independently of jit's encoder: magic, format version,
// metadata length m, image length n, key, SHA-256 of header[0:56] ++ body.
func cacheFile(key [32]byte, m uint32, n uint64, body []byte) []byte {
	d := make([]byte, 88, 88+len(body))
	copy(d, "DFLKRNL\x00")
	binary.LittleEndian.PutUint32(d[8:12], jit.FormatVersion)
	binary.LittleEndian.PutUint32(d[12:16], m)
	binary.LittleEndian.PutUint64(d[16:24], n)
	copy(d[24:56], key[:])
	d = append(d, body...)
	h := sha256.New()
	h.Write(d[:56])
	h.Write(d[88:])
	h.Sum(d[56:56])
	return d
}

// cacheMeta lays out a kernel cache file's metadata by the layout
// documented in jit/meta.go, independently of jit's encoder: the strings
// family, program, arch and compiler, no options, no params, a zero
// creation time and compile time, no log.
func cacheMeta(family, arch, compiler string) []byte {
	var b []byte
	for _, s := range []string{family, "", arch, compiler} {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	b = binary.LittleEndian.AppendUint32(b, 0) // options
	b = binary.LittleEndian.AppendUint32(b, 0) // params
	b = binary.LittleEndian.AppendUint64(b, uint64(time.Time{}.Unix()))
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(0))
	return binary.LittleEndian.AppendUint32(b, 0) // log
}

// TestCacheCommandsOnHostileFiles runs cache ls, stats and clear on a
// directory holding one good file and every kind of bad one: a resealed
// header whose lengths wrap around (once a panic), garbage, a FIFO (once a
// hang), an empty and a non-empty directory under cache file names. Each
// command must return promptly, list the bad ones as invalid and clear
// what it can, naming what it cannot.
func TestCacheCommandsOnHostileFiles(t *testing.T) {
	dir := t.TempDir()
	name := func(b byte) string { return hex.EncodeToString(bytes.Repeat([]byte{b}, 32)) + ".kimg" }
	meta := cacheMeta("good", "sm_90", "test")
	image := []byte("CUBIN")
	good := cacheFile([32]byte(bytes.Repeat([]byte{1}, 32)), uint32(len(meta)), uint64(len(image)), append(meta, image...))
	wrap := cacheFile([32]byte(bytes.Repeat([]byte{2}, 32)), math.MaxUint32, uint64(len(meta))-math.MaxUint32, meta)
	for n, data := range map[string][]byte{name(1): good, name(2): wrap, name(3): []byte("garbage")} {
		if err := os.WriteFile(filepath.Join(dir, n), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, name(4)), 0o644); err != nil {
		t.Skipf("cannot make a FIFO here: %v", err)
	}
	full := filepath.Join(dir, name(6))
	for _, d := range []string{filepath.Join(dir, name(5)), full} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	run := func(cmd func(*bytes.Buffer) error) (string, error) {
		t.Helper()
		var out bytes.Buffer
		done := make(chan error, 1)
		go func() { done <- cmd(&out) }()
		select {
		case err := <-done:
			return out.String(), err
		case <-time.After(10 * time.Second):
			t.Fatal("command did not return within 10 s")
			return "", nil
		}
	}
	out, err := run(func(b *bytes.Buffer) error { return cacheLs(b, []string{"--cache-dir", dir, "--json"}) })
	if err != nil {
		t.Fatal(err)
	}
	var ls struct{ Entries []cacheEntryJSON }
	if err := json.Unmarshal([]byte(out), &ls); err != nil {
		t.Fatalf("ls --json: %v\n%s", err, out)
	}
	want := map[string]string{name(1): "ok", name(2): "invalid: kernel cache file " + filepath.Join(dir, name(2)) + ": truncated: metadata of 4294967295 bytes",
		name(3): "invalid: kernel cache file " + filepath.Join(dir, name(3)) + ": truncated: 7 bytes",
		name(4): "invalid: kernel cache file " + filepath.Join(dir, name(4)) + ": not a regular file (named pipe)",
		name(5): "invalid: kernel cache file " + filepath.Join(dir, name(5)) + ": not a regular file (directory)",
		name(6): "invalid: kernel cache file " + full + ": not a regular file (directory)"}
	if len(ls.Entries) != len(want) {
		t.Errorf("ls lists %d entries, want %d:\n%s", len(ls.Entries), len(want), out)
	}
	for _, e := range ls.Entries {
		if w := want[filepath.Base(e.Path)]; !strings.HasPrefix(e.Status, w) || w == "" {
			t.Errorf("%s: status %q, want %q...", filepath.Base(e.Path), e.Status, w)
		}
		if good := e.Status == "ok"; good != (e.Meta != nil) || good && (e.Family != "good" || e.Arch != "sm_90" || e.Compiler != "test") {
			t.Errorf("%s: status %q with metadata %+v", filepath.Base(e.Path), e.Status, e.Meta)
		}
	}
	if out, err := run(func(b *bytes.Buffer) error { return cacheLs(b, []string{"--cache-dir", dir}) }); err != nil ||
		!strings.Contains(out, "6 files") || !strings.Contains(out, "good") {
		t.Errorf("ls table: %v\n%s", err, out)
	}
	out, err = run(func(b *bytes.Buffer) error { return cacheStats(b, []string{"--cache-dir", dir, "--json"}) })
	var st jit.DirStats
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || st.Entries != 1 || st.Invalid != 5 || st.Families["good"] != 1 {
		t.Errorf("stats: %v %+v\n%s", err, st, out)
	}
	out, err = run(func(b *bytes.Buffer) error { return cacheClear(b, []string{"--cache-dir", dir}) })
	if err == nil || !strings.Contains(err.Error(), full) || !strings.Contains(out, "removed 5 files") {
		t.Errorf("clear: %v\n%s", err, out)
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 || left[0].Name() != name(6) {
		t.Errorf("left after clear: %v (want only the non-empty directory)", left)
	}
}

// TestCacheCommandsOnHugeFiles runs cache ls, stats and clear on sparse
// files of gigabytes under cache file names (truncate costs no disk): a
// 4 GiB one of zeros and a good file grown to 1 GiB once killed all three
// with out of memory under a 2 GiB limit, so clear could not remove them.
// Each must refuse them from their header and size, allocating a bounded
// amount, and clear must remove them.
func TestCacheCommandsOnHugeFiles(t *testing.T) {
	dir := t.TempDir()
	name := func(b byte) string { return hex.EncodeToString(bytes.Repeat([]byte{b}, 32)) + ".kimg" }
	meta := cacheMeta("good", "sm_90", "test")
	good := cacheFile([32]byte(bytes.Repeat([]byte{1}, 32)), uint32(len(meta)), 5, append(meta, "CUBIN"...))
	files := []struct {
		name   string
		head   []byte
		size   int64
		status string
	}{
		{name(1), good, int64(len(good)), "ok"},
		{name(2), nil, 4 << 30, "invalid: kernel cache file " + filepath.Join(dir, name(2)) + ": foreign file"},
		// name(1)'s key and header, then 1 GiB of zeros: refused by its size
		{name(3), good, 1 << 30, "invalid: kernel cache file " + filepath.Join(dir, name(3)) + ": " + fmt.Sprint(1<<30-len(good)) + " trailing bytes"},
		{name(1)[:10] + ".kimg", good, 1 << 30, "invalid: kernel cache file " + filepath.Join(dir, name(1)[:10]+".kimg") + ": file name is not a key"},
	}
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, f.head, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, f.size); err != nil {
			t.Skipf("cannot make a sparse file of %d bytes here: %v", f.size, err)
		}
	}
	run := func(what string, cmd func(*bytes.Buffer) error) string {
		t.Helper()
		var out bytes.Buffer
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := cmd(&out)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 32<<20 {
			t.Errorf("%s allocated %d bytes", what, n)
		}
		return out.String()
	}
	out := run("ls", func(b *bytes.Buffer) error { return cacheLs(b, []string{"--cache-dir", dir, "--json"}) })
	var ls struct{ Entries []cacheEntryJSON }
	if err := json.Unmarshal([]byte(out), &ls); err != nil {
		t.Fatalf("ls --json: %v\n%s", err, out)
	}
	if len(ls.Entries) != len(files) {
		t.Errorf("ls lists %d entries, want %d:\n%s", len(ls.Entries), len(files), out)
	}
	for _, e := range ls.Entries {
		for _, f := range files {
			if filepath.Base(e.Path) == f.name && (!strings.HasPrefix(e.Status, f.status) || e.Bytes != f.size) {
				t.Errorf("%s: status %q, %d bytes; want %q..., %d bytes", f.name, e.Status, e.Bytes, f.status, f.size)
			}
		}
	}
	var st jit.DirStats
	if out := run("stats", func(b *bytes.Buffer) error { return cacheStats(b, []string{"--cache-dir", dir, "--json"}) }); json.Unmarshal([]byte(out), &st) != nil ||
		st.Entries != 1 || st.Invalid != 3 {
		t.Errorf("stats: %+v\n%s", st, out)
	}
	want := fmt.Sprintf("removed 4 files (%d bytes)", int64(len(good))+4<<30+2<<30)
	if out := run("clear", func(b *bytes.Buffer) error { return cacheClear(b, []string{"--cache-dir", dir}) }); !strings.Contains(out, want) {
		t.Errorf("clear: %q, want %q", out, want)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left after clear: %v", left)
	}
}
