package flex

import (
	"math"
	"strings"
	"testing"
)

// TestHash checks the structural hash: equal for the same structure (built
// separately, commutative operands swapped), different for other
// constants, parameter names, operators or program kinds.
func TestHash(t *testing.T) {
	x, y := Q().Add(Const(3)), KV().Mul(IntScalar("n"))
	same := []struct {
		name string
		a, b string
	}{
		{"rebuilt dflash", DFlashMask(16).Hash(), DFlashMask(16).Hash()},
		{"rebuilt relbias", RelativeBias(4).Hash(), RelativeBias(4).Hash()},
		{"commuted add", NewMask("a", x.Add(y).Lt(Const(9))).Hash(), NewMask("b", y.Add(x).Lt(Const(9))).Hash()},
		{"commuted and", Causal().And(SlidingWindow(4)).Hash(), SlidingWindow(4).And(Causal()).Hash()},
		{"commuted eq", NewMask("a", x.Eq(y)).Hash(), NewMask("a", y.Eq(x)).Hash()},
		{"name ignored", NewMask("one", Q().Ge(KV())).Hash(), Causal().Hash()},
	}
	for _, c := range same {
		if c.a != c.b {
			t.Errorf("%s: hashes differ", c.name)
		}
	}
	distinct := map[string]string{
		"causal":         Causal().Hash(),
		"window64":       SlidingWindow(64).Hash(),
		"window65":       SlidingWindow(65).Hash(),
		"dflash16":       DFlashMask(16).Hash(),
		"dflash8":        DFlashMask(8).Hash(),
		"sub":            NewMask("s", x.Sub(y).Lt(Const(9))).Hash(),
		"sub swapped":    NewMask("s", y.Sub(x).Lt(Const(9))).Hash(),
		"lt":             NewMask("s", x.Lt(y)).Hash(),
		"gt":             NewMask("s", x.Gt(y)).Hash(),
		"scalar n":       NewMask("s", Q().Lt(IntScalar("n"))).Hash(),
		"scalar m":       NewMask("s", Q().Lt(IntScalar("m"))).Hash(),
		"softcap30":      Softcap(30).Hash(),
		"softcap20":      Softcap(20).Hash(),
		"score identity": NewScore("id", Score()).Hash(),
		"relbias4":       RelativeBias(4).Hash(),
		"relbias5":       RelativeBias(5).Hash(),
		"alibi":          ALiBi().Hash(),
	}
	seen := map[string]string{}
	for name, h := range distinct {
		if len(h) != 64 {
			t.Fatalf("%s: hash %q is not hex SHA-256", name, h)
		}
		if other, ok := seen[h]; ok {
			t.Errorf("%s and %s share hash %s", name, other, h)
		}
		seen[h] = name
	}
	// Scalars and tensors are run-time values: the program, hence the hash,
	// does not see them; two block masks from different anchors share it.
	if NewMask("m", Const(1).Eq(Const(1))).Hash() == NewScore("s", F(1)).Hash() {
		t.Error("mask and score programs share a hash")
	}
}

// TestRowEvalMatchesReference compares the compiled row evaluation of
// random mask and score programs with the reference interpreter, over
// random rows and kv runs of every length.
func TestRowEvalMatchesReference(t *testing.T) {
	r := newRand(t)
	for n := 0; n < 200; n++ {
		d := Dims{Batch: 2, HeadsQ: 3, HeadsKV: 1, LenQ: 50, LenKV: 60, HeadDim: 1}
		a := randArgs(r, d)
		m := NewMask("rand", randBool(r, 5))
		s := randScore(r, d, a)
		width := 1 + r.IntN(40)
		mf, err := bind(m.plan, "mask", a)
		if err != nil {
			t.Fatal(err)
		}
		ev := compileRows(m.plan, width).newEval(mf)
		var sev *rowEval
		if s != nil {
			sf, err := bind(s.plan, "score", a)
			if err != nil {
				t.Fatal(err)
			}
			sev = compileRows(s.plan, width).newEval(sf)
		}
		out := make([]bool, width)
		sc := make([]float64, width)
		for k := 0; k < 5; k++ {
			b, h, q, kv0, w := r.IntN(2), r.IntN(3), r.IntN(50)-3, r.IntN(70)-5, 1+r.IntN(width)
			ev.setBH(b, h)
			ev.setRow(q)
			ev.mask(kv0, w, out)
			for j := 0; j < w; j++ {
				if want := refMask(m, a, b, h, q, kv0+j); out[j] != want {
					t.Fatalf("%v at b%d h%d q%d kv%d: %v, want %v", m, b, h, q, kv0+j, out[j], want)
				}
			}
			if sev == nil {
				continue
			}
			sev.setBH(b, h)
			sev.setRow(q)
			for j := 0; j < w; j++ {
				sc[j] = r.NormFloat64() * 4
			}
			in := append([]float64(nil), sc[:w]...)
			sev.scoreRow(kv0, sc[:w])
			for j := 0; j < w; j++ {
				want := refScore(s, a, b, h, q, kv0+j, in[j])
				if math.Abs(sc[j]-want) > 1e-12*(1+math.Abs(want)) && !(math.IsNaN(want) && math.IsNaN(sc[j])) {
					t.Fatalf("%v at b%d h%d q%d kv%d: %v, want %v", s, b, h, q, kv0+j, sc[j], want)
				}
			}
		}
	}
}

