package dflash

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"dflash/data/bucket"
	"dflash/data/order"
	"dflash/data/pack"
	"dflash/internal/rngstream"
	"dflash/model"
	"dflash/tensor"
)

// Example is one training sequence: token ids and the loss mask (1 on
// assistant tokens).
type Example struct {
	IDs  []int32
	Mask []uint8
}

// MakeBatch pads the examples ex[idx[i]] to their longest length (padding id
// pad, mask 0) and returns the batch without hidden states.
func MakeBatch(ex []Example, idx []int, pad int32) *Batch {
	L := 0
	for _, i := range idx {
		L = max(L, len(ex[i].IDs))
	}
	b := MakeFixedBatch(ex, idx, pad, len(idx), L)
	b.Fixed = false // its shape is its examples': no replayed region repeats it
	return b
}

// MakeFixedBatch is MakeBatch with a given shape: the examples ex[idx[i]]
// in rows 0..len(idx)−1 padded to length L, then empty rows up to rows
// (every id pad, mask 0, length 0). It panics when an example is longer
// than L or idx has more than rows examples.
func MakeFixedBatch(ex []Example, idx []int, pad int32, rows, L int) *Batch {
	if len(idx) > rows {
		panic(fmt.Sprintf("dflash: MakeFixedBatch: %d examples for %d rows", len(idx), rows))
	}
	return fillBatch(ex, singles(idx), pad, rows, L)
}

// MakePackedBatch returns a packed batch of rows rows of length L: row r
// holds the examples ex[pick[r][k]] back to back from position 0 (the rest
// of the row padding: id pad, mask 0), rows past len(pick) empty. It panics
// when a row's examples pass L or pick has more than rows rows.
func MakePackedBatch(ex []Example, pick [][]int, pad int32, rows, L int) *Batch {
	if len(pick) > rows {
		panic(fmt.Sprintf("dflash: MakePackedBatch: %d rows of examples for %d rows", len(pick), rows))
	}
	b := fillBatch(ex, pick, pad, rows, L)
	b.Packed = true
	return b
}

// fillBatch lays out the examples of each row of pick back to back in a
// fixed batch of rows × L.
func fillBatch(ex []Example, pick [][]int, pad int32, rows, L int) *Batch {
	b := &Batch{Rows: rows, Len: L, IDs: make([]int32, rows*L), LossMask: make([]uint8, rows*L), SeqLen: make([]int, rows),
		Segs: make([][]Seg, rows), Fixed: true}
	for j := range b.IDs {
		b.IDs[j] = pad
	}
	for r, idx := range pick {
		for _, i := range idx {
			e, at := ex[i], b.SeqLen[r]
			if len(e.Mask) != len(e.IDs) {
				panic(fmt.Sprintf("dflash: example %d: %d ids, %d mask entries", i, len(e.IDs), len(e.Mask)))
			}
			if at+len(e.IDs) > L {
				panic(fmt.Sprintf("dflash: batch row %d: example %d (%d ids) ends past the length %d", r, i, len(e.IDs), L))
			}
			copy(b.IDs[r*L+at:], e.IDs)
			copy(b.LossMask[r*L+at:], e.Mask)
			b.Segs[r] = append(b.Segs[r], Seg{Start: at, Len: len(e.IDs), Example: i})
			b.SeqLen[r] += len(e.IDs)
		}
	}
	return b
}

// HiddenFunc fills b.Taps with the target's hidden states at the taps.
type HiddenFunc func(b *Batch) error

// TargetHidden returns a HiddenFunc that runs target m (no gradients) and
// reads, for tap t, the output of decoder layer t: m's hidden state t+1 in
// HF's output_hidden_states indexing (docs/DRAFTER.md §1). The target
// stops at the deepest tap: later layers and its final norm do not run.
func TargetHidden(m *model.Model, taps []int, backend tensor.Backend[float32]) HiddenFunc {
	states := make([]int, len(taps))
	var err error
	for i, t := range taps {
		if (t < 0 || t >= m.Config.NumLayers) && err == nil {
			err = fmt.Errorf("tap %d is outside the target's %d layers", t, m.Config.NumLayers)
		}
		states[i] = t + 1
	}
	return func(b *Batch) error {
		if err != nil {
			return err
		}
		in := model.Input{IDs: b.IDs, Batch: b.Rows, Len: b.Len, States: states, StatesOnly: len(states) > 0}
		if b.Packed {
			in.Pos, in.Docs = b.Positions(), b.DocIDs()
		}
		tp := tensor.NewInference(backend)
		var out *model.Output
		p := m.Prepare(backend, in) // uploads: before the replayed region
		replayed(backend, b, b.Fixed, targetRegion{b.Rows, b.Len, b.Packed}, func() { out = m.ForwardPrepared(tp, p) })
		b.Taps = b.Taps[:0]
		for _, s := range states {
			b.Taps = append(b.Taps, out.States[s])
		}
		return nil
	}
}

