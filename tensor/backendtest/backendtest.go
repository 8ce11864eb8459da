// Package backendtest is the conformance suite every tensor backend runs:
// each op's forward against an independent float64 reference, each backward
// against central finite differences of that reference (float64), and the
// CPU float64 backend against both at a tight tolerance. Inputs are random,
// drawn fresh from a seed that is logged (set DFLASH_SEED to replay one).
//
// A backend's test calls Run(t, backend).
package backendtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"dflash/dtype"
	"dflash/internal/testseed"
	"dflash/tensor"
)

// Tol64 bounds the float64 CPU backend's error (forward and backward),
// relative to the largest magnitude of the reference.
const Tol64 = 1e-7

// Tolerances bound a backend's errors, relative to the largest magnitude of
// the reference (Gemm's per unit of depth k+1).
type Tolerances struct {
	Fwd, Bwd, Gemm float64
	// Scale multiplies the per-case overrides (cases whose float32 error is
	// larger by nature, such as long reductions).
	Scale float64
	// HeadDim, when not 0, is the head dimension of the attention cases (a
	// backend whose kernels take only some); 0 keeps the suite's small ones.
	HeadDim int
}

// F32 are the tolerances of a float32 backend.
var F32 = Tolerances{Fwd: 2e-5, Bwd: 2e-4, Gemm: 1e-5, Scale: 1}

// input describes one tensor input of an op case.
type input struct {
	name  string
	shape []int
	grad  bool           // differentiate with respect to it
	gen   func() float64 // value generator; nil = N(0,1)
}

// opCase is one differentiable op checked by the suite. f32 and f64 are the
// same generic function instantiated twice; naive is written independently.
type opCase struct {
	name   string
	inputs []input
	f32    func(tp *tensor.Tape, in []*tensor.Tensor) *tensor.Tensor
	f64    func(tp *tensor.TapeOf[float64], in []*tensor.Of[float64]) *tensor.Of[float64]
	naive  func(in [][]float64) []float64
	// fwd32 and bwd32 override TolFwd32/TolBwd32 when not zero.
	fwd32, bwd32 float64
}

// Run runs every case of the suite against b, each as a subtest: GEMM in all
// four transpose combinations with odd sizes, leading dimensions and
// alpha/beta; embedding, linear (with, without bias, frozen weight), add
// (into a new and into a given output), scale, reshape, concat, slice,
// transpose, RMSNorm (rows of 16 and 1040), QK-norm, RoPE (default and
// llama3 scaling), the fused QK-norm + RoPE + head move (NormRoPE; with and
// without weight or move), SwiGLU (and on one packed product), an MLP block
// (and tensor.MLP, which recomputes its activation), chunked LM-head
// cross-entropy (three chunk sizes, masked and weighted rows), flex
// attention (causal GQA, and a decode-style offset mask), the snapshot
// of master values into AllocHost's memory (HostSnapshot) and the argmax
// of rows with ties, infinities and NaNs (ArgmaxRows, through RowArgmax).
func Run(t *testing.T, b tensor.Backend[float32], tol Tolerances) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	ref := tensor.NewCPU[float64](0)
	t.Run("Gemm", func(t *testing.T) { runGemm(t, b, tol, rng) })
	t.Run("GemmAdd", func(t *testing.T) { runGemmAdd(t, b, tol, rng) })
	t.Run("HostSnapshot", func(t *testing.T) { HostSnapshot(t, b) })
	t.Run("ArgmaxRows", func(t *testing.T) { runArgmax(t, b, rand.New(rand.NewPCG(seed, 0xa4a))) })
	for _, c := range opCases(rng, tol.HeadDim) {
		t.Run(c.name, func(t *testing.T) { runOp(t, c, b, tol, ref, rng) })
	}
}

