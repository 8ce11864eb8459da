package flexbench

import (
	"dflash/flex"
	"dflash/flex/flexcuda"
)

// Report is the result of one benchmark, the same schema on both devices
// (the JSON of `dflash bench attention --json`). Times are medians in
// milliseconds; useful TFLOP/s count allowed pairs only: 4·D flops per pair
// forward, 14·D forward+backward.
type Report struct {
	Device        string    `json:"device"`            // cpu or cuda
	GPU           string    `json:"gpu,omitempty"`     // cuda: the device name
	Threads       int       `json:"threads,omitempty"` // cpu: GOMAXPROCS
	Mask          string    `json:"mask"`
	DType         string    `json:"dtype"`
	Dims          flex.Dims `json:"dims"`
	Spec          string    `json:"spec,omitempty"` // cuda: the kernels' specialisation key
	Reps          [2]int    `json:"reps"`           // forward, forward+backward
	ForwardMS     float64   `json:"forward_ms"`
	FwdBwdMS      float64   `json:"forward_backward_ms"`
	ForwardTFLOPS float64   `json:"forward_tflops"`
	FwdBwdTFLOPS  float64   `json:"forward_backward_tflops"`
	AllowedPairs  float64   `json:"allowed_pairs"` // over batch and query heads
	Density       float64   `json:"density"`
	BlockDensity  float64   `json:"block_density"`
	BlockMask     BlockMask `json:"block_mask"`
	// DFlashFullSize is the block mask at 512 anchors x 16, context 3072
	// (cpu, dflash, Options.FullSizeMask).
	DFlashFullSize *BlockMask `json:"block_mask_dflash_full_size,omitempty"`
	Dense          *Dense     `json:"dense,omitempty"`   // cpu, Options.Dense
	Compile        *Compile   `json:"compile,omitempty"` // cuda
}

// BlockMask describes the block mask the attention used and its builds.
type BlockMask struct {
	Source     string  `json:"source"`       // cpu, gpu-dflash or gpu-generic
	CPUBuildMS float64 `json:"cpu_build_ms"` // flex.NewBlockMask
	GPUBuildMS float64 `json:"gpu_build_ms"` // cuda: median of Options.BuildReps
	ListsMatch bool    `json:"lists_match"`  // cuda: the GPU lists equal the CPU's (cpu: true)
	Blocks     int     `json:"blocks"`
	Partial    int     `json:"partial"`
	Full       int     `json:"full"`
	Empty      int     `json:"empty"`
	IndexBytes int     `json:"index_bytes"`
	// cpu: bytes allocated by the build, the partial fractions of interval
	// evaluation alone and of exact (per-element) classification, and the
	// exact build's time.
	AllocBytes              uint64  `json:"alloc_bytes,omitempty"`
	IntervalPartialFraction float64 `json:"interval_partial_fraction,omitempty"`
	ExactPartialFraction    float64 `json:"exact_partial_fraction,omitempty"`
	ExactBuildMS            float64 `json:"exact_build_ms,omitempty"`
}

// Dense is the dense masked reference on the CPU: its times, its speedup
// over it (dense ms / sparse ms) and the largest difference from it.
type Dense struct {
	MaskMS         float64 `json:"mask_ms"` // building the dense mask (not in the timed passes)
	ForwardMS      float64 `json:"forward_ms"`
	FwdBwdMS       float64 `json:"forward_backward_ms"`
	ForwardSpeedup float64 `json:"forward_speedup"`
	FwdBwdSpeedup  float64 `json:"forward_backward_speedup"`
	ForwardMaxDiff float64 `json:"forward_max_abs_diff"`
	FwdBwdMaxDiff  float64 `json:"forward_backward_max_abs_diff"` // over dQ, dK, dV
}

// Compile describes how the GPU kernels were had.
type Compile struct {
	CacheDir  string                `json:"cache_dir"`
	PrepareMS float64               `json:"prepare_ms"` // wall: compile or disk load, module load
	FromDisk  bool                  `json:"from_disk"`
	Compiles  int64                 `json:"compiles"`
	Kernels   []flexcuda.KernelInfo `json:"kernels"`
}

// newReport starts the report of c under o: what was run, the allowed
// pairs and the density.
func (c *attnCase) newReport(o Options) *Report {
	d := c.dims
	return &Report{Device: o.Device, Mask: o.Mask, DType: o.DType.String(), Dims: d, Reps: [2]int{o.Reps, o.RepsFB},
		AllowedPairs: c.pairs * float64(d.HeadsQ), Density: c.pairs / (float64(d.Batch) * float64(d.LenQ) * float64(d.LenKV))}
}

// finish fills the useful TFLOP/s from the times and the allowed pairs.
func (r *Report) finish() {
	if r.ForwardMS > 0 {
		r.ForwardTFLOPS = 4 * float64(r.Dims.HeadDim) * r.AllowedPairs / r.ForwardMS / 1e9
	}
	if r.FwdBwdMS > 0 {
		r.FwdBwdTFLOPS = 14 * float64(r.Dims.HeadDim) * r.AllowedPairs / r.FwdBwdMS / 1e9
	}
}
