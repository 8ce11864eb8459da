package stepbench

import (
	"dflash/model/dflash"
	"dflash/tensor"
)

// Report is the result of one benchmark (the JSON of `dflash bench step
// --json`). Times are means over the timed steps, in milliseconds.
type Report struct {
	Device  string `json:"device"`
	Threads int    `json:"threads"`       // cpu: GOMAXPROCS
	GPU     string `json:"gpu,omitempty"` // a GPU's name (set by the caller of RunOn)

	Target        string  `json:"target"` // the --target-config name, or "custom"
	TargetShape   Shape   `json:"target_shape"`
	TargetParams  float64 `json:"target_params"`
	TargetLayers  int     `json:"target_layers_run"` // layers 0..deepest tap
	Taps          []int   `json:"taps"`
	DrafterLayers int     `json:"drafter_layers"`
	// DrafterOnly: the target did not run (its hidden states were given).
	DrafterOnly   bool    `json:"drafter_only,omitempty"`
	DrafterParams float64 `json:"drafter_params"`
	// TargetDType is the target's products' dtype: bf16 or fp8.
	TargetDType string `json:"target_dtype"`
	// TapRelErr is, with an FP8 target, each tap's ‖h_fp8 − h_bf16‖/‖h_bf16‖
	// over one batch against the bf16 target of the same weights.
	TapRelErr []float64 `json:"tap_rel_err,omitempty"`
	SeqLen    int       `json:"seq_len"`
	Batch     int       `json:"batch"`
	Anchors   int       `json:"anchors"`
	BlockSize int       `json:"block_size"`
	LossChunk int       `json:"loss_chunk"` // block slots per cross-entropy chunk; 0: the default
	Steps     int       `json:"steps"`
	Warmup    int       `json:"warmup"`

	Phases Phases  `json:"phases_ms"`
	StepMS float64 `json:"step_ms"`     // mean; the phases add up to it
	MinMS  float64 `json:"step_min_ms"` // fastest timed step
	MaxMS  float64 `json:"step_max_ms"` // slowest timed step
	// BlockMaskMS is building the DFlash block mask once, timed apart
	// after each step: the drafter's forward pass builds it, so it is part
	// of Phases.DrafterForward.
	BlockMaskMS float64 `json:"block_mask_ms"`

	TokensPerS  float64 `json:"tokens_per_s"`  // context tokens (batch × seq len) per second
	SamplesPerS float64 `json:"samples_per_s"` // sequences per second

	// PeakHeapBytes is the Go heap's high-water mark during the timed steps
	// (runtime/metrics /memory/classes/heap/objects:bytes, sampled every
	// few milliseconds and at every phase boundary): live data plus the
	// garbage the GC lets accumulate (GOGC). PeakLiveBytes is the largest
	// heap a GC marked live (/gc/heap/live:bytes), the number to compare
	// with the estimate. PeakRSSBytes is the process's resident
	// high-water mark (VmHWM, Linux; 0 elsewhere).
	PeakHeapBytes uint64        `json:"peak_heap_bytes"`
	PeakLiveBytes uint64        `json:"peak_live_bytes"`
	PeakRSSBytes  uint64        `json:"peak_rss_bytes"`
	Memory        dflash.Memory `json:"memory_estimate"` // the estimate checked before allocating
	// PeakDeviceBytes, on a GPU (Env.Measure), is the most device memory
	// the allocator held over the timed steps (the peaks start again after
	// the warm-up, as the peer's torch.cuda.reset_peak_memory_stats; the
	// first step's compilation and GEMM tuning buffers are not in them;
	// what is held then stays counted): parameters, optimizer state, the step arena,
	// kernel buffers; mapped ranges included: torch's max_memory_reserved);
	// PeakDeviceInUseBytes the most of it in use at once, the step arena's
	// bytes handed out at that moment without its slack, and without the
	// allocator's cache (torch's max_memory_allocated). StepArenaBytes is
	// the most one step's storage took at
	// once (allocated and not yet freed). StepArenaReservedBytes is what
	// the step arena holds from the device after the timed steps, and
	// StepArenaMostReservedBytes the most it ever held: in chunks, the first
	// step's, before they are consolidated into one; in place
	// (StepArenaInPlace: one range of addresses backed as it grows, the
	// driver's virtual memory management), the reserve itself, the
	// high-water mark rounded up to the growth step.
	PeakDeviceBytes            int64 `json:"peak_device_bytes,omitempty"`
	PeakDeviceInUseBytes       int64 `json:"peak_device_in_use_bytes,omitempty"`
	StepArenaBytes             int64 `json:"step_arena_bytes,omitempty"`
	StepArenaReservedBytes     int64 `json:"step_arena_reserved_bytes,omitempty"`
	StepArenaMostReservedBytes int64 `json:"step_arena_most_reserved_bytes,omitempty"`
	StepArenaInPlace           bool  `json:"step_arena_in_place,omitempty"`
	// RunOn: SetupMS is making the models, placing them on the device and
	// the optimizer; FirstStepMS the first step, kernel compilation (or
	// loading from the cache) included.
	SetupMS float64 `json:"setup_ms,omitempty"`
	// Ops (--profile) is the device time of every kind of op in one more
	// step after the timed ones, by phase, largest first.
	Ops         []tensor.OpTime `json:"ops,omitempty"`
	FirstStepMS float64         `json:"first_step_ms,omitempty"`
	// PerStep, on a GPU, is the host<->device copies and host waits of a
	// timed step, on average (its inputs' uploads, the phase timing's
	// synchronisations, the clipping norm, the loss and metrics read back),
	// as the device counts them (Env.Measure).
	PerStep any `json:"per_step,omitempty"`
	// Replays counts what tensor.Backend.Replay did for the timed steps' regions
	// (the target's pass, the drafter's forward and backward): on the CUDA
	// backend "launched" for every region of every timed step once its
	// graphs are captured; empty on a backend that does not replay.
	Replays map[string]int `json:"replays,omitempty"`

	FLOPs      dflash.FLOPs `json:"flops"` // per step, mean over the timed steps
	PeakTFLOPS float64      `json:"peak_tflops"`
	PeakSource string       `json:"peak_source"`
	MFU        MFU          `json:"mfu"`

	Loss float64 `json:"loss"` // the last step's loss (random weights: about ln(vocab))
}

