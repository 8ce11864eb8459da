package atomicfile

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"dflash/internal/directio"
	"dflash/internal/testseed"
)

// testBlock is the block size of most tests: four alignment units, so that
// small files span several blocks.
const testBlock = 4 * directio.Align

// countingDirect wraps the direct file and counts the bytes written to it.
type countingDirect struct {
	directFile
	mu    sync.Mutex
	bytes int64
}

func (c *countingDirect) WriteAt(p []byte, off int64) (int, error) {
	n, err := c.directFile.WriteAt(p, off)
	c.mu.Lock()
	c.bytes += int64(n)
	c.mu.Unlock()
	return n, err
}

// withOpenDirect replaces openDirect for the test.
func withOpenDirect(t *testing.T, open func(name string) (directFile, error)) {
	old := openDirect
	openDirect = open
	t.Cleanup(func() { openDirect = old })
}

// fillPieces returns a fill that writes data in pieces of random sizes (up
// to two blocks), so that blocks are filled across Write calls.
func fillPieces(data []byte, r *rand.Rand) func(io.Writer) error {
	return func(w io.Writer) error {
		for p := data; len(p) > 0; {
			k := min(len(p), 1+r.IntN(2*testBlock))
			if _, err := w.Write(p[:k]); err != nil {
				return err
			}
			p = p[k:]
		}
		return nil
	}
}

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestWriteBlocks writes files of sizes around the alignment and the block
// size, reads them back and checks that every aligned byte went directly to
// the disk and the tail through the page cache (where the file system takes
// direct writes).
func TestWriteBlocks(t *testing.T) {
	r := testseed.New(t)
	a, blk := directio.Align, testBlock
	for _, c := range []struct {
		name string
		size int
	}{
		{"empty", 0}, {"one byte", 1}, {"align-1", a - 1}, {"align", a}, {"align+1", a + 1},
		{"block-1", blk - 1}, {"exact blocks", 5 * blk}, {"blocks and tail", 3*blk + a + 123},
	} {
		size := c.size
		t.Run(c.name, func(t *testing.T) {
			var c *countingDirect
			refused := false
			withOpenDirect(t, func(name string) (directFile, error) {
				d, err := directio.OpenFile(name, 0, 0)
				if err != nil {
					refused = directio.Refused(err)
					return nil, err
				}
				c = &countingDirect{directFile: d}
				return c, nil
			})
			dir := t.TempDir()
			path := filepath.Join(dir, "big.bin")
			if err := WriteFile(path, []byte("old content")); err != nil {
				t.Fatal(err)
			}
			data := randomBytes(r, size)
			if err := (Options{BlockSize: blk}).WriteBlocks(path, fillPieces(data, r)); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes, want the %d written (first difference at %d)", len(got), len(data), firstDiff(got, data))
			}
			if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
				t.Errorf("stat %v, %v: want mode 0644", st, err)
			}
			assertOnly(t, dir, "big.bin")
			switch {
			case refused:
				t.Logf("the file system of %s refuses direct writes: all went through the page cache", dir)
			case c == nil:
				t.Fatal("no direct file was opened")
			case c.bytes != int64(size/a*a):
				t.Errorf("%d bytes written directly, want %d (the aligned part of %d)", c.bytes, size/a*a, size)
			}
		})
	}
}

// TestWriteBlocksDefault writes a file of two default blocks and a tail
// with the default options.
func TestWriteBlocksDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 128 MiB")
	}
	r := testseed.New(t)
	path := filepath.Join(t.TempDir(), "f")
	data := randomBytes(r, 2*DefaultBlockSize+directio.Align+7)
	if err := (Options{}).WriteBlocks(path, func(w io.Writer) error { _, err := w.Write(data); return err }); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, want the %d written (first difference at %d)", len(got), len(data), firstDiff(got, data))
	}
}

// refusingDirect refuses every write as a file system without direct
// writes does, after opening.
type refusingDirect struct{ writes, closes int }

func (d *refusingDirect) WriteAt(p []byte, off int64) (int, error) {
	d.writes++
	return 0, &os.PathError{Op: "write", Path: "fake", Err: syscall.EINVAL}
}