func runOp(t *testing.T, c opCase, b tensor.Backend[float32], tol Tolerances, ref tensor.Backend[float64], rng *rand.Rand) {
	vals := make([][]float64, len(c.inputs))
	for i, in := range c.inputs {
		n := 1
		for _, d := range in.shape {
			n *= d
		}
		vals[i] = make([]float64, n)
		for j := range vals[i] {
			if in.gen != nil {
				vals[i][j] = in.gen()
			} else {
				vals[i][j] = rng.NormFloat64()
			}
		}
	}
	want := c.naive(vals)
	g := make([]float64, len(want))
	for i := range g {
		g[i] = rng.NormFloat64()
	}

	// The float64 CPU path against the naive reference and finite differences.
	in64 := make([]*tensor.Of[float64], len(c.inputs))
	for i, in := range c.inputs {
		in64[i] = tensor.FromData(in.name, append([]float64(nil), vals[i]...), in.shape...)
		in64[i].RequiresGrad = in.grad
	}
	tp64 := tensor.NewTape(ref)
	got64 := c.f64(tp64, in64)
	Close(t, "forward cpu-f64", got64.Data(), want, Tol64)
	fd := finiteDiff(c, vals, g)
	if tp64.Len() > 0 {
		tp64.BackwardFrom(got64, tensor.Host[float64](g))
	}
	for i, in := range c.inputs {
		if in.grad {
			Close(t, "grad "+in.name+" cpu-f64 vs finite differences", in64[i].Grad(), fd[i], Tol64*100)
		}
	}

	// The backend under test, in three ways: the inputs as leaves whose
	// gradients hold random values already (every backward step adds to
	// them); the inputs as op outputs (Reshape views), whose gradients the
	// op's backward step writes into new storage (Tape.GradDst); and so on
	// a tape that releases gradients (Tape.ReleaseGrads, on a backend with
	// step memory), where an op may hand its output's gradient on to an
	// input as that input's own.
	for _, mode := range []string{"accumulate", "fresh", "release"} {
		t.Run(mode, func(t *testing.T) { runBackend(t, c, b, tol, vals, want, g, fd, mode, rng) })
	}
}

// runBackend checks c's forward result and gradients on b against want and
// the finite differences fd for the upstream gradient g: in mode "fresh"
// and "release" the op reads its inputs through Reshape views (with
// "release" on a tape that releases gradients), in mode "accumulate" the
// inputs' gradients start at random values that must be added to.
func runBackend(t *testing.T, c opCase, b tensor.Backend[float32], tol Tolerances, vals [][]float64, want, g []float64, fd [][]float64, mode string, rng *rand.Rand) {
	tp := tensor.NewTape(b)
	if mode == "release" {
		tp.ReleaseGrads()
	}
	in32 := make([]*tensor.Tensor, len(c.inputs))
	args := make([]*tensor.Tensor, len(c.inputs))
	start := make([][]float64, len(c.inputs))
	for i, in := range c.inputs {
		in32[i] = tensor.FromStorage(in.name, b.Upload(dtype.Convert[float32](vals[i]), false), in.shape...)
		in32[i].RequiresGrad = in.grad
		args[i] = in32[i]
		switch {
		case !in.grad:
		case mode != "accumulate":
			args[i] = tp.Reshape(in32[i], in.shape...)
		default:
			start[i] = make([]float64, len(vals[i]))
			for j := range start[i] {
				start[i][j] = rng.NormFloat64()
			}
			in32[i].GradStore = b.Upload(dtype.Convert[float32](start[i]), false)
		}
	}
	got := c.f32(tp, args)
	fwd, bwd := tol.Fwd, tol.Bwd
	if c.fwd32 != 0 {
		fwd = max(fwd, c.fwd32*tol.Scale)
	}
	if c.bwd32 != 0 {
		bwd = max(bwd, c.bwd32*tol.Scale)
	}
	Close(t, "forward "+b.Name(), download(b, got.Store), want, fwd)
	if tp.Len() > 0 {
		tp.BackwardFrom(got, b.Upload(dtype.Convert[float32](g), false))
	}
	for i, in := range c.inputs {
		if !in.grad {
			continue
		}
		w := fd[i]
		if start[i] != nil {
			w = make([]float64, len(fd[i]))
			for j := range w {
				w[j] = fd[i][j] + start[i][j]
			}
		}
		Close(t, "grad "+in.name+" "+b.Name()+" vs finite differences", download(b, in32[i].GradStore), w, bwd)
	}
}

