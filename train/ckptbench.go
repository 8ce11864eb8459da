package train

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"time"

	"dflash/tensor"
)

// CheckpointWrite is one timed write of a CheckpointBench.
type CheckpointWrite struct {
	Bytes   int64   `json:"bytes"` // the checkpoint's files, all of them
	Seconds float64 `json:"seconds"`
	GBPerS  float64 `json:"gb_per_s"` // as a run's "checkpoint written" line reports it
}

// benchRowWidth is the width of the random checkpoint's matrices: 4096, a
// hidden size of the 8B target.
const benchRowWidth = 4096

// CheckpointBench writes checkpoints of random parameters the way a run's
// background write does, to time them (dflash bench write).
type CheckpointBench struct {
	s      *paramSnapshot
	seed   uint64
	writes int
}

// NewCheckpointBench returns a bench whose checkpoint holds bytes/12
// random parameters (four bytes of value and eight of moments each, drawn
// from seed) in host memory, in matrices of benchRowWidth columns and at
// most benchRowWidth rows, the last one shorter.
func NewCheckpointBench(bytes int64, seed uint64) (*CheckpointBench, error) {
	n := bytes / 12
	if n < 1 || int64(int(n)) != n {
		return nil, fmt.Errorf("checkpoint of %d bytes: want at least 12 (one parameter), and parameters that an int counts", bytes)
	}
	return &CheckpointBench{s: randomSnapshot(int(n), seed), seed: seed}, nil
}

// Write writes the checkpoint into a fresh directory under dir as a run's
// background write does (writeCheckpoint from a host snapshot: the model
// and optimizer tensors, config and trainer state, checksums, renames),
// removes it, and returns its size and the time of the write.
func (b *CheckpointBench) Write(dir string) (CheckpointWrite, error) {
	outDir, err := os.MkdirTemp(dir, "dflash-bench-write-")
	if err != nil {
		return CheckpointWrite{}, err
	}
	b.writes++
	t0 := time.Now()
	w, err := writeCheckpoint(outDir, nil, b.s, TrainerState{Step: b.writes, Seed: b.seed}, 0)
	took := time.Since(t0)
	if rerr := os.RemoveAll(outDir); err == nil {
		err = rerr
	}
	if err != nil {
		return CheckpointWrite{}, err
	}
	return CheckpointWrite{Bytes: w.bytes, Seconds: took.Seconds(), GBPerS: gbPerS(w.bytes, took)}, nil
}

// randomSnapshot returns a snapshot of n parameters in benchRowWidth-wide
// matrices whose values and moments are random (uniform in [-1, 1), the
// second moments in [0, 1)), filled on every CPU.
func randomSnapshot(n int, seed uint64) *paramSnapshot {
	s := &paramSnapshot{values: make([]float32, n), m: make([]float32, n), v: make([]float32, n), steps: 1,
		config: tensor.AdamW{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}}
	const most = benchRowWidth * benchRowWidth
	for off, i := 0, 0; off < n; i++ {
		k := min(most, n-off)
		shape := []int{k}
		if k%benchRowWidth == 0 {
			shape = []int{k / benchRowWidth, benchRowWidth}
		}
		s.layout = append(s.layout, paramSpan{name: fmt.Sprintf("layers.%d.weight", i), shape: shape, off: off})
		off += k
	}
	const piece = 1 << 20
	var wg sync.WaitGroup
	work := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for off := range work {
				r := rand.New(rand.NewPCG(seed, uint64(off)))
				for j := off; j < min(off+piece, n); j++ {
					s.values[j] = 2*r.Float32() - 1
					s.m[j] = 2*r.Float32() - 1
					s.v[j] = r.Float32()
				}
			}
		})
	}
	for off := 0; off < n; off += piece {
		work <- off
	}
	close(work)
	wg.Wait()
	return s
}
