package flex

import (
	"math/rand/v2"
	"slices"
	"testing"

	"dflash/dtype"
)

// dflashBenchProblem is the default DFlash benchmark problem of
// `dflash bench attention` (128 anchors x 16, context 768, 4 query heads
// sharing one kv head, head dimension 128).
func dflashBenchProblem(b *testing.B) (Dims, *BlockMask, *DenseMask, []float32, []float32, []float32, []float32) {
	r := rand.New(rand.NewPCG(1, 2))
	d := DFlashDims(1, 4, 1, 128, 16, 768, 128)
	args := randDFlashArgs(r, 128, 768)
	bm, err := NewBlockMask(DFlashMask(16), args, d, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	dm, err := NewDenseMask(DFlashMask(16), args, d, 0)
	if err != nil {
		b.Fatal(err)
	}
	q, k, v, dout := randQKVO(r, d)
	f32 := dtype.Convert[float32, float64]
	return d, bm, dm, f32(q), f32(k), f32(v), f32(dout)
}

// randDFlashArgs returns the DFlash arguments of one row: n sorted anchors
// drawn from r in a context of ctx tokens, every one valid.
func randDFlashArgs(r *rand.Rand, n, ctx int) *Args {
	a := make([]int32, n)
	for i := range a {
		a[i] = int32(r.IntN(ctx))
	}
	slices.Sort(a)
	return DFlashArgs(ctx, a, nil, n, nil)
}

func BenchmarkDFlashForward(b *testing.B) {
	d, bm, _, q, k, v, _ := dflashBenchProblem(b)
	for b.Loop() {
		Forward(d, q, k, v, bm, nil, nil, 0.088)
	}
}

func BenchmarkDFlashForwardBackward(b *testing.B) {
	d, bm, _, q, k, v, dout := dflashBenchProblem(b)
	for b.Loop() {
		o, l := Forward(d, q, k, v, bm, nil, nil, 0.088)
		Backward(d, q, k, v, o, l, dout, bm, nil, nil, 0.088)
	}
}

func BenchmarkDFlashDenseForward(b *testing.B) {
	d, _, dm, q, k, v, _ := dflashBenchProblem(b)
	for b.Loop() {
		DenseForward(d, q, k, v, dm, nil, nil, 0.088)
	}
}

func BenchmarkDFlashBlockMask(b *testing.B) {
	d := DFlashDims(1, 32, 8, 512, 16, 3072, 128)
	args := randDFlashArgs(rand.New(rand.NewPCG(3, 4)), 512, 3072)
	m := DFlashMask(16)
	for b.Loop() {
		if _, err := NewBlockMask(m, args, d, 0, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDFlashDenseForwardBackward(b *testing.B) {
	d, _, dm, q, k, v, dout := dflashBenchProblem(b)
	for b.Loop() {
		o, l := DenseForward(d, q, k, v, dm, nil, nil, 0.088)
		DenseBackward(d, q, k, v, o, l, dout, dm, nil, nil, 0.088)
	}
}

// BenchmarkRowEval times the compiled row closures (compile_vec.go) on
// programs that use the vector-scalar fast loops, int and float arithmetic,
// comparisons, selects and tensor reads: 64 rows of 128 kv positions each.
func BenchmarkRowEval(b *testing.B) {
	const lenQ, lenKV, width = 64, 1024, 128
	slopes := FloatTensorParam("slopes", 1)
	doc := IntTensorParam("doc", 1)
	d := Q().Sub(KV())
	masks := map[string]*MaskProgram{
		"dflash16": DFlashMask(16),
		"strided": NewMask("strided", Q().Ge(KV()).And(d.Mod(Const(3)).Eq(Const(0)).
			Or(Q().Div(Const(5)).Eq(KV().Div(Const(5)))))),
		"docsel": NewMask("docsel", Select(doc.At(Q()).Eq(doc.At(KV())), d.Abs(), d.Mul(Const(2))).Lt(Const(300))),
	}
	scores := map[string]*ScoreProgram{
		"alibi":    NewScore("alibi", Score().Add(slopes.At(H()).Mul(KV().Sub(Q()).Float()))),
		"softcap":  Softcap(30),
		"selectf":  NewScore("selectf", SelectF(Score().Gt(F(0)), Score().Mul(F(2)), Score().Sub(F(1)).Max(F(-3)))),
		"relbias8": RelativeBias(8),
	}
	anchors := make([]int32, lenQ/16)
	for i := range anchors {
		anchors[i] = int32(100 * i)
	}
	docs := make([]int32, lenKV)
	for i := range docs {
		docs[i] = int32(i / 77)
	}
	args := DFlashArgs(lenKV-lenQ, anchors, nil, len(anchors), nil).
		SetIntTensor("doc", docs, lenKV).
		SetFloatTensor("slopes", []float64{0.5, 0.25}, 2).
		SetFloatTensor(RelBiasName, make([]float64, 2*17), 2, 17)
	for name, m := range masks {
		out := make([]bool, width)
		b.Run("mask/"+name, func(b *testing.B) {
			benchRows(b, m.plan, "mask", args, lenQ, lenKV, width, func(ev *rowEval, kv0, q int) { ev.mask(kv0, width, out) })
		})
	}
	for name, s := range scores {
		sc := make([]float64, width)
		b.Run("score/"+name, func(b *testing.B) {
			benchRows(b, s.plan, "score", args, lenQ, lenKV, width, func(ev *rowEval, kv0, q int) {
				for k := range sc {
					sc[k] = float64(k - q)
				}
				ev.scoreRow(kv0, sc)
			})
		})
	}
}

// benchRows times row evaluation of p: run(ev, kv0, q) for every row q <
// lenQ of head 1 and every run of width kv positions below lenKV.
func benchRows(b *testing.B, p *plan, what string, args *Args, lenQ, lenKV, width int, run func(ev *rowEval, kv0, q int)) {
	f, err := bind(p, what, args)
	if err != nil {
		b.Fatal(err)
	}
	ev := compileRows(p, width).newEval(f)
	for b.Loop() {
		ev.setBH(0, 1)
		for q := range lenQ {
			ev.setRow(q)
			for kv0 := 0; kv0 < lenKV; kv0 += width {
				run(ev, kv0, q)
			}
		}
	}
}
