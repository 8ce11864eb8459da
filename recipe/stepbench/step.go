package stepbench

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	"dflash/flex"
	"dflash/internal/cpufeat"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/tensor"
	"dflash/train"
)

// promptLen returns the length of the non-assistant prefix of every
// benchmark sequence of seqLen tokens (loss mask 0): an eighth.
func promptLen(seqLen int) int { return seqLen / 8 }

// candidates returns the anchor candidates of a benchmark sequence: the
// positions t >= promptLen with t+1 < seqLen (dflash.Candidates).
func candidates(seqLen int) int { return seqLen - 1 - promptLen(seqLen) }

// drafterConfig returns the drafter of o, made as the training recipe
// makes it (recipe.DrafterConfig, which model/ cannot import: it depends on
// the trainer) without its options the benchmark lacks (gamma, MLP width:
// their defaults): the target's attention shape, o.DrafterLayers layers,
// o.Taps or the recipe's spread. The mask token differs deliberately: the
// benchmark has no tokenizer for recipe.MaskToken to ask (its data is
// random ids below the mask), so it is the last id of the vocabulary. Its
// sequences are all o.SeqLen long: nothing is padded, no pad token
// (recipe.PadToken) is needed, and it holds nothing out (recipe.Split).
func drafterConfig(o Options) *dflash.Config {
	dc := dflash.DrafterConfigFor(&model.Model{Config: o.Target}, o.DrafterLayers, o.Taps, o.BlockSize, o.Target.VocabSize-1)
	dc.NumAnchors = o.Anchors
	return dc
}

// stepper holds one benchmark's target, drafter, optimizer and data, and
// runs training steps through the public API of model/dflash, as
// dflash.Session does.
type stepper struct {
	o        Options
	dc       *dflash.Config
	drafter  *dflash.Drafter[float32]
	head     dflash.Head[float32]
	hidden   dflash.HiddenFunc
	dev      *Env
	train    *train.Params // the drafter's gradients and AdamW, where the step runs
	cfg      train.Config
	examples []dflash.Example
	rows     []int
	rng      *rand.Rand
	heap     *heapPeak // marks the heap at phase boundaries when set
}

// Env is the benchmark's placement of a step: the backend it runs on
// (which also runs the drafter's optimizer), how its queued work is waited
// for and its memory released between steps, and the peak FLOP rate its MFU
// divides by. CPUEnv is the CPU's; a caller that opens a GPU builds its own
// and calls RunOn on the GPU's worker thread.
type Env struct {
	Backend tensor.Backend[float32]
	// Sync waits for the queued work (phases are timed between syncs).
	Sync func() error
	// Reset releases the memory of the step that ended.
	Reset func()
	// Free, optional, returns the device's free memory: RunOn refuses a
	// shape whose estimate (bf16 weights and activations, the drafter's
	// fp32 state) exceeds it.
	Free func() (int64, error)
	// Clock, optional, times the phases on the device's own clock, so that
	// the step runs as training runs it: its work queued back to back and
	// waited for once, at its end. Without it each phase ends with Sync.
	Clock PhaseClock
	// Measure, optional, is called before the timed steps; what it returns
	// is called after them with the report and the step count, to add the
	// device's own numbers (memory, copies and synchronisations).
	Measure func() func(rep *Report, steps int)
	// Peak, optional, returns the peak FLOP rate of the device in TFLOP/s
	// and its source (0: unknown, the source says why); Options.PeakTFLOPS
	// overrides it.
	Peak func() (tflops float64, source string)
}

// NumPhases is the number of phases of a step (Phases' fields, in order):
// a PhaseClock marks NumPhases+1 boundaries.
const NumPhases = 5

// PhaseClock marks phase boundaries in order with a device's queued work.
type PhaseClock interface {
	// Mark records boundary i (0: the step's start, i: the end of phase
	// i−1) without waiting for the device.
	Mark(i int) error
	// Between returns the device time from boundary i to boundary j, once
	// the device has passed j (after Sync).
	Between(i, j int) (time.Duration, error)
}

