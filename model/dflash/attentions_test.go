package dflash

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"dflash/flex"
	"dflash/internal/testseed"
	"dflash/tensor"
)

// attnRecorder is the CPU backend recording the attention calls made on
// it.
type attnRecorder struct {
	tensor.Backend[float32]
	progs map[tensor.Mask]*flex.MaskProgram
	made  map[string]tensor.AttentionUse // by useKey
}

func newAttnRecorder() *attnRecorder {
	return &attnRecorder{Backend: tensor.NewCPU[float32](2), progs: map[tensor.Mask]*flex.MaskProgram{}, made: map[string]tensor.AttentionUse{}}
}

func (r *attnRecorder) NewMask(p *flex.MaskProgram, args *flex.Args, d flex.Dims) (tensor.Mask, error) {
	m, err := r.Backend.NewMask(p, args, d)
	r.progs[m] = p
	return m, err
}

func (r *attnRecorder) record(d flex.Dims, m tensor.Mask, score *flex.ScoreProgram, backward bool) {
	u := tensor.AttentionUse{Mask: r.progs[m], Score: score, HeadDim: d.HeadDim, Group: d.Group(), Backward: backward}
	r.made[useKey(u)] = u
}

func (r *attnRecorder) Attention(d flex.Dims, q, k, v tensor.Storage[float32], m tensor.Mask, score *flex.ScoreProgram, scale float64) (out, lse tensor.Storage[float32]) {
	r.record(d, m, score, false)
	return r.Backend.Attention(d, q, k, v, m, score, scale)
}

func (r *attnRecorder) AttentionBackward(d flex.Dims, q, k, v, out, lse, dout tensor.Storage[float32], m tensor.Mask, score *flex.ScoreProgram, scale float64, dq, dk, dv tensor.Storage[float32], accumulate bool) {
	r.record(d, m, score, true)
	r.Backend.AttentionBackward(d, q, k, v, out, lse, dout, m, score, scale, dq, dk, dv, accumulate)
}

// calls returns the recorded calls as sorted useKeys, a forward left out
// when the backward of the same kernels ran too (a use with Backward runs
// both).
func (r *attnRecorder) calls() []string {
	var out []string
	for k, u := range r.made {
		if bw := u; !u.Backward {
			bw.Backward = true
			if _, ok := r.made[useKey(bw)]; ok {
				continue
			}
		}
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// useKey names u with its programs' hashes, which tell programs apart
// where names may not.
func useKey(u tensor.AttentionUse) string {
	score := ""
	if u.Score != nil {
		score = u.Score.Hash()
	}
	return fmt.Sprintf("%s [mask %s, score %q]", u, u.Mask.Hash(), score)
}

// TestStepAttentions: the attention calls that the target's forward
// (model.Model.ForwardAttentions) and the drafter's training step
// (StepAttentions) say they make are those a Session step makes on the
// backend, no more and no fewer; an evaluation makes only their forwards.
func TestStepAttentions(t *testing.T) {
	seed := testseed.Seed(t)
	m, ex := tinyTargetData(t, seed, 8, false)
	c := DrafterConfigFor(m, 2, []int{1, 2}, 4, 59)
	c.NumAnchors = 5
	b := newAttnRecorder()
	s := &Session{Drafter: New[float32](c, rand.New(rand.NewPCG(seed, 2))), Head: HeadOf(m),
		Hidden: TargetHidden(m, c.TargetLayerIDs, b), Backend: b, Train: ex, Eval: ex[:3], BatchSize: 3, Seed: seed}
	uses := append(m.ForwardAttentions(false), s.Drafter.StepAttentions()...)
	var said, forwards []string
	for _, u := range uses {
		said = append(said, useKey(u))
		u.Backward = false
		forwards = append(forwards, useKey(u))
	}
	slices.Sort(said)
	slices.Sort(forwards)
	if _, _, _, err := s.Step(rand.New(rand.NewPCG(seed, 3))); err != nil {
		t.Fatal(err)
	}
	if got := b.calls(); !slices.Equal(got, said) {
		t.Fatalf("a step made the attention calls\n%q\nthe models say\n%q", got, said)
	}
	b.made = map[string]tensor.AttentionUse{}
	if _, err := s.Evaluate(); err != nil {
		t.Fatal(err)
	}
	if got := b.calls(); !slices.Equal(got, forwards) {
		t.Fatalf("an evaluation made the attention calls\n%q\nwant the forwards of a step's\n%q", got, forwards)
	}
}
