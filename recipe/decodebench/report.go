package decodebench

import "dflash/tensor"

// Report is the result of one benchmark (the JSON of `dflash bench decode
// --json`). Times are in milliseconds, bytes in bytes.
type Report struct {
	Device  string `json:"device"`
	Threads int    `json:"threads,omitempty"` // cpu: GOMAXPROCS
	GPU     string `json:"gpu,omitempty"`     // a GPU's name (set by the caller of RunOn)

	Target        string  `json:"target"` // the --target name, or "custom"
	TargetParams  float64 `json:"target_params"`
	TargetLayers  int     `json:"target_layers"`
	DrafterLayers int     `json:"drafter_layers"`
	Taps          []int   `json:"taps"`
	DrafterParams float64 `json:"drafter_params"` // with fc, without the target's embedding and LM head
	Context       int     `json:"context"`        // positions in the cache before each pass
	BlockSize     int     `json:"block_size"`
	Reps          int     `json:"reps"`
	Warmup        int     `json:"warmup"`
	DryRun        bool    `json:"dry_run,omitempty"`

	// WeightDType and KVDType are the element types the byte counts use:
	// the placed weights' and the caches' storage (a dry run: the
	// device's, bf16 on cuda).
	WeightDType string `json:"weight_dtype"`
	KVDType     string `json:"kv_dtype"`
	// HBMPeak is the peak memory bandwidth the bounds divide by, bytes/s
	// (0: unknown, no bounds), and where it comes from.
	HBMPeak       float64 `json:"hbm_peak_bytes_per_s"`
	HBMPeakSource string  `json:"hbm_peak_source"`
	// Timing says how each repetition was timed (events on the GPU, the
	// host's clock on the CPU).
	Timing string `json:"timing,omitempty"`
	// SetupMS is making the models, placing them and prefilling the
	// context.
	SetupMS float64 `json:"setup_ms,omitempty"`

	Phases []Phase `json:"phases"` // decode, verify, propose

	// SpeedupFormula is how Speedups follow from the phases' times
	// (ImpliedSpeedup).
	SpeedupFormula string    `json:"speedup_formula"`
	Speedups       []Speedup `json:"speedups"`

	// Ops (Options.Profile) is the device time of every kind of op in one
	// more run of each pass, by pass, largest first.
	Ops []tensor.OpTime `json:"ops,omitempty"`
}

// Phase is one pass: its size, its times over the timed repetitions, the
// bytes it reads at least and its bound.
type Phase struct {
	Name      string `json:"name"`      // Decode, Verify or Propose
	Tokens    int    `json:"tokens"`    // tokens the pass runs
	Positions int    `json:"positions"` // cache positions it attends to (the context and its own)

	MedianMS float64 `json:"median_ms"`
	MinMS    float64 `json:"min_ms"`

	WeightBytes int64   `json:"weight_bytes"` // weights read whole (the embedding's gathered rows not counted)
	KVBytes     int64   `json:"kv_bytes"`     // keys and values of the attended positions
	Bytes       int64   `json:"bytes"`        // their sum
	BoundMS     float64 `json:"bound_ms"`     // Bytes / HBMPeak (0: unknown peak)
	// Ratio is MedianMS / BoundMS (0 without both).
	Ratio float64 `json:"ratio_to_bound"`
	// Launches is the device's launches in one more run of the pass after
	// the timed ones (gpu.Device.Launches: kernels, GEMMs, graphs); absent
	// where the device does not count them.
	Launches int64 `json:"launches,omitempty"`
}

// Speedup is the implied speedup at an acceptance length, from the
// measured medians and from the bounds.
type Speedup struct {
	Tau      float64 `json:"tau"`
	Measured float64 `json:"measured"` // 0 in a dry run
	Bound    float64 `json:"bound"`    // 0 without a peak
}

// Phase returns the phase named name (Decode, Verify, Propose), or nil.
func (r *Report) Phase(name string) *Phase {
	for i := range r.Phases {
		if r.Phases[i].Name == name {
			return &r.Phases[i]
		}
	}
	return nil
}

// finish fills the bounds, ratios and speedups from the bytes, times and
// peak.
func (r *Report) finish() {
	for i := range r.Phases {
		p := &r.Phases[i]
		if r.HBMPeak > 0 {
			p.BoundMS = float64(p.Bytes) / r.HBMPeak * 1e3
		}
		if p.BoundMS > 0 && p.MedianMS > 0 {
			p.Ratio = p.MedianMS / p.BoundMS
		}
	}
	d, v, pr := r.Phase(Decode), r.Phase(Verify), r.Phase(Propose)
	r.SpeedupFormula = SpeedupFormula
	r.Speedups = r.Speedups[:0]
	for _, tau := range Taus {
		r.Speedups = append(r.Speedups, Speedup{Tau: tau, Measured: ImpliedSpeedup(tau, d.MedianMS, pr.MedianMS, v.MedianMS),
			Bound: ImpliedSpeedup(tau, d.BoundMS, pr.BoundMS, v.BoundMS)})
	}
}
