package traincuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/testseed"
	"dflash/tensor"
	"dflash/tensor/tensorcuda"
	"dflash/train"
)

// GPU tests (names with GPU) run on the GPU machine as a compiled test binary
// (scripts/gpu-train.sh); here they skip with a message naming what is
// missing. Each compares the device with package train's CPU optimizer (or
// PyTorch's trajectory) on the same values and gradients.

func TestMain(m *testing.M) { gputest.Main(m) }

// gpuBackend runs f on GPU 0's worker with a Backend on the shared cache,
// or skips when there is no GPU or NVRTC.
func gpuBackend(t *testing.T, f func(d *gpu.Device, b *tensorcuda.Backend) error) {
	w, cache := gputest.Worker0Cache(t)
	err := w.Run(func(d *gpu.Device) error {
		b, err := tensorcuda.NewBackend(cache, d)
		if err != nil {
			return err
		}
		defer b.Close()
		return f(d, b)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGPUAdamWArena runs Device's AdamW steps over an arena placed on the
// backend and train.AdamW over the same values and gradients on the host
// for several steps (weight decay on the matrices only, as
// train.DefaultNoDecay decides): the master weights must agree to 1e-6 relative (the kernel repeats
// the CPU's operations, so they are expected bitwise equal) and the compute
// copy must be their bf16 rounding.
func TestGPUAdamWArena(t *testing.T) {
	r := testseed.New(t)
	a, params := testArena(r, []paramSpec{{"embed.weight", []int{50, 33}}, {"layers.0.input_norm.weight", []int{33}},
		{"layers.0.proj.weight", []int{70, 33}}, {"layers.0.proj.bias", []int{70}}, {"empty.weight", []int{0, 3}}, {"fc.weight", []int{33, 70}}})
	cfg := train.AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	ref := train.NewAdamW(params, cfg)
	gpuBackend(t, func(d *gpu.Device, b *tensorcuda.Backend) error {
		a.Place(b, true)
		opt, err := NewDevice(b, a, cfg)
		if err != nil {
			return err
		}
		flat := make([]float32, a.Len())
		for k := 1; k <= 5; k++ {
			scale := math.Pow(10, float64(r.IntN(5)-3))
			for i := range flat {
				flat[i] = float32(r.NormFloat64() * scale)
			}
			for i, q := range params {
				copy(q.Grad, flat[a.Offset(i):])
			}
			if err := gpu.Upload(d, a.Grad.(tensorcuda.Buf).Buffer(), flat); err != nil {
				return err
			}
			lr := 1e-3 * float64(k)
			opt.Step(lr)
			ref.Step(lr)
		}
		got, compute := make([]float32, a.Len()), make([]float32, a.Len())
		b.Download(a.Values, got)
		b.Download(a.Compute, compute)
		equal := 0
		for i, q := range params {
			for j, want := range q.Data {
				g := got[a.Offset(i)+j]
				if g == want {
					equal++
				}
				if e := math.Abs(float64(g-want)) / max(math.Abs(float64(want)), 1e-30); !(e <= 1e-6) {
					t.Fatalf("%s[%d]: %g, train.AdamW %g", q.Name, j, g, want)
				}
				if c := compute[a.Offset(i)+j]; c != dtype.BF16ToFloat32(dtype.Float32ToBF16(g)) {
					t.Fatalf("%s[%d]: compute copy %g is not the bf16 of %g", q.Name, j, c, g)
				}
			}
		}
		t.Logf("%d of %d weights bitwise equal to train.AdamW", equal, a.Len())
		return nil
	})
}

// paramSpec names a parameter of testArena and gives its shape.
type paramSpec struct {
	name  string
	shape []int
}

// testArena returns an arena (in host memory) of the given parameters with
// values N(0, 0.1²), and train.Params holding copies of them.
func testArena(r *rand.Rand, specs []paramSpec) (*tensor.Arena[float32], []*train.Param) {
	var a tensor.Arena[float32]
	for _, p := range specs {
		a.Param(p.name, p.shape...)
	}
	a.Alloc()
	var params []*train.Param
	for _, p := range a.Params() {
		p.FillNormal(r, 0, 0.1)
		q := train.NewParam(p.Name, p.Shape...)
		copy(q.Data, p.Data())
		params = append(params, q)
	}
	return &a, params
}