// CPUEnv is the CPU backend b, with the float32 peak of the process's
// cores (GOMAXPROCS; cpufeat.PeakTFLOPS).
func CPUEnv(b tensor.Backend[float32]) *Env {
	return &Env{Backend: b, Sync: func() error { return nil }, Reset: func() {},
		Peak: func() (float64, string) { return cpufeat.PeakTFLOPS(runtime.GOMAXPROCS(0)) }}
}

// newStepper allocates the target (random weights) and the drafter, places
// both on dev (the target frozen), and makes AdamW and o.Batch random
// sequences of o.SeqLen tokens.
func newStepper(o Options, dc *dflash.Config, dev *Env) (*stepper, error) {
	tc := o.Target
	if o.DrafterOnly {
		tc.NumLayers = 1 // the drafter reads the embedding and the LM head only
	}
	target, err := model.New(tc, o.Seed)
	if err != nil {
		return nil, fmt.Errorf("--target-config %s: %w", o.TargetName, err)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x57e9))
	d := dflash.New[float32](dc, rng)
	if o.TargetFP8 {
		if err := target.Arena().PlaceFP8(dev.Backend, target.Matrices()); err != nil {
			return nil, err
		}
	} else {
		target.Arena().Place(dev.Backend, false)
	}
	d.Arena().Place(dev.Backend, true)
	s := &stepper{o: o, dc: dc, drafter: d, head: dflash.HeadOf(target), dev: dev, rng: rng, cfg: train.DefaultConfig()}
	if o.DrafterOnly {
		s.hidden = givenHidden(dev.Backend, len(dc.TargetLayerIDs), o.Batch*o.SeqLen, dc.HiddenSize, rng)
	} else {
		s.hidden = dflash.TargetHidden(target, dc.TargetLayerIDs, dev.Backend)
	}
	s.drafter.LossChunk = o.LossChunk
	if s.train, err = train.NewParams(dev.Backend, d.Arena(), s.cfg.AdamW()); err != nil {
		return nil, err
	}
	s.examples, s.rows = examples(o, dc, rng)
	return s, nil
}

// givenHidden returns a HiddenFunc that hands every batch the same taps
// hidden states of rows×hidden N(0, 1) values, made once and kept where
// parameters live (on a device: outside the step's memory), for timing the
// drafter without its target.
func givenHidden(be tensor.Backend[float32], taps, rows, hidden int, rng *rand.Rand) dflash.HiddenFunc {
	states := make([]*tensor.Tensor, taps)
	for i := range states {
		x := make([]float32, rows*hidden)
		for j := range x {
			x[j] = float32(rng.NormFloat64())
		}
		_, s := be.AllocParams(len(x), false)
		be.WriteParams(s, x)
		states[i] = tensor.FromStorage(fmt.Sprintf("given_hidden.%d", i), s, rows, hidden)
	}
	return func(b *dflash.Batch) error {
		b.Taps = append(b.Taps[:0], states...)
		return nil
	}
}

// examples returns o.Batch random sequences of o.SeqLen tokens (any id but
// the mask token), the last 7/8 of each the assistant's (loss mask 1), and
// their indices.
func examples(o Options, dc *dflash.Config, rng *rand.Rand) ([]dflash.Example, []int) {
	var ex []dflash.Example
	var rows []int
	p := promptLen(o.SeqLen)
	for r := range o.Batch {
		e := dflash.Example{IDs: make([]int32, o.SeqLen), Mask: make([]uint8, o.SeqLen)}
		for i := range e.IDs {
			e.IDs[i] = int32(rng.IntN(dc.MaskTokenID))
			if i >= p {
				e.Mask[i] = 1
			}
		}
		ex, rows = append(ex, e), append(rows, r)
	}
	return ex, rows
}

// stepResult is one step: its phases (in Phases order), FLOPs, loss and a
// separate build of its block mask.
type stepResult struct {
	phases    [NumPhases]time.Duration
	flops     dflash.FLOPs
	loss      float64
	blockMask time.Duration
	end       time.Time // when the optimizer finished
	replays   []string  // what tensor.Backend.Replay did, region by region
	// queued is the host's time queueing each phase's work, without the
	// wait for the device at its end (when the device has no clock).
	queued [NumPhases]time.Duration
}