// finiteDiff returns d/dx Σ g⊙naive(x) for every input that needs a gradient,
// by central differences in float64.
func finiteDiff(c opCase, vals [][]float64, g []float64) [][]float64 {
	out := make([][]float64, len(vals))
	loss := func() float64 {
		y := c.naive(vals)
		var s float64
		for i, v := range y {
			s += g[i] * v
		}
		return s
	}
	for i, in := range c.inputs {
		if !in.grad {
			continue
		}
		out[i] = make([]float64, len(vals[i]))
		for j, x := range vals[i] {
			h := 1e-5 * math.Max(1, math.Abs(x))
			vals[i][j] = x + h
			lp := loss()
			vals[i][j] = x - h
			lm := loss()
			vals[i][j] = x
			out[i][j] = (lp - lm) / (2 * h)
		}
	}
	return out
}

// HostSnapshot checks AllocHost as a checkpoint uses it: master values
// (AllocParams with master) downloaded into AllocHost's memory come back
// bit for bit, the copy does not follow later writes of the values, the
// same buffer takes a second snapshot, and FreeHost gives it back.
func HostSnapshot(t *testing.T, b tensor.Backend[float32]) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 0x4057))
	const n = 4099
	values, _ := b.AllocParams(n, true)
	draw := func() []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		b.WriteParams(values, x)
		return x
	}
	h, err := b.AllocHost(n)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != n {
		t.Fatalf("AllocHost(%d) returned %d elements", n, len(h))
	}
	for round := range 2 {
		x := draw()
		b.Download(values, h)
		draw() // the training after the snapshot
		for i, v := range x {
			if math.Float32bits(h[i]) != math.Float32bits(v) {
				t.Fatalf("snapshot %d: element %d is %g, the values at the snapshot %g", round, i, h[i], v)
			}
		}
	}
	if err := b.FreeHost(h); err != nil {
		t.Fatal(err)
	}
}

// Close fails t unless max|got − want| ≤ tol·max(1e-3, max|want|). It reports the worst element.
func Close[T tensor.Float](t testing.TB, what string, got []T, want []float64, tol float64) {
	t.Helper()
	if err := CloseErr(got, want, tol); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// CloseErr is Close's check as an error.
func CloseErr[T tensor.Float](got []T, want []float64, tol float64) error {
	return closeErr(got, want, tol, 0)
}

// closeErr is CloseErr with the error measured against scale, or against
// max|want| when scale is 0 (and at least 1e-3).
func closeErr[T tensor.Float](got []T, want []float64, tol, scale float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("length %d, want %d", len(got), len(want))
	}
	var big, worst float64
	at := -1
	for i, w := range want {
		big = math.Max(big, math.Abs(w))
		if d := math.Abs(float64(got[i]) - w); d > worst || math.IsNaN(d) {
			worst, at = d, i
			if math.IsNaN(d) {
				worst = math.Inf(1)
			}
		}
	}
	what := "max|want|"
	if scale == 0 {
		scale = math.Max(big, 1e-3)
	} else {
		what = "the terms' scale"
	}
	if worst > tol*scale {
		return fmt.Errorf("max error %.3g at %d (got %g, want %g) exceeds %.1g × %s %.3g", worst, at, float64(got[at]), want[at], tol, what, scale)
	}
	return nil
}

// download returns the values of s, read through b.
func download(b tensor.Backend[float32], s tensor.Storage[float32]) []float32 {
	out := make([]float32, s.Len())
	b.Download(s, out)
	return out
}