// TapErrors returns each tap's relative error ‖h_a − h_b‖/‖h_b‖ of the
// target states hidden a gives against those of hidden b (two targets of
// the same weights: FP8 against bf16) on one batch of the examples ex,
// padded with pad, summed over the whole batch. The step's memory is given
// back after each pass.
func TapErrors(be tensor.Backend[float32], ex []Example, pad int32, a, b HiddenFunc) ([]float64, error) {
	idx := make([]int, len(ex))
	for i := range idx {
		idx[i] = i
	}
	states := func(h HiddenFunc) ([][]float32, error) {
		defer be.ReleaseStep(be.MarkStep())
		bt := MakeBatch(ex, idx, pad)
		if err := h(bt); err != nil {
			return nil, err
		}
		out := make([][]float32, len(bt.Taps))
		for i, t := range bt.Taps {
			out[i] = make([]float32, t.Numel())
			be.Download(t.Store, out[i])
		}
		return out, nil
	}
	ha, err := states(a)
	if err != nil {
		return nil, err
	}
	hb, err := states(b)
	if err != nil {
		return nil, err
	}
	if len(ha) != len(hb) {
		return nil, fmt.Errorf("dflash: TapErrors: %d taps against %d", len(ha), len(hb))
	}
	errs := make([]float64, len(ha))
	for i := range ha {
		var d2, n2 float64
		for j, x := range hb[i] {
			d := float64(ha[i][j]) - float64(x)
			d2, n2 = d2+d*d, n2+float64(x)*float64(x)
		}
		errs[i] = math.Sqrt(d2 / n2)
	}
	return errs, nil
}

// replayed runs fn, a region of a step over b, as a replayed region keyed
// by key when fixed (b in its bucket's shape), noting what
// tensor.Backend.Replay did in b.Replays, and plainly otherwise.
func replayed(be tensor.Backend[float32], b *Batch, fixed bool, key any, fn func()) {
	if !fixed {
		fn()
		return
	}
	if kind := be.Replay(key, fn); kind != "" {
		b.Replays = append(b.Replays, kind)
	}
}

// targetRegion keys the target's replayed pass over batches of one shape.
type targetRegion struct {
	rows, len int
	packed    bool
}

// drafterRegion keys one of the drafter's replayed passes over batches of
// one shape: a training pass's forward or backward, or an evaluation's
// forward (without a tape).
type drafterRegion struct {
	rows, len, blocks int
	pass              drafterPass
}

// drafterPass names a replayed pass of the drafter.
type drafterPass int

const (
	trainForward drafterPass = iota
	trainBackward
	evalForward
)

// TrainPass runs the drafter's training pass over in on be: the forward
// pass with the loss scaled by share, then the backward pass, which
// accumulates the parameters' gradients. For a batch in a fixed shape
// (Batch.Fixed, Blocks.Fixed) each is a replayed region
// (tensor.Backend.Replay), what it did appended to the batch's Replays.
// between, when not nil, runs between the two (outside both regions).
func TrainPass(be tensor.Backend[float32], d *Drafter[float32], head Head[float32], in *StepInputs[float32], share float64, between func()) *Output[float32] {
	tp := tensor.NewTape(be)
	tp.ReleaseGrads() // only the parameters' gradients are read after Backward
	var out *Output[float32]
	forward := func() {
		out = d.ForwardInputs(tp, true, head, in)
		if share != 1 {
			out.Loss = tp.Scale(out.Loss, share)
		}
	}
	b, fixed := in.Batch, in.Batch.Fixed && in.Blocks.Fixed
	replayed(be, b, fixed, drafterRegion{b.Rows, b.Len, in.Blocks.N, trainForward}, forward)
	if between != nil {
		between()
	}
	replayed(be, b, fixed, drafterRegion{b.Rows, b.Len, in.Blocks.N, trainBackward}, func() { tp.Backward(out.Loss) })
	return out
}

