package train

import "fmt"

// Collective is one rank's part in a group of ranks that train one model
// together, data parallel (design contract 9): each rank computes the
// gradient of its share of every global batch, and the collective sums
// them. Implementations: LocalGroup (goroutines of one process exchanging
// through memory, for the CPU and for tests) and, on GPUs, one over an NCCL
// communicator whose Buffers are ranges of a device's flat gradient.
//
// Every rank calls the same collectives in the same order with buffers of
// the same length. A rank that does not take part (it failed, hangs or
// left) makes the others' calls fail with an error naming it within the
// collective's timeout; after a failure the group is unusable.
type Collective interface {
	// Rank returns this rank, 0..Size()-1.
	Rank() int
	// Size returns the number of ranks.
	Size() int
	// AllReduceSum replaces x on every rank by the element-wise sum over all
	// ranks of their x, the same bits on every rank.
	AllReduceSum(x Buffer) error
	// AllReduceFloat64 replaces the host values x on every rank by their
	// element-wise sum over all ranks, the same bits on every rank (losses,
	// metrics, token counts).
	AllReduceFloat64(x []float64) error
}

// Buffer is a range of float32 elements a Collective reduces in place:
// HostBuffer in host memory, or a device range of a GPU collective's own
// type. A Collective rejects a Buffer of a kind it cannot reach.
type Buffer interface {
	// Len returns the number of float32 elements.
	Len() int
}

// HostBuffer is a Buffer in host memory: the concatenation of its
// segments (a range of a flat gradient that spans several parameters).
type HostBuffer [][]float32

// Len returns the total number of elements of the segments.
func (h HostBuffer) Len() int {
	n := 0
	for _, s := range h {
		n += len(s)
	}
	return n
}

// GradRanger is a Device whose flat gradient (the parameters' gradients
// concatenated in order, the layout of a parameter arena) a Collective can
// reach, one contiguous range at a time. Run needs it of Hooks.Device when
// Hooks.Collective has more than one rank.
type GradRanger interface {
	// GradRange returns elements [lo, hi) of the flat gradient.
	GradRange(lo, hi int) Buffer
}

// hostGrads returns ranges of the flat gradient of params, which need not
// share one buffer: a range is the list of the pieces of each parameter's
// Grad that it covers.
func hostGrads(params []*Param) func(lo, hi int) Buffer {
	return func(lo, hi int) Buffer {
		var out HostBuffer
		off := 0
		for _, p := range params {
			a, b := max(lo, off), min(hi, off+len(p.Grad))
			if a < b {
				out = append(out, p.Grad[a-off:b-off])
			}
			off += len(p.Grad)
		}
		if lo < 0 || hi > off || lo > hi {
			panic(fmt.Sprintf("train: gradient range [%d, %d) outside [0, %d)", lo, hi, off))
		}
		return out
	}
}