// TestScoreGradMatchesFiniteDifferences checks ∂score/∂s of the reverse
// mode row differentiation against central differences.
func TestScoreGradMatchesFiniteDifferences(t *testing.T) {
	r := newRand(t)
	for n := 0; n < 100; n++ {
		d := Dims{Batch: 1, HeadsQ: 2, HeadsKV: 1, LenQ: 30, LenKV: 30, HeadDim: 1}
		a := randArgs(r, d)
		s := randScore(r, d, a)
		if s == nil {
			continue
		}
		f, err := bind(s.plan, "score", a)
		if err != nil {
			t.Fatal(err)
		}
		ge := compileRows(s.plan, 16).newGradEval(f)
		h, q, kv0, w := r.IntN(2), r.IntN(30), r.IntN(20), 1+r.IntN(16)
		ge.setBH(0, h)
		ge.setRow(q)
		x, g, ds := make([]float64, w), make([]float64, w), make([]float64, w)
		for j := range x {
			x[j], g[j] = r.NormFloat64()*3, r.NormFloat64()
		}
		ge.scoreGrad(kv0, x, g, ds)
		for j := range x {
			e := 1e-6 * math.Max(1, math.Abs(x[j]))
			want := g[j] * (refScore(s, a, 0, h, q, kv0+j, x[j]+e) - refScore(s, a, 0, h, q, kv0+j, x[j]-e)) / (2 * e)
			if math.Abs(ds[j]-want) > 1e-6*(1+math.Abs(want)) {
				t.Fatalf("%v at h%d q%d kv%d s=%v: ds %v, finite difference %v", s, h, q, kv0+j, x[j], ds[j], want)
			}
		}
	}
}

// TestArgsErrors checks that missing or mis-shaped parameters give errors
// that name them, and that malformed programs panic.
func TestArgsErrors(t *testing.T) {
	d := DFlashDims(1, 1, 1, 2, 4, 10, 2)
	good := DFlashArgs(10, []int32{1, 5}, nil, 2, nil)
	for _, c := range []struct {
		name string
		args *Args
		want string
	}{
		{"no scalar", NewArgs().SetIntTensor(DFlashAnchors, []int32{1, 2}, 1, 2).SetIntTensor(DFlashStarts, []int32{0, 0}, 1, 2).
			SetIntTensor(DFlashNumValid, []int32{2}, 1), `int scalar "ctx_len"`},
		{"no tensor", NewArgs().SetInt(DFlashCtxLen, 10).SetIntTensor(DFlashStarts, []int32{0, 0}, 1, 2).
			SetIntTensor(DFlashNumValid, []int32{2}, 1), `int tensor "anchors"`},
		{"no starts", NewArgs().SetInt(DFlashCtxLen, 10).SetIntTensor(DFlashAnchors, []int32{1, 2}, 1, 2).
			SetIntTensor(DFlashNumValid, []int32{2}, 1), `int tensor "block_starts"`},
		{"wrong rank", NewArgs().SetInt(DFlashCtxLen, 10).SetIntTensor(DFlashAnchors, []int32{1, 2}, 2).
			SetIntTensor(DFlashStarts, []int32{0, 0}, 1, 2).SetIntTensor(DFlashNumValid, []int32{2}, 1), `tensor "anchors" with rank 2`},
		{"nil args", nil, "missing"},
	} {
		_, err := NewBlockMask(DFlashMask(4), c.args, d, 0, 0)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to mention %s", c.name, err, c.want)
		}
	}
	if _, err := NewBlockMask(DFlashMask(4), good, d, 0, 0); err != nil {
		t.Fatal(err)
	}
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", name)
			}
		}()
		f()
	}
	mustPanic("shape mismatch", func() { NewArgs().SetIntTensor("x", []int32{1, 2, 3}, 2, 2) })
	mustPanic("score in mask", func() { NewMask("bad", Score().Lt(F(0))) })
	mustPanic("rank mismatch", func() { IntTensorParam("x", 2).At(Q()) })
	mustPanic("reserved name", func() { IntScalar("kv") })
	mustPanic("generated local name", func() { IntScalar("t12") })
	mustPanic("zero expression", func() { Int{}.Add(Q()) })
	mustPanic("kind clash", func() { NewMask("m", IntScalar("n").Lt(IntTensorParam("n", 1).At(Q()))) })
	mustPanic("forward length", func() {
		bm, _ := NewBlockMask(Causal(), nil, Dims{1, 1, 1, 4, 4, 2, false}, 0, 0)
		Forward(Dims{1, 1, 1, 4, 4, 2, false}, make([]float64, 7), make([]float64, 8), make([]float64, 8), bm, nil, nil, 1)
	})
}