// HeadOf returns the target's embedding and LM head as frozen tensors
// sharing m's values (so the drafter never writes gradients into m).
func HeadOf(m *model.Model) Head[float32] {
	frozen := func(t *tensor.Tensor) *tensor.Tensor {
		return &tensor.Tensor{Name: t.Name, Shape: t.Shape, Store: t.Store}
	}
	return Head[float32]{Embed: frozen(m.Embed), LMHead: frozen(m.LMHead)}
}

// DrafterConfigFor returns a drafter config for target m with n layers,
// the given taps (empty: DefaultTaps(L, n)), block size, mask token and the
// target's attention shape.
func DrafterConfigFor(m *model.Model, layers int, taps []int, blockSize, maskToken int) *Config {
	tc := m.Config
	if len(taps) == 0 {
		taps = DefaultTaps(tc.NumLayers, layers)
	}
	return &Config{
		HiddenSize: tc.HiddenSize, IntermediateSize: tc.IntermediateSize, NumLayers: layers,
		NumHeads: tc.NumHeads, NumKVHeads: tc.NumKVHeads, HeadDim: tc.HeadDim,
		RMSNormEps: tc.RMSNormEps, RopeTheta: tc.RopeTheta, RopeScaling: tc.RopeScaling,
		MaxPositionEmbeddings: tc.MaxPositionEmbeddings, VocabSize: tc.VocabSize,
		BlockSize: blockSize, MaskTokenID: maskToken, TargetLayerIDs: taps,
		Gamma: DefaultGamma(blockSize), NumAnchors: 512, NumTargetLayers: tc.NumLayers,
		Target: TargetInfo{Architecture: tc.Arch.HFClass(),
			ModelType: string(tc.Arch), HiddenSize: tc.HiddenSize, VocabSize: tc.VocabSize, NumLayers: tc.NumLayers},
	}
}

// Session trains and evaluates a float32 drafter on in-memory examples.
type Session struct {
	Drafter *Drafter[float32]
	Head    Head[float32]
	Hidden  HiddenFunc
	Backend tensor.Backend[float32]
	Train   []Example
	Eval    []Example
	// BatchSize is the number of sequences per micro-batch (of each rank).
	BatchSize int
	// Buckets, when positive, draws the training batches from length
	// buckets (at most Buckets bucket lengths, chosen to pad least) so that
	// every step of a bucket has one shape; 0 batches in data order, padded
	// to each batch's longest (see buckets.go). Not with Ranks yet, nor
	// with Pack.
	Buckets int
	// Pack, when not nil, packs the training and evaluation batches
	// (pack.go): BatchSize rows of Pack.Len tokens, each several samples.
	Pack *Packing
	// EvalAnchors bounds the anchors of a held-out sample in an evaluation
	// (0: the drafter's NumAnchors).
	EvalAnchors int
	// Ranks, optional, makes the session one rank of data-parallel training
	// (the trainer's collective, train.Collective, is one): the global batch
	// is BatchSize times the rank count, in one order shared by every rank,
	// and this rank trains on its share of each, with the anchors one rank
	// with the whole batch would draw for those examples (ExampleAnchors).
	Ranks Ranks
	// Pad is the padding token id.
	Pad int32
	// Seed seeds the data order and the evaluation anchors.
	Seed uint64
	// CacheHidden keeps every batch's hidden states in memory after the
	// first use (small data sets: the target runs once per sequence).
	CacheHidden bool
	// EvalCache keeps the hidden states of the evaluation batches on the
	// backend after the first evaluation, so that later ones run only the
	// drafter (hiddencache.go; EvalCacheSize says how much); Free gives
	// them back. With CacheHidden, which holds them on the host, it does
	// nothing.
	EvalCache bool
	// SpecEval, optional, measures real speculative decoding (package spec
	// provides it); evaluations that train.Run marks Spec merge its metrics.
	SpecEval func(ctx context.Context) (map[string]float64, error)
	// StepFLOPs, optional, counts the floating-point operations of a
	// training micro-batch of batch b with blocks bl (the training recipe:
	// StepFLOPs); train.Run then reports tflops and mfu.
	StepFLOPs func(b *Batch, bl *Blocks) float64

	mu          sync.Mutex
	cache       map[cacheKey][][]float32
	evalTaps    [][]*tensor.Tensor // the kept hidden states of each evaluation batch (EvalCache)
	order       *order.Order
	sampler     *bucket.Sampler
	trainPack   *pack.Packer
	evalPlan    [][][]int // the evaluation's batches, each its rows' examples
	evalShape   shape
	bucketSteps map[int]int            // training batches drawn per bucket length
	replays     map[int]map[string]int // tensor.Backend.Replay's kinds per bucket length (Replays)
}

