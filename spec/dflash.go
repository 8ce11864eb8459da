package spec

import (
	"fmt"
	"strings"

	"dflash/model"
	"dflash/model/dflash"
	"dflash/tensor"
)

// DFlash is a Drafter backed by a DFlash drafter and its target's
// embedding and LM head.
type DFlash struct {
	D       *dflash.Drafter[float32]
	Head    dflash.Head[float32]
	Backend tensor.Backend[float32]
}

// NewDFlash returns the drafter d for target, after Check.
func NewDFlash(target *model.Model, d *dflash.Drafter[float32], b tensor.Backend[float32]) (*DFlash, error) {
	if err := Check(target, d.Cfg); err != nil {
		return nil, err
	}
	return &DFlash{D: d, Head: dflash.HeadOf(target), Backend: b}, nil
}

// Check returns an error naming every field of the drafter config c that
// does not fit target: hidden size and vocabulary (shared embedding and
// head), target layer count, taps, mask token and the recorded target
// architecture.
func Check(target *model.Model, c *dflash.Config) error {
	t := target.Config
	var bad []string
	add := func(format string, a ...any) { bad = append(bad, fmt.Sprintf(format, a...)) }
	if c.HiddenSize != t.HiddenSize {
		add("hidden_size %d, the target's is %d", c.HiddenSize, t.HiddenSize)
	}
	if c.VocabSize != t.VocabSize {
		add("vocab_size %d, the target's is %d", c.VocabSize, t.VocabSize)
	}
	if c.NumTargetLayers != t.NumLayers {
		add("num_target_layers %d, the target has %d layers", c.NumTargetLayers, t.NumLayers)
	}
	for i, l := range c.TargetLayerIDs {
		if l < 0 || l >= t.NumLayers {
			add("dflash_config.target_layer_ids[%d] = %d is outside the target's %d layers", i, l, t.NumLayers)
		}
	}
	if c.MaskTokenID < 0 || c.MaskTokenID >= t.VocabSize {
		add("dflash_config.mask_token_id %d is outside the target's vocabulary %d", c.MaskTokenID, t.VocabSize)
	}
	if a := c.Target.ModelType; a != "" && a != string(t.Arch) {
		add("dflash_config.target.model_type %q, the target is %q", a, t.Arch)
	}
	if len(bad) > 0 {
		return fmt.Errorf("the drafter does not fit the target: %s", strings.Join(bad, "; "))
	}
	return nil
}

// BlockSize returns the drafter's block size.
func (f *DFlash) BlockSize() int { return f.D.Cfg.BlockSize }

// Taps returns the drafter's tapped target layers.
func (f *DFlash) Taps() []int { return f.D.Cfg.TargetLayerIDs }

// Start returns a sequence with an empty drafter context of up to maxLen
// positions on f.Backend.
func (f *DFlash) Start(maxLen int) Sequence {
	return &dflashSeq{f: f, ctx: f.D.NewContext(f.Backend, maxLen)}
}

// Propose drafts the blocks of every sequence in one pass
// (dflash.Drafter.ProposeRows) and reads their logits off the backend:
// greedily only each row's argmax (R·B ids), else the logits. The
// sequences are f's (Start).
func (f *DFlash) Propose(seqs []Sequence, last []int32, greedy bool) model.Rows {
	ctxs := make([]*dflash.Context[float32], len(seqs))
	for r, s := range seqs {
		ctxs[r] = s.(*dflashSeq).ctx
	}
	return model.ReadRows(f.Backend, f.D.ProposeRows(f.Backend, f.Head, ctxs, last), greedy)
}

type dflashSeq struct {
	f   *DFlash
	ctx *dflash.Context[float32]
}

func (s *dflashSeq) Extend(hidden []*tensor.Tensor) { s.f.D.Extend(s.f.Backend, s.ctx, hidden) }

func (s *dflashSeq) Free() { s.ctx.Free() }
