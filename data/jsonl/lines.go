package jsonl

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Line is one non-blank line of an input file.
type Line struct {
	File string
	N    int    // 1-based line number
	Text []byte // without the line ending
}

// Lines streams the non-blank lines of several files in order.
type Lines struct {
	paths  []string
	next   int // index of the next file to open
	file   *os.File
	dec    io.Closer // decompressor to close with the file, if any
	r      *bufio.Reader
	name   string
	n      int
	blank  int
	read   atomic.Int64 // compressed bytes consumed, all files
	closed bool
}

// OpenLines checks that every path is a readable regular file and returns a
// stream of their lines.
func OpenLines(paths []string) (*Lines, error) {
	if len(paths) == 0 {
		return nil, errors.New("no input files")
	}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err // names the path
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s is not a regular file", p)
		}
	}
	return &Lines{paths: paths}, nil
}

// TotalBytes is the summed size of the files on disk (compressed).
func TotalBytes(paths []string) int64 {
	var n int64
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			n += st.Size()
		}
	}
	return n
}

// BytesRead is how many bytes of the files (compressed) were consumed; it
// may be called from another goroutine.
func (l *Lines) BytesRead() int64 { return l.read.Load() }

// Blank is the number of blank lines skipped so far.
func (l *Lines) Blank() int { return l.blank }

// Files is the number of files opened so far.
func (l *Lines) Files() int { return l.next }

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n.Add(int64(k))
	return k, err
}

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

func (l *Lines) open(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	raw := bufio.NewReaderSize(countingReader{f, &l.read}, 1<<20)
	head, _ := raw.Peek(4)
	var r io.Reader = raw
	l.dec = nil
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		gz, err := gzip.NewReader(raw)
		if err != nil {
			f.Close()
			return fmt.Errorf("%s: gzip: %w", path, err)
		}
		r, l.dec = gz, gz
	case bytes.HasPrefix(head, zstdMagic):
		zr, err := zstd.NewReader(raw, zstd.WithDecoderConcurrency(1))
		if err != nil {
			f.Close()
			return fmt.Errorf("%s: zstd: %w", path, err)
		}
		r, l.dec = zr, zstdCloser{zr}
	}
	l.file, l.name, l.n = f, path, 0
	l.r = bufio.NewReaderSize(r, 1<<20)
	if l.dec == nil {
		l.r = raw
	}
	return nil
}

type zstdCloser struct{ d *zstd.Decoder }

func (z zstdCloser) Close() error { z.d.Close(); return nil }

func (l *Lines) closeFile() {
	if l.dec != nil {
		l.dec.Close()
		l.dec = nil
	}
	if l.file != nil {
		l.file.Close()
		l.file = nil
	}
}

// Next returns the next non-blank line; io.EOF after the last file. The
// returned Text is valid until the next call.
func (l *Lines) Next() (Line, error) {
	for !l.closed {
		if l.file == nil {
			if l.next == len(l.paths) {
				l.closed = true
				break
			}
			if err := l.open(l.paths[l.next]); err != nil {
				return Line{}, err
			}
			l.next++
		}
		b, err := l.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) { // a long line: gather it
			long := append([]byte(nil), b...)
			for errors.Is(err, bufio.ErrBufferFull) {
				b, err = l.r.ReadSlice('\n')
				long = append(long, b...)
			}
			b = long
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return Line{}, fmt.Errorf("%s: after line %d: %w", l.name, l.n, err)
		}
		if len(b) > 0 {
			l.n++
			text := bytes.TrimRight(b, "\r\n")
			if len(bytes.TrimSpace(text)) == 0 {
				l.blank++
			} else {
				return Line{File: l.name, N: l.n, Text: text}, nil
			}
		}
		if errors.Is(err, io.EOF) {
			l.closeFile()
		}
	}
	return Line{}, io.EOF
}

// Close releases the open file, if any.
func (l *Lines) Close() error {
	l.closeFile()
	l.closed = true
	return nil
}