// Ranks is what a session needs of data-parallel training: this rank, the
// number of ranks, and the sum over the ranks of a few host values (the
// loss weights of a step).
type Ranks interface {
	Rank() int
	Size() int
	AllReduceFloat64(x []float64) error
}

// cacheKey names an example of the training (eval false) or evaluation set.
type cacheKey struct {
	eval bool
	i    int
}

// trainOrder returns the order of the training examples, made on first use.
func (s *Session) trainOrder() *order.Order {
	if s.order == nil {
		rank, ranks := 0, 1
		if s.Ranks != nil {
			rank, ranks = s.Ranks.Rank(), s.Ranks.Size()
		}
		s.order = order.New(len(s.Train), s.BatchSize*ranks, s.Seed, rngstream.Data).Shard(rank, ranks)
	}
	return s.order
}

// batch lays out the examples of pick (each row's examples of set) in shape
// sh: packed, a sample a row padded to sh.len, or (sh.rows 0) a sample a
// row padded to their longest; and fills its hidden states (hidden: eval
// is the index of the evaluation batch, or training).
func (s *Session) batch(set []Example, pick [][]int, eval int, sh shape) (*Batch, error) {
	var b *Batch
	switch {
	case sh.packed:
		b = MakePackedBatch(set, pick, s.Pad, sh.rows, sh.len)
	case sh.rows > 0:
		b = MakeFixedBatch(set, firsts(pick), s.Pad, sh.rows, sh.len)
	default:
		b = MakeBatch(set, firsts(pick), s.Pad)
	}
	return b, s.hidden(b, eval)
}

// firsts returns the one example of each row of pick.
func firsts(pick [][]int) []int {
	idx := make([]int, len(pick))
	for r, row := range pick {
		if len(row) != 1 {
			panic(fmt.Sprintf("dflash: a row of %d examples in a batch that is not packed", len(row)))
		}
		idx[r] = row[0]
	}
	return idx
}

// singles returns pick with one example a row.
func singles(idx []int) [][]int {
	pick := make([][]int, len(idx))
	for r, i := range idx {
		pick[r] = []int{i}
	}
	return pick
}

// inputs assembles everything one forward pass over the examples of pick
// reads: the batch of shape sh with the target's hidden states, at most n
// anchors per example from a seed drawn from rng (ExampleAnchors; a packed
// row's at most sh.blocks), the block layout and the drafter's StepInputs
// (rotary tables, block mask, loss rows), of shape sh when sh.rows > 0;
// eval is the index of the evaluation batch, or training. It is the one
// place a step's inputs are built.
func (s *Session) inputs(set []Example, pick [][]int, eval int, sh shape, n int, rng *rand.Rand) (*StepInputs[float32], error) {
	b, err := s.batch(set, pick, eval, sh)
	if err != nil {
		return nil, err
	}
	room := 0
	if sh.packed {
		room = sh.blocks
	}
	anchors := ExampleAnchors(rng.Uint64(), b, n, room)
	if sh.rows > 0 {
		bl := BuildBlocksN(s.Drafter.Cfg, b, anchors, sh.blocks)
		bl.Fixed = true
		return s.Drafter.Inputs(s.Backend, b, bl)
	}
	return s.Drafter.Inputs(s.Backend, b, BuildBlocks(s.Drafter.Cfg, b, anchors))
}

