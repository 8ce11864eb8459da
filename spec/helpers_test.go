package spec

import (
	"math"
	"math/rand/v2"
	"testing"

	"dflash/model"
	"dflash/model/dflash"
	"dflash/tensor"
)

// loadTarget loads one of model/testdata's HF test targets.
func loadTarget(t *testing.T, name string) *model.Model {
	t.Helper()
	m, err := model.Load("../model/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// randomDFlash returns a DFlash drafter for target with random weights large
// enough that its proposals vary (a fresh 0.02 init proposes nearly the
// same token everywhere).
func randomDFlash(t *testing.T, target *model.Model, layers, block int, rng *rand.Rand, b tensor.Backend[float32]) *DFlash {
	t.Helper()
	c := dflash.DrafterConfigFor(target, layers, nil, block, target.Config.VocabSize-1)
	d := dflash.New[float32](c, rng)
	for _, p := range d.Params() {
		if len(p.Shape) == 2 {
			p.FillNormal(rng, 0, 1/math.Sqrt(float64(p.Shape[1])))
		}
	}
	f, err := NewDFlash(target, d, b)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// oracle is a test drafter that knows the target's greedy continuation ref
// of the prompt: its n-th proposal has the true tokens in slots 1..r, with r
// cycling through 0..B-1 from a starting phase (r = (phase+n-1) mod B), and
// a wrong token after them, so rounds are accepted to every length 1..B
// however the seed falls (give successive prompts successive phases). Extend
// checks that the hidden states it receives are the target's (full
// forward) states of exactly the next positions, which tests the rollback.
type oracle struct {
	t     *testing.T
	seq   []int32     // prompt + reference continuation
	want  [][]float32 // per tap, the full-forward hidden states of seq [len(seq), H]
	taps  []int
	B, V  int
	rng   *rand.Rand
	phase int // correct-prefix length of the first proposal
	pos   int // context length
	calls int
	// fail reports a misuse; t.Fatalf when nil (t.Errorf off the test's
	// goroutine: a GPU worker's).
	fail func(format string, args ...any)
	// lenient makes a history other than seq no misuse: from there on
	// the oracle proposes random blocks. On the GPU an argmax tie broken
	// otherwise by bf16 rounding of another shape (a batch's rows) leads
	// off seq, and the caller's check of the output judges that tie.
	lenient, lost bool
}

func (o *oracle) fatalf(format string, args ...any) {
	if o.fail != nil {
		o.fail(format, args...)
		return
	}
	o.t.Fatalf(format, args...)
}

func newOracle(t *testing.T, m *model.Model, prompt, ref []int32, taps []int, B, phase int, rng *rand.Rand) *oracle {
	seq := append(append([]int32(nil), prompt...), ref...)
	states := make([]int, len(taps))
	for i, tp := range taps {
		states[i] = tp + 1
	}
	out := m.Forward(tensor.NewInference(tensor.NewCPU[float32](1)), model.Input{IDs: seq, Batch: 1, Len: len(seq), States: states, StatesOnly: true})
	o := &oracle{t: t, seq: seq, taps: taps, B: B, V: m.Config.VocabSize, rng: rng, phase: phase}
	for _, s := range states {
		o.want = append(o.want, out.States[s].Data())
	}
	return o
}

func (o *oracle) BlockSize() int     { return o.B }
func (o *oracle) Taps() []int        { return o.taps }
func (o *oracle) Start(int) Sequence { o.pos = 0; return o }
func (o *oracle) Free()              {}

// Extend checks the hidden states against the full forward pass's when
// the oracle has them (want; the CPU), and counts the positions.
func (o *oracle) Extend(hidden []*tensor.Tensor) {
	n := hidden[0].Rows()
	if o.want == nil {
		o.pos += n
		return
	}
	H := len(o.want[0]) / len(o.seq)
	for i, x := range hidden {
		h := x.Data()
		w := o.want[i][o.pos*H : (o.pos+n)*H]
		for j := range h {
			if math.Abs(float64(h[j]-w[j])) > 1e-4*(1+math.Abs(float64(w[j]))) {
				o.fatalf("Extend of positions %d..%d, tap %d: value %d is %v, the target's state is %v", o.pos, o.pos+n-1, o.taps[i], j, h[j], w[j])
			}
		}
	}
	o.pos += n
}

// Propose returns the blocks of its sequences (oracles, each proposing its
// own: proposeEach).
func (o *oracle) Propose(seqs []Sequence, last []int32, _ bool) model.Rows {
	return proposeEach(seqs, last)
}

// proposeEach returns the blocks of the oracles seqs, one after the other.
func proposeEach(seqs []Sequence, last []int32) model.Rows {
	var rows model.Rows
	for r, s := range seqs {
		b := s.(*oracle).propose(last[r])
		rows.Logits, rows.Vocab = append(rows.Logits, b.Logits...), b.Vocab
	}
	return rows
}

// oracles is a Drafter of one oracle per prompt of a GenerateBatch: Start
// hands them out in order (GenerateBatch starts the prompts that get a
// token in order).
type oracles struct {
	list []*oracle
	next int
	B    int
	taps []int
}

func (s *oracles) BlockSize() int { return s.B }
func (s *oracles) Taps() []int    { return s.taps }
func (s *oracles) Start(n int) Sequence {
	s.next++
	return s.list[s.next-1].Start(n)
}
func (s *oracles) Propose(seqs []Sequence, last []int32, _ bool) model.Rows {
	return proposeEach(seqs, last)
}

// propose returns logits whatever greedy asks: a greedy round picks their
// argmax on the host, as from any drafter that returns logits.
func (o *oracle) propose(last int32) model.Rows {
	o.calls++
	if o.lost || o.pos >= len(o.seq) || last != o.seq[o.pos] {
		o.lost = o.lenient
		if o.lost {
			return o.randomBlock()
		}
		o.fatalf("Propose(%d) at position %d: the sequence there is %v", last, o.pos, o.seq[min(o.pos, len(o.seq)-1):])
	}
	l := make([]float32, o.B*o.V)
	run := (o.phase + o.calls - 1) % o.B // slots 1..run hold the true tokens
	for s := 1; s < o.B; s++ {
		x := int32(o.rng.IntN(o.V))
		if p := o.pos + s; p < len(o.seq) {
			if s <= run {
				x = o.seq[p]
			} else if x == o.seq[p] {
				x = (x + 1) % int32(o.V)
			}
		}
		l[s*o.V+int(x)] = 10
	}
	return model.Rows{Logits: l, Vocab: o.V}
}

// randomBlock returns a block of random tokens.
func (o *oracle) randomBlock() model.Rows {
	l := make([]float32, o.B*o.V)
	for s := 1; s < o.B; s++ {
		l[s*o.V+o.rng.IntN(o.V)] = 10
	}
	return model.Rows{Logits: l, Vocab: o.V}
}
