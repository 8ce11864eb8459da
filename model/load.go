package model

import (
	"cmp"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"dflash/safetensors"
	"dflash/tensor"
)

// Load reads an HF model directory: config.json and its safetensors
// weights (single file or sharded with an index), converting BF16, F16, F32
// and F64 to float32. A missing tensor, a shape mismatch, another dtype (an
// integer or 8-bit tensor), an unsupported architecture or weights larger
// than the memory available is an error naming the tensor, file or field;
// tensors the model does not use are logged and ignored.
func Load(dir string) (*Model, error) { return LoadOn(dir, nil) }

// LoadOn is Load with the model frozen on backend b: the weights go
// straight into b's parameter storage (Backend.AllocParams), read as
// LoadWith reads them, so that on a device the host never holds the whole
// model. The memory is checked where the parameters go on the host
// (Backend.HostParams: the CPU's); on a device its allocator checks it.
// With b nil it is Load.
func LoadOn(dir string, b tensor.Backend[float32]) (*Model, error) {
	m, _, err := LoadWith(dir, b, LoadOptions{})
	return m, err
}

// LoadOptions tunes LoadWith; the zero value is LoadOn's.
type LoadOptions struct {
	// Readers is the most goroutines that read the shards at once (0:
	// DefaultReaders).
	Readers int
	// Piece is the most bytes one read brings in (0: DefaultPiece): a
	// larger weight is read, and written to the backend, in pieces.
	Piece int64
	// FP8 holds the layers' matrices (Model.Matrices) in FP8 E4M3 with a
	// scale per output channel, quantized on the backend as they are
	// written (tensor.Arena.AllocOnFP8): a frozen target whose forward
	// runs its products in FP8. The backend must be able to
	// (tensor.FP8Params: CUDA).
	FP8 bool
}

// DefaultPiece is the most bytes LoadOn reads at once: large sequential
// reads, and pieces of the largest weights (the embeddings) in flight
// while the rest is read.
const DefaultPiece = 32 << 20

// DefaultReaders returns how many goroutines LoadOn reads with:
// min(8, 2·GOMAXPROCS), enough to keep a fast disk or the page cache busy.
func DefaultReaders() int { return min(8, 2*runtime.GOMAXPROCS(0)) }

// LoadStats is what a load did, for a run's start-up report.
type LoadStats struct {
	Bytes   int64         // weight bytes read from the shards
	Readers int           // goroutines that read them
	Elapsed time.Duration // the whole load, config.json to the last write
	// Write is the part of Elapsed the calling goroutine spent writing to
	// the backend (on CUDA: the copies into staging memory and their
	// queueing; the device's transfers overlap the reads).
	Write time.Duration
}

// LoadWith is LoadOn with options, and says what the load did. Every
// weight is checked (present, of its shape, a float dtype) before the
// parameters are allocated; then o.Readers goroutines read the weights'
// bytes in pieces of at most o.Piece bytes, in the order they lie in
// their shards, and the calling goroutine (a device's worker thread) writes
// each piece as it arrives with Arena.SetParamBytes: the file's bytes as
// they are when b stores their dtype (bf16 on CUDA), converted otherwise.
// At most 2·o.Readers pieces are in memory at once. A read that fails is
// an error naming the file and the tensor (the first in file order when
// several fail); the reads still under way are abandoned.
func LoadWith(dir string, b tensor.Backend[float32], o LoadOptions) (*Model, LoadStats, error) {
	began := time.Now()
	if b == nil {
		b = tensor.NewCPU[float32](0)
	}
	if o.Readers <= 0 {
		o.Readers = DefaultReaders()
	}
	if o.Piece <= 0 {
		o.Piece = DefaultPiece
	}
	st := LoadStats{Readers: o.Readers}
	c, err := ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, st, err
	}
	m, err := declare(c)
	if err == nil && b.HostParams() {
		err = checkMemory(c)
	}
	if err != nil {
		return nil, st, fmt.Errorf("%s: %w", filepath.Join(dir, "config.json"), err)
	}
	w, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, st, err
	}
	defer w.Close()
	pieces, err := planPieces(m, w, o.Piece)
	if err != nil {
		return nil, st, err
	}
	for _, p := range pieces {
		st.Bytes += p.size
	}
	if o.FP8 {
		if err := m.arena.AllocOnFP8(b, m.Matrices()); err != nil {
			return nil, st, fmt.Errorf("%s: %w", dir, err)
		}
	} else {
		m.arena.AllocOn(b, false)
	}
	st.Write, err = readPieces(pieces, o.Readers, func(p piece, raw []byte) {
		m.arena.SetParamBytes(b, p.param, int(p.off/int64(p.w.DType.Size())), p.w.DType, raw)
	})
	if err != nil {
		return nil, st, err
	}
	warnUnused(dir, m, w)
	st.Elapsed = time.Since(began)
	return m, st, nil
}