// Step runs one training micro-batch: anchors drawn from rng, loss and
// gradients accumulated into the drafter's parameters. It returns the
// step's inputs too (their Batch and Blocks: tokens, samples, padding,
// FLOPs: host data; their storage on the backend is gone).
//
// Step owns the step's memory: everything it allocates on the backend
// (the inputs, the target's pass, the drafter's forward and backward
// passes) lives until it returns, when it ends the step
// (tensor.Backend.ResetStep). Inside it the target's pass releases each
// layer as it goes (tensor.Scope, in model.Model.ForwardPrepared) and the
// drafter's training tape gives back what its backward pass reads no more
// (TrainPass: ReleaseGrads, with a scope per layer). Nothing else in a
// training run ends a step; Evaluate, between steps, ends one per
// evaluation batch. See package tensor's doc.
//
// With a Collective of several ranks the loss is the weighted mean over the
// global batch (§4.4): each rank's is scaled by its share of the global
// weight sum times the rank count, so that train.Run's mean over ranks of
// the losses and of the gradients is the loss and gradient of one rank
// with the whole batch. The weight sums are all-reduced on every rank, one
// float64 per micro-batch.
func (s *Session) Step(rng *rand.Rand) (loss float64, m *Metrics, in *StepInputs[float32], err error) {
	defer s.Backend.ResetStep()
	in, err = s.nextTrain(rng)
	if err != nil {
		return 0, nil, nil, err
	}
	m = NewMetrics(in.Blocks.B)
	share, err := s.lossShare(in.Blocks.WeightSum)
	if err != nil {
		return 0, nil, nil, err
	}
	if in.Blocks.WeightSum == 0 || share == 0 {
		return 0, m, in, nil // no label in this batch: nothing to learn
	}
	out := TrainPass(s.Backend, s.Drafter, s.Head, in, share, nil)
	s.countReplays(in.Batch)
	out.Read(s.Backend)
	m.Add(in.Blocks, out.Pred, out.CE)
	var l [1]float32
	s.Backend.Download(out.Loss.Store, l[:])
	return float64(l[0]), m, in, nil
}

// lossShare returns the factor of this rank's loss that makes the mean
// over ranks the global batch's weighted mean: ws·ranks/Σ ws (1 with one
// rank, 0 when no rank has a label).
func (s *Session) lossShare(ws float64) (float64, error) {
	if s.Ranks == nil || s.Ranks.Size() == 1 {
		return 1, nil
	}
	g := []float64{ws}
	if err := s.Ranks.AllReduceFloat64(g); err != nil {
		return 0, fmt.Errorf("loss weights: %w", err)
	}
	if g[0] == 0 {
		return 0, nil
	}
	return ws * float64(s.Ranks.Size()) / g[0], nil
}

// Evaluate computes the metrics of docs/DRAFTER.md §5 on the evaluation
// examples, with anchors from a fixed seed (the same at every call), at
// most EvalAnchors per example. Packed, its batches have one shape, and
// the drafter's forward pass over them is a replayed region of its own.
// With EvalCache the target runs at the first evaluation only.
func (s *Session) Evaluate() (*Metrics, error) {
	m := NewMetrics(s.Drafter.Cfg.BlockSize)
	rng := rand.New(rand.NewPCG(s.Seed, rngstream.Eval<<32|0xe7a1))
	plan, sh, err := s.evalBatches()
	if err != nil {
		return nil, err
	}
	for i, pick := range plan {
		if err := s.evalBatch(m, i, pick, sh, rng); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// evalBatch adds the metrics of evaluation batch i, the examples of pick,
// to m, as one step of the backend's memory, ended when it returns (as
// Step's).
func (s *Session) evalBatch(m *Metrics, i int, pick [][]int, sh shape, rng *rand.Rand) error {
	defer s.Backend.ResetStep()
	in, err := s.inputs(s.Eval, pick, i, sh, s.evalAnchors(), rng)
	if err != nil {
		return err
	}
	var out *Output[float32]
	b := in.Batch
	replayed(s.Backend, b, b.Fixed && in.Blocks.Fixed, drafterRegion{b.Rows, b.Len, in.Blocks.N, evalForward}, func() {
		out = s.Drafter.ForwardInputs(tensor.NewInference(s.Backend), false, s.Head, in)
	})
	out.Read(s.Backend)
	m.Add(in.Blocks, out.Pred, out.CE)
	return nil
}

// MetricsMap flattens m for train's metrics log: loss, acc, tau and acc_<s>.
func MetricsMap(m *Metrics) map[string]float64 {
	out := map[string]float64{"loss": m.Loss(), "acc": m.Accuracy(), "tau": m.Acceptance()}
	for s, a := range m.SlotAccuracy() {
		if s > 0 {
			out[fmt.Sprintf("acc_%d", s)] = a
		}
	}
	return out
}
