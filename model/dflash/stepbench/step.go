package stepbench

import (
	"fmt"
	"math/rand/v2"
	"time"

	"dflash/flex"
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

// drafterConfig returns the drafter of o: the target's attention shape,
// o.DrafterLayers layers, o.Taps (default: the recipe's spread), the last
// vocabulary id as the mask token.
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
	backend  tensor.Backend[float32]
	params   []*train.Param
	opt      *train.AdamW
	cfg      train.Config
	examples []dflash.Example
	rows     []int
	rng      *rand.Rand
	heap     *heapPeak // marks the heap at phase boundaries when set
}

// newStepper allocates the target (random weights), the drafter, AdamW and
// o.Batch random sequences of o.SeqLen tokens.
func newStepper(o Options, dc *dflash.Config, backend tensor.Backend[float32]) (*stepper, error) {
	target, err := model.New(o.Target, o.Seed)
	if err != nil {
		return nil, fmt.Errorf("--target-config %s: %w", o.TargetName, err)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x57e9))
	s := &stepper{o: o, dc: dc, drafter: dflash.New[float32](dc, rng), head: dflash.HeadOf(target),
		hidden: dflash.TargetHidden(target, dc.TargetLayerIDs, backend), backend: backend, rng: rng, cfg: train.DefaultConfig()}
	s.drafter.LossChunk = o.LossChunk
	s.params = s.drafter.TrainParams()
	s.opt = train.NewAdamW(s.params, train.AdamWConfig{Beta1: s.cfg.Beta1, Beta2: s.cfg.Beta2, Eps: s.cfg.Eps, WeightDecay: s.cfg.WeightDecay})
	s.examples, s.rows = examples(o, dc, rng)
	return s, nil
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
	phases    [5]time.Duration
	flops     FLOPs
	loss      float64
	blockMask time.Duration
	end       time.Time // when the optimizer finished
}

// step runs one training step and times its phases back to back; the
// caller times the whole step from its call to res.end.
func (s *stepper) step() (stepResult, error) {
	var res stepResult
	t := time.Now()
	lap := func(i int) {
		now := time.Now()
		res.phases[i], t = now.Sub(t), now
		if s.heap != nil {
			s.heap.mark() // counted in the next phase: about a microsecond
		}
	}
	b := dflash.MakeBatch(s.examples, s.rows, 0)
	bl := dflash.BuildBlocks(s.dc, b, dflash.SampleBatchAnchors(s.rng, b, s.o.Anchors))
	lap(0)
	if err := s.hidden(b); err != nil {
		return res, err
	}
	lap(1)
	tp := tensor.NewTape(s.backend)
	out, err := s.drafter.Forward(tp, true, s.head, b, bl)
	if err != nil {
		return res, err
	}
	lap(2)
	tp.Backward(out.Loss)
	lap(3)
	train.ClipGradNorm(s.params, s.cfg.GradClip)
	s.opt.Step(s.cfg.LR)
	train.ZeroGrads(s.params)
	lap(4)
	res.end = t

	res.loss = float64(out.Loss.Data()[0])
	res.flops = StepFLOPs(&s.o.Target, s.dc, b.Rows, b.Len, bl)
	// The forward pass built this mask; build it once more, apart, to time it.
	start := time.Now()
	dims := flex.DFlashDims(b.Rows, s.dc.NumHeads, s.dc.NumKVHeads, bl.N, bl.B, b.Len, s.dc.HeadDim)
	if _, err := flex.NewBlockMask(flex.DFlashMask(bl.B), flex.DFlashArgs(b.Len, bl.Anchors, bl.N, bl.NumValid), dims, 0, 0); err != nil {
		return res, fmt.Errorf("block mask: %w", err)
	}
	res.blockMask = time.Since(start)
	return res, nil
}
