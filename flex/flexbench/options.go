// Package flexbench benchmarks flex attention, on the CPU (package flex,
// against the dense masked reference) or on a GPU (package flexcuda, with
// GPU-built block masks), from one set of options and into one report.
// `dflash bench attention` parses its flags into Options, calls Run and
// prints the Report.
//
// Both devices attend over the same problem: the mask's
// arguments are drawn from Options.Seed the same way on both, and the
// useful FLOP rates count the allowed (query, key) pairs in closed form.
// Times are medians of event-timed (GPU) or wall-clock (CPU) passes after
// warm-ups.
package flexbench

import (
	"fmt"

	"dflash/dtype"
	"dflash/flex"
)

// Options describes one benchmark. Fields marked cpu or cuda apply to that
// device only.
type Options struct {
	Device string      // cpu or cuda
	Mask   string      // causal, dflash, document or window
	DType  dtype.DType // cpu: f32 or f64 (default f32); cuda: bf16 or f16 (default bf16)

	Batch, Heads, KVHeads, HeadDim int
	Anchors, BlockSize, Context    int // dflash: anchors per sequence, draft block size, context length
	Seq                            int // causal, document, window: sequence length (queries = keys)
	Window                         int // window: sliding window size
	DocLen                         int // document: length of each packed document
	Block                          int // block-mask q block (the kv block is flex.DefaultBlock)

	Reps, RepsFB int    // timed forward, forward+backward passes; 0: the device's default
	Warmup       int    // untimed passes before each timing; -1: the device's default
	Seed         uint64 // inputs and mask arguments
	ForwardOnly  bool   // time the forward pass only

	Dense        bool // cpu: also time the dense masked reference
	FullSizeMask bool // cpu, dflash: also report the block mask at 512 anchors x 16, context 3072

	BuildReps     int    // cuda: timed GPU block-mask builds
	CacheDir      string // cuda: kernel cache directory ("" : memory only)
	CompileOnly   bool   // cuda: only compile or load the kernels
	CPUBlockMask  bool   // cuda: attend with the CPU-built block mask
	Deterministic bool   // cuda: the backward without atomics
	Save          string // cuda: write one call's inputs and outputs here (safetensors) for bench/flex_peer.py --check
}

// Device defaults of the repetition counts and the storage type.
var defaults = map[string]struct {
	reps, repsFB, warmup int
	dtype                dtype.DType
	dtypes               []dtype.DType
}{
	"cpu":  {3, 3, 1, dtype.F32, []dtype.DType{dtype.F32, dtype.F64}},
	"cuda": {30, 20, 5, dtype.BF16, []dtype.DType{dtype.BF16, dtype.F16}},
}

// normalized fills the device defaults and checks every field, naming the
// flag of a bad one.
func (o Options) normalized() (Options, error) {
	def, ok := defaults[o.Device]
	if !ok {
		return o, fmt.Errorf("--device %q: unknown device (cpu or cuda)", o.Device)
	}
	if o.DType == dtype.Invalid {
		o.DType = def.dtype
	}
	okType := false
	for _, t := range def.dtypes {
		okType = okType || t == o.DType
	}
	if !okType {
		return o, fmt.Errorf("--dtype %v: want %v or %v on %s", o.DType, def.dtypes[0], def.dtypes[1], o.Device)
	}
	if o.Reps == 0 {
		o.Reps = def.reps
	}
	if o.RepsFB == 0 {
		o.RepsFB = def.repsFB
	}
	if o.Warmup == -1 {
		o.Warmup = def.warmup
	}
	if o.BuildReps == 0 {
		o.BuildReps = 1
	}
	if o.Warmup < 0 {
		return o, fmt.Errorf("--warmup %d: must be >= 0 (or -1 for the device's default)", o.Warmup)
	}
	for name, v := range map[string]int{"batch": o.Batch, "heads": o.Heads, "kv-heads": o.KVHeads, "head-dim": o.HeadDim,
		"anchors": o.Anchors, "block-size": o.BlockSize, "context": o.Context, "seq": o.Seq, "window": o.Window,
		"doc-len": o.DocLen, "block": o.Block, "reps": o.Reps, "reps-fb": o.RepsFB, "build-reps": o.BuildReps} {
		if v < 1 {
			return o, fmt.Errorf("--%s %d: must be >= 1", name, v)
		}
	}
	if o.Heads%o.KVHeads != 0 {
		return o, fmt.Errorf("--heads %d is not a multiple of --kv-heads %d", o.Heads, o.KVHeads)
	}
	if o.Save != "" && (o.ForwardOnly || o.CompileOnly) {
		return o, fmt.Errorf("--save writes a forward and backward call: not with --forward-only or --compile-only")
	}
	if o.Device == "cpu" && (o.CompileOnly || o.CPUBlockMask || o.Deterministic || o.Save != "") {
		return o, fmt.Errorf("--compile-only, --cpu-block-mask, --deterministic and --save are for --device cuda")
	}
	return o, nil
}

// Run runs the benchmark o describes on o.Device.
func Run(o Options) (*Report, error) {
	o, err := o.normalized()
	if err != nil {
		return nil, err
	}
	if o.Device == "cpu" {
		return runCPU(o)
	}
	return runCUDA(o)
}

// kvBlock is the block mask's kv block edge on both devices.
const kvBlock = flex.DefaultBlock
