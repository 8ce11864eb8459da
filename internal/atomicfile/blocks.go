package atomicfile

import (
	"fmt"
	"io"
	"os"

	"dflash/internal/directio"
)

// DefaultBlockSize is WriteBlocks' block size when Options.BlockSize is 0:
// one write of it keeps a fast disk's queue full (the kernel splits it into
// many requests), and the two blocks in use cost little memory beside a
// multi-GB file.
const DefaultBlockSize = 64 << 20

// WriteBlocks replaces path as Write does with what fill writes, for large
// files: the bytes go to the disk in blocks of o.BlockSize, written around
// the page cache (directio) by a goroutine of their own while fill writes
// the next block, so that the file is written at the disk's speed rather
// than copied into the page cache and written back at fsync. The last bytes
// short of a multiple of directio.Align go through the page cache (a write
// at their offset through the temporary file's own descriptor), and so do
// all of them where direct writes are refused (directio.Refused: tmpfs on
// older kernels, other platforms); the fsync before the rename makes both
// kinds durable. The writer fill gets copies what it is given, and is not
// safe for concurrent use.
func (o Options) WriteBlocks(path string, fill func(w io.Writer) error) error {
	size := o.BlockSize
	if size == 0 {
		size = DefaultBlockSize
	}
	if size < 0 || size%directio.Align != 0 {
		panic(fmt.Sprintf("atomicfile: block size %d is not a positive multiple of %d", size, directio.Align))
	}
	return o.replace(path, func(f *os.File) error {
		w, err := newBlockWriter(f, size)
		if err != nil {
			return err
		}
		return w.finish(fill(w))
	})
}

// directFile is what a block writer writes its blocks to: the temporary
// file opened a second time, for direct writes.
type directFile interface {
	io.WriterAt
	io.Closer
}

// openDirect opens name for direct writes; tests replace it to force the
// page cache's path.
var openDirect = func(name string) (directFile, error) {
	f, err := directio.OpenFile(name, 0, 0)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// blocksInUse is how many blocks a WriteBlocks holds: Write fills one
// while run writes the other.
const blocksInUse = 2

// blockWriter is WriteBlocks' writer: Write fills one of its aligned
// blocks while the goroutine run writes another.
type blockWriter struct {
	f      *os.File            // the temporary file: the tail, and the blocks where direct writes are refused
	bufs   [blocksInUse][]byte // the blocks, from directio.Alloc
	cur    []byte              // the block being filled (its capacity a whole block); nil: none taken
	off    int64               // cur's offset in the file
	err    error               // the first failed write, as Write saw it
	free   chan slot           // blocks to fill: unused or written
	todo   chan block
	exited chan error // run's first error, when it has written every block
}

// block is a filled block and its offset in the file.
type block struct {
	b   []byte
	off int64
}

// slot is a block to fill and the first error of the writes so far.
type slot struct {
	b   []byte
	err error
}

func newBlockWriter(f *os.File, size int) (*blockWriter, error) {
	w := &blockWriter{f: f, free: make(chan slot, blocksInUse), todo: make(chan block, blocksInUse), exited: make(chan error, 1)}
	for i := range w.bufs {
		b, err := directio.Alloc(size)
		if err != nil {
			w.freeBufs()
			return nil, err
		}
		w.bufs[i] = b
		w.free <- slot{b: b}
	}
	d, err := openDirect(f.Name())
	if err != nil && !directio.Refused(err) {
		w.freeBufs()
		return nil, err
	}
	go w.run(d) // d is nil where direct writes are refused
	return w, nil
}

// Write copies p into the blocks, handing each full one to run.
func (w *blockWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n := 0
	for len(p) > 0 {
		if w.cur == nil {
			s := <-w.free
			if s.err != nil {
				w.err = s.err
				return n, s.err
			}
			w.cur = s.b[:0]
		}
		k := copy(w.cur[len(w.cur):cap(w.cur)], p)
		w.cur, p, n = w.cur[:len(w.cur)+k], p[k:], n+k
		if len(w.cur) == cap(w.cur) {
			w.todo <- block{w.cur, w.off}
			w.off += int64(len(w.cur))
			w.cur = nil
		}
	}
	return n, nil
}

// run writes the blocks of todo at their offsets, directly to d while it is
// not nil, and gives each back; after a failure it writes no more. It
// closes d and reports its first error on exited once todo is closed.
func (w *blockWriter) run(d directFile) {
	var err error
	for bl := range w.todo {
		if err == nil {
			d, err = w.writeBlock(d, bl)
		}
		w.free <- slot{b: bl.b[:cap(bl.b)], err: err}
	}
	if d != nil {
		if cerr := d.Close(); err == nil {
			err = cerr
		}
	}
	w.exited <- err
}

// writeBlock writes bl to d, or through the page cache when d is nil or
// refuses it (then from here on: it returns nil for d).
func (w *blockWriter) writeBlock(d directFile, bl block) (directFile, error) {
	if d != nil {
		_, err := d.WriteAt(bl.b, bl.off)
		if err == nil || !directio.Refused(err) {
			return d, err
		}
		d.Close() // its writes so far are in the file; the fsync covers them
		d = nil
	}
	_, err := w.f.WriteAt(bl.b, bl.off)
	return d, err
}

// finish ends the write: after fill's err (nil when it succeeded), it
// hands the aligned part of the last block to run, waits for run, writes
// the rest through the page cache and frees the blocks; it returns the
// first error.
func (w *blockWriter) finish(err error) error {
	if err == nil {
		err = w.err
	}
	var tail block
	if err == nil && len(w.cur) > 0 {
		a := len(w.cur) &^ (directio.Align - 1)
		if a > 0 {
			w.todo <- block{w.cur[:a], w.off}
		}
		tail = block{w.cur[a:], w.off + int64(a)}
	}
	close(w.todo)
	if rerr := <-w.exited; err == nil {
		err = rerr
	}
	if err == nil && len(tail.b) > 0 {
		_, err = w.f.WriteAt(tail.b, tail.off)
	}
	if ferr := w.freeBufs(); err == nil {
		err = ferr
	}
	return err
}

func (w *blockWriter) freeBufs() error {
	var first error
	for i, b := range w.bufs {
		if err := directio.Free(b); err != nil && first == nil {
			first = err
		}
		w.bufs[i] = nil
	}
	return first
}
