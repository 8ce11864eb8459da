// Package testlog gives tests what code writes from several goroutines at
// once (its log/slog records, its progress lines) as one text.
package testlog

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
)

// Buffer is a bytes.Buffer that many goroutines may write at once; String
// returns all they wrote so far.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger returns a text logger that writes into b.
func (b *Buffer) Logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// Capture sends the default logger into a new Buffer until t ends and
// returns the Buffer.
func Capture(t testing.TB) *Buffer {
	b := &Buffer{}
	old := slog.Default()
	slog.SetDefault(b.Logger())
	t.Cleanup(func() { slog.SetDefault(old) })
	return b
}