// piece is bytes [off, off+size) of parameter param's weight w.
type piece struct {
	param     int
	w         safetensors.RawWeight
	off, size int64
}

// planPieces checks every parameter's weight in w (Dir.RawWeight: the
// first failure in HF order is the error) and cuts each into pieces of at
// most limit bytes (whole rows of a matrix, else whole elements; a row
// larger than limit is a piece), ordered by shard and position in it.
func planPieces(m *Model, w *safetensors.Dir, limit int64) ([]piece, error) {
	var ps []piece
	for i, p := range m.Params() {
		rw, err := w.RawWeight(p.Name, p.Shape)
		if err != nil {
			return nil, err
		}
		// Whole rows a piece, so that a matrix held in FP8 is quantized
		// row by row as its pieces arrive.
		row := int64(rw.DType.Size())
		if len(p.Shape) == 2 {
			row *= int64(p.Shape[1])
		}
		step := row * max(1, limit/row)
		for off := int64(0); off < rw.Size(); off += step {
			ps = append(ps, piece{param: i, w: rw, off: off, size: min(step, rw.Size()-off)})
		}
	}
	slices.SortStableFunc(ps, func(a, b piece) int {
		return cmp.Or(cmp.Compare(a.w.File(), b.w.File()), cmp.Compare(a.w.Offset()+a.off, b.w.Offset()+b.off))
	})
	return ps, nil
}

// readPieces reads ps with readers goroutines and calls write for each
// piece as it arrives, on the calling goroutine, with its bytes (reused
// once write returns), in no set order; 2·readers buffers go round. It
// returns the time spent in write and the error of the first failed piece
// in ps's order: once a piece fails, no piece is written, the pieces after
// it are dropped, and those before it are still read, so that the error
// does not depend on which reader was faster.
func readPieces(ps []piece, readers int, write func(piece, []byte)) (time.Duration, error) {
	nbuf := 2 * readers
	// failed is the index of the first failed piece so far (len(ps): none);
	// only this goroutine stores it.
	var failed atomic.Int64
	failed.Store(int64(len(ps)))
	// gone ends the reads when this goroutine returns, a write that panics
	// (a device out of memory) included: no buffer comes back after it.
	gone := make(chan struct{})
	defer close(gone)
	jobs := make(chan int)
	go func() {
		defer close(jobs)
		for i := range ps {
			if int64(i) > failed.Load() {
				return
			}
			select {
			case jobs <- i:
			case <-gone:
				return
			}
		}
	}()
	type read struct {
		i   int
		buf []byte
		err error
	}
	// Every buffer is in the pool, with a reader, or in out: sends to out
	// never block.
	out := make(chan read, nbuf)
	pool := make(chan []byte, nbuf)
	for range nbuf {
		pool <- nil
	}
	var wg sync.WaitGroup
	for range readers {
		wg.Go(func() {
			for i := range jobs {
				if int64(i) > failed.Load() {
					continue
				}
				var buf []byte
				select {
				case buf = <-pool:
				case <-gone:
					return
				}
				p := ps[i]
				if int64(cap(buf)) < p.size {
					buf = make([]byte, p.size)
				}
				buf = buf[:p.size]
				out <- read{i, buf, p.w.ReadAt(buf, p.off)}
			}
		})
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	var writing time.Duration
	var firstErr error
	for r := range out {
		switch {
		case r.err != nil:
			if int64(r.i) < failed.Load() {
				failed.Store(int64(r.i))
				firstErr = r.err
			}
		case firstErr == nil:
			t := time.Now()
			write(ps[r.i], r.buf)
			writing += time.Since(t)
		}
		pool <- r.buf
	}
	return writing, firstErr
}

// warnUnused logs the tensors of w that m does not use (a tied LM head's
// copy aside).
func warnUnused(dir string, m *Model, w *safetensors.Dir) {
	used := map[string]bool{}
	for _, p := range m.Params() {
		used[p.Name] = true
	}
	var unused []string
	for _, n := range w.Names() {
		if !used[n] && !(n == "lm_head.weight" && m.Config.TieWordEmbeddings) {
			unused = append(unused, n)
		}
	}
	if len(unused) > 0 {
		slog.Warn("model: tensors not used", "dir", dir, "count", len(unused), "first", unused[0])
	}
}
