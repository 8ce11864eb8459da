package tensorcuda

import (
	"encoding/binary"
	"math"

	"dflash/gpu"
	"dflash/tensor"
)

// SumSquares queues partial[b] = Σ x[i]² (fp64) over block b's share of the
// n fp32 elements of x and returns the number of blocks; partial must hold
// MaxSumBlocks float64 values.
func (o *Ops) SumSquares(x gpu.Buffer, n int64, partial gpu.Buffer) (int, error) {
	need("SumSquares", "x", x, n, 4)
	need("SumSquares", "partial", partial, int64(o.MaxSumBlocks()), 8)
	if n == 0 {
		return 0, nil
	}
	grid := o.strided(n)
	return int(grid.X), o.launch(o.begin(kSumSq).ptr("x", x).i64("n", n).ptr("partial", partial), grid, threads)
}

// MaxSumBlocks is the most blocks SumSquares launches.
func (o *Ops) MaxSumBlocks() int { return max(o.sms, 1) * wavesPerSM }

// SumSquares returns Σ s[i]² of fp32 storage s (a flat gradient: its
// squared L2 norm), summed in float64: the kernel's per-block sums
// (Ops.SumSquares), read back (waiting for the device) and added on the
// host in block order.
func (b *Backend) SumSquares(s tensor.Storage[float32]) float64 {
	x := b.buf(s, "SumSquares input")
	f32s("SumSquares", x)
	if b.partial.Size == 0 {
		b.partial = b.alloc(int64(8*b.f32.MaxSumBlocks()), true, false)
	}
	end := b.span("sum of squares", 0, x.n)
	nb, err := b.f32.SumSquares(x.Buffer(), int64(x.n), b.partial)
	must("SumSquares", err)
	end()
	if nb == 0 {
		return 0
	}
	raw := make([]byte, 8*nb)
	must("SumSquares", b.mem.download(raw, gpu.Buffer{Ptr: b.partial.Ptr, Size: int64(len(raw))}))
	var sum float64
	for i := range nb {
		sum += math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	return sum
}