// step runs one training step and times its phases: on the device's clock
// when it has one (the step's work queued back to back, waited for once at
// its end), otherwise waiting for each phase's queued work at its end; the
// caller times the whole step from its call to res.end.
func (s *stepper) step() (stepResult, error) {
	var res stepResult
	t := time.Now()
	var syncErr error
	note := func(err error) {
		if err != nil && syncErr == nil {
			syncErr = err
		}
	}
	clock := s.dev.Clock
	if clock != nil {
		note(clock.Mark(0))
	}
	host := t // when the host began queueing the phase
	lap := func(i int) {
		res.queued[i] = time.Since(host)
		if clock != nil {
			note(clock.Mark(i + 1))
		} else {
			note(s.dev.Sync())
			now := time.Now()
			res.phases[i], t = now.Sub(t), now
		}
		if s.heap != nil {
			s.heap.mark() // counted in the next phase: about a microsecond
		}
		host = time.Now()
	}
	defer s.dev.Reset()
	be := s.dev.Backend
	tensor.SetProfilePhase(be, "input_assembly")
	b := dflash.MakeBatch(s.examples, s.rows, 0)
	b.Fixed = true // every step's batch has one shape, as a length bucket's
	bl := dflash.BuildBlocksN(s.dc, b, dflash.SampleBatchAnchors(s.rng, b, s.o.Anchors), s.o.Anchors)
	bl.Fixed = true
	lap(0)
	tensor.SetProfilePhase(be, "target_forward")
	if err := s.hidden(b); err != nil {
		return res, err
	}
	lap(1)
	tensor.SetProfilePhase(be, "drafter_forward")
	in, err := s.drafter.Inputs(s.dev.Backend, b, bl)
	if err != nil {
		return res, err
	}
	out := dflash.TrainPass(be, s.drafter, s.head, in, 1, func() {
		lap(2)
		tensor.SetProfilePhase(be, "backward")
	})
	lap(3)
	tensor.SetProfilePhase(be, "optimizer")
	s.train.ClipGradNorm(s.cfg.GradClip)
	s.train.Step(s.cfg.LR)
	s.train.ZeroGrad()
	lap(4)
	if clock != nil {
		note(s.dev.Sync())
		for i := range res.phases {
			d, err := clock.Between(i, i+1)
			note(err)
			res.phases[i] = d
		}
		t = time.Now()
	}
	res.end, res.replays = t, b.Replays
	if syncErr != nil {
		return res, syncErr
	}

	var loss [1]float32
	s.dev.Backend.Download(out.Loss.Store, loss[:])
	res.loss = float64(loss[0])
	res.flops = dflash.StepFLOPs(&s.o.Target, s.dc, b, bl)
	if s.o.DrafterOnly {
		res.flops.TargetForward = 0
	}
	// Inputs built this mask; build it once more, apart, to time it.
	tensor.SetProfilePhase(be, "block_mask (built again, apart)")
	start := time.Now()
	dims := flex.DFlashDims(b.Rows, s.dc.NumHeads, s.dc.NumKVHeads, bl.N, bl.B, b.Len, s.dc.HeadDim)
	if _, err := s.dev.Backend.NewMask(flex.DFlashMask(bl.B), flex.DFlashArgs(b.Len, bl.Anchors, bl.Starts, bl.N, bl.NumValid), dims); err != nil {
		return res, fmt.Errorf("block mask: %w", err)
	}
	if err := s.dev.Sync(); err != nil {
		return res, err
	}
	res.blockMask = time.Since(start)
	return res, nil
}

// tapErrors returns, for an FP8 target, each tap's relative error
// ‖h_fp8 − h_bf16‖/‖h_bf16‖ on the step's batch against the bf16 target
// of the same weights (made again from the seed and placed beside it).
func (s *stepper) tapErrors() ([]float64, error) {
	be := s.dev.Backend
	defer s.dev.Reset()
	twin, err := model.New(s.o.Target, s.o.Seed)
	if err != nil {
		return nil, err
	}
	twin.Arena().Place(be, false)
	ex := make([]dflash.Example, len(s.rows))
	for i, r := range s.rows {
		ex[i] = s.examples[r]
	}
	return dflash.TapErrors(be, ex, 0, s.hidden, dflash.TargetHidden(twin, s.dc.TargetLayerIDs, be))
}
