package train

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

// Buffer is a range of float32 elements a Collective reduces in place: a
// range of a flat gradient (Params.GradRange), tensor.Host[float32] in host
// memory or a device's storage. A Collective rejects a Buffer of a kind it
// cannot reach.
type Buffer interface {
	// Len returns the number of float32 elements.
	Len() int
}