func (d *refusingDirect) Close() error { d.closes++; return nil }

// TestWriteBlocksFallback forces the page cache's path, refused at the open
// and at the first write, and checks that the file is the same.
func TestWriteBlocksFallback(t *testing.T) {
	r := testseed.New(t)
	for _, at := range []string{"open", "write"} {
		t.Run(at, func(t *testing.T) {
			fake := &refusingDirect{}
			withOpenDirect(t, func(name string) (directFile, error) {
				if at == "open" {
					return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EINVAL}
				}
				return fake, nil
			})
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			data := randomBytes(r, 4*testBlock+directio.Align+1)
			if err := (Options{BlockSize: testBlock}).WriteBlocks(path, fillPieces(data, r)); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes (%v), want the %d written (first difference at %d)", len(got), err, len(data), firstDiff(got, data))
			}
			assertOnly(t, dir, "f")
			if at == "write" && (fake.writes != 1 || fake.closes != 1) {
				t.Errorf("the refusing file got %d writes and %d closes, want 1 and 1 (the page cache after the first refusal)", fake.writes, fake.closes)
			}
		})
	}
}

// failingDirect fails its second write with an I/O error.
type failingDirect struct {
	directFile
	writes int
}

func (d *failingDirect) WriteAt(p []byte, off int64) (int, error) {
	if d.writes++; d.writes == 2 {
		return 0, &os.PathError{Op: "write", Path: "fake", Err: syscall.EIO}
	}
	return d.directFile.WriteAt(p, off)
}

// TestWriteBlocksFailure: a fill that fails after several blocks, and a
// block write that fails, leave the old file and no temporary file, and the
// error names the path.
func TestWriteBlocksFailure(t *testing.T) {
	r := testseed.New(t)
	boom := errors.New("encoder failed")
	for _, c := range []struct {
		name string
		want error
	}{{"fill", boom}, {"write", syscall.EIO}} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "write" {
				withOpenDirect(t, func(name string) (directFile, error) {
					f, err := os.OpenFile(name, os.O_WRONLY, 0) // no need for direct writes to fail one
					return &failingDirect{directFile: f}, err
				})
			}
			dir := t.TempDir()
			path := filepath.Join(dir, "model.bin")
			if err := WriteFile(path, []byte("old")); err != nil {
				t.Fatal(err)
			}
			data := randomBytes(r, 6*testBlock)
			err := (Options{BlockSize: testBlock}).WriteBlocks(path, func(w io.Writer) error {
				if err := fillPieces(data, r)(w); err != nil {
					return err
				}
				if c.name == "fill" {
					return boom
				}
				return nil
			})
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("err = %v, want %v naming %s", err, c.want, path)
			}
			if got, _ := os.ReadFile(path); string(got) != "old" {
				t.Errorf("after a failed write the file holds %d bytes, want the old content", len(got))
			}
			assertOnly(t, dir, "model.bin")
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// BenchmarkWrite1GB compares WriteBlocks with Write through a 1 MiB
// bufio.Writer (how the large files went before) on a 1 GiB file in the
// test's temporary directory, written from memory in 4 MiB pieces.
func BenchmarkWrite1GB(b *testing.B) {
	if testing.Short() {
		b.Skip("writes 1 GiB per iteration")
	}
	data := randomBytes(rand.New(rand.NewPCG(1, 2)), 1<<30)
	fill := func(w io.Writer) error {
		for p := data; len(p) > 0; p = p[min(len(p), 4<<20):] {
			if _, err := w.Write(p[:min(len(p), 4<<20)]); err != nil {
				return err
			}
		}
		return nil
	}
	path := filepath.Join(b.TempDir(), "bench.bin")
	b.Run("blocks", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if err := (Options{}).WriteBlocks(path, fill); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("buffered", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			err := Write(path, func(w io.Writer) error {
				bw := bufio.NewWriterSize(w, 1<<20)
				if err := fill(bw); err != nil {
					return err
				}
				return bw.Flush()
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
