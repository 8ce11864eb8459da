package flex

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// dflashBenchProblem is the default DFlash benchmark problem of
// `dflash bench attention` (128 anchors x 16, context 768, 4 query heads
// sharing one kv head, head dimension 128).
func dflashBenchProblem(b *testing.B) (Dims, *BlockMask, *DenseMask, []float32, []float32, []float32, []float32) {
	r := rand.New(rand.NewPCG(1, 2))
	d := DFlashDims(1, 4, 1, 128, 16, 768, 128)
	a := make([]int32, 128)
	for i := range a {
		a[i] = int32(r.IntN(768))
	}
	slices.Sort(a)
	args := DFlashArgs(768, a, 128, nil)
	bm, err := NewBlockMask(DFlashMask(16), args, d, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	dm, err := NewDenseMask(DFlashMask(16), args, d, 0)
	if err != nil {
		b.Fatal(err)
	}
	gen := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	q := gen(d.Batch * d.HeadsQ * d.LenQ * d.HeadDim)
	k := gen(d.Batch * d.HeadsKV * d.LenKV * d.HeadDim)
	return d, bm, dm, q, k, gen(len(k)), gen(len(q))
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
	r := rand.New(rand.NewPCG(3, 4))
	d := DFlashDims(1, 32, 8, 512, 16, 3072, 128)
	a := make([]int32, 512)
	for i := range a {
		a[i] = int32(r.IntN(3072))
	}
	slices.Sort(a)
	args := DFlashArgs(3072, a, 512, nil)
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