// Shape is the part of the target's config that sets the step's size.
type Shape struct {
	Hidden       int  `json:"hidden_size"`
	Intermediate int  `json:"intermediate_size"`
	Layers       int  `json:"num_hidden_layers"`
	Heads        int  `json:"num_attention_heads"`
	KVHeads      int  `json:"num_key_value_heads"`
	HeadDim      int  `json:"head_dim"`
	Vocab        int  `json:"vocab_size"`
	Tied         bool `json:"tie_word_embeddings"`
}

// Phases are the mean times of a step's phases, in milliseconds.
type Phases struct {
	InputAssembly  float64 `json:"input_assembly"` // batch, anchors, blocks (labels, weights, positions)
	TargetForward  float64 `json:"target_forward"` // no gradients, stops after the deepest tap
	DrafterForward float64 `json:"drafter_forward"`
	Backward       float64 `json:"backward"`
	Optimizer      float64 `json:"optimizer"` // gradient clipping, AdamW, zeroing the gradients
}

// Sum returns the phases' total.
func (p Phases) Sum() float64 {
	return p.InputAssembly + p.TargetForward + p.DrafterForward + p.Backward + p.Optimizer
}

// MFU is achieved FLOP/s over the peak: the whole step, the target forward,
// and the drafter's forward and backward together (the chunked
// cross-entropy computes the LM head's input gradient during the forward
// pass, so the two are only meaningful together).
type MFU struct {
	Step          float64 `json:"step"`
	TargetForward float64 `json:"target_forward"`
	DrafterTrain  float64 `json:"drafter_forward_backward"`
}
