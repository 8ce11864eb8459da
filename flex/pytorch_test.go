package flex

import (
	"math"
	"testing"
)

// pyDiv and pyMod are Python's // and % on ints, written from their
// definition (the quotient rounded toward -Inf; x - y*(x // y)).
func pyDiv(x, y int) int { return int(math.Floor(float64(x) / float64(y))) }
func pyMod(x, y int) int { return x - y*pyDiv(x, y) }

// TestPyTorchIdioms checks every row of the package doc's table: the flex
// expression against the PyTorch mask_mod / score_mod written out in Go
// with Python semantics, at every (b, h, q, kv) of a small problem, through
// the compiled CPU evaluation (block mask and row evaluation).
func TestPyTorchIdioms(t *testing.T) {
	r := newRand(t)
	d := Dims{Batch: 2, HeadsQ: 3, HeadsKV: 1, LenQ: 37, LenKV: 41, HeadDim: 1}
	const W, D, S, C, M = 6, 3, 4, 2.5, 5
	prefix := []int32{int32(r.IntN(41)), int32(r.IntN(41))}
	doc := make([]int32, 2*41)
	for i := range doc {
		doc[i] = int32(i % 41 / (3 + i/41*4))
	}
	slopes := ALiBiSlopes(3)
	bias := randSlice(r, 3*(2*M+1))
	a := NewArgs().SetIntTensor("prefix", prefix, 2).SetIntTensor("doc", doc, 2, 41).
		SetFloatTensor("slopes", slopes, 3).SetFloatTensor("c", []float64{C}, 1).
		SetIntTensor(PrefixLen, prefix, 2).SetIntTensor(DocIDs, doc, 2, 41).
		SetFloatTensor(ALiBiSlopesName, slopes, 3).SetFloat(SoftcapName, C).SetFloatTensor(RelBiasName, bias, 3, 2*M+1)
	pre, dc := IntTensorParam("prefix", 1), IntTensorParam("doc", 2)
	dist := Q().Sub(KV()).Abs()
	masks := []struct {
		m     *MaskProgram
		torch func(b, h, q, kv int) bool
	}{
		{Causal(), func(b, h, q, kv int) bool { return q >= kv }},
		{NewMask("causal", Q().Ge(KV())), func(b, h, q, kv int) bool { return q >= kv }},
		{NewMask("window", Q().Ge(KV()).And(Q().Sub(KV()).Le(Const(W)))), func(b, h, q, kv int) bool { return q >= kv && q-kv <= W }},
		{NewMask("prefix", KV().Le(Q()).Or(KV().Lt(pre.At(B())))), func(b, h, q, kv int) bool { return kv <= q || kv < int(prefix[b]) }},
		{PrefixLM(), func(b, h, q, kv int) bool { return kv <= q || kv < int(prefix[b]) }},
		{NewMask("doc", dc.At(B(), Q()).Eq(dc.At(B(), KV()))), func(b, h, q, kv int) bool { return doc[b*41+q] == doc[b*41+kv] }},
		{Document(false), func(b, h, q, kv int) bool { return doc[b*41+q] == doc[b*41+kv] }},
		{NewMask("dilated", dist.Le(Const(W)).And(dist.Mod(Const(D)).Eq(Const(0)))), func(b, h, q, kv int) bool {
			dd := max(q-kv, kv-q)
			return dd <= W && pyMod(dd, D) == 0
		}},
		{NewMask("strided", Q().Ge(KV()).And(Q().Sub(KV()).Mod(Const(S)).Eq(Const(0)).Or(Q().Div(Const(S)).Eq(KV().Div(Const(S)))))),
			func(b, h, q, kv int) bool { return q >= kv && (pyMod(q-kv, S) == 0 || pyDiv(q, S) == pyDiv(kv, S)) }},
		{NewMask("chunk", Q().Sub(KV()).Div(Const(S)).Abs().Le(Const(1))), func(b, h, q, kv int) bool {
			return max(pyDiv(q-kv, S), -pyDiv(q-kv, S)) <= 1
		}},
	}
	for _, c := range masks {
		bm, err := NewBlockMask(c.m, a, d, 8, 8)
		if err != nil {
			t.Fatal(err)
		}
		for b := 0; b < d.Batch; b++ {
			for h := 0; h < d.HeadsQ; h++ {
				for q := 0; q < d.LenQ; q++ {
					for kv := 0; kv < d.LenKV; kv++ {
						if got, want := bm.Allowed(b, h, q, kv), c.torch(b, h, q, kv); got != want {
							t.Fatalf("%v at b%d h%d q%d kv%d: %v, PyTorch %v", c.m, b, h, q, kv, got, want)
						}
					}
				}
			}
		}
	}
	cf, sl := FloatTensorParam("c", 1).At(Const(0)), FloatTensorParam("slopes", 1)
	scores := []struct {
		s     *ScoreProgram
		torch func(s float64, b, h, q, kv int) float64
	}{
		{NewScore("alibi", Score().Add(sl.At(H()).Mul(KV().Sub(Q()).Float()))), func(s float64, b, h, q, kv int) float64 { return s + slopes[h]*float64(kv-q) }},
		{ALiBi(), func(s float64, b, h, q, kv int) float64 { return s + slopes[h]*float64(kv-q) }},
		{NewScore("softcap", cf.Mul(Score().Div(cf).Tanh())), func(s float64, b, h, q, kv int) float64 { return C * math.Tanh(s/C) }},
		{SoftcapScalar(), func(s float64, b, h, q, kv int) float64 { return C * math.Tanh(s/C) }},
		{NewScore("tanh", F(C).Mul(Score().Div(F(C)).Tanh())), func(s float64, b, h, q, kv int) float64 { return C * math.Tanh(s/C) }},
		{Softcap(C), func(s float64, b, h, q, kv int) float64 { return C * math.Tanh(s/C) }},
		{NewScore("rel", Score().Add(Q().Sub(KV()).Float())), func(s float64, b, h, q, kv int) float64 { return s + float64(q-kv) }},
		{RelativeBias(M), func(s float64, b, h, q, kv int) float64 { return s + bias[h*(2*M+1)+min(max(q-kv, -M), M)+M] }},
	}
	for _, c := range scores {
		f, err := bind(c.s.plan, "score", a)
		if err != nil {
			t.Fatal(err)
		}
		ev := compileRows(c.s.plan, d.LenKV).newEval(f)
		row := make([]float64, d.LenKV)
		in := make([]float64, d.LenKV)
		for b := 0; b < d.Batch; b++ {
			for h := 0; h < d.HeadsQ; h++ {
				ev.setBH(b, h)
				for q := 0; q < d.LenQ; q++ {
					for kv := range in {
						in[kv] = r.NormFloat64() * 5
					}
					copy(row, in)
					ev.setRow(q)
					ev.scoreRow(0, row)
					for kv, got := range row {
						if want := c.torch(in[kv], b, h, q, kv); math.Abs(got-want) > 1e-12*(1+math.Abs(want)) {
							t.Fatalf("%v at b%d h%d q%d kv%d: %v, PyTorch %v", c.s, b, h, q, kv, got, want)
						}
					}
				}
			}
		}
	}
}
