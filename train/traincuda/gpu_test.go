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
// missing. Each compares the CUDA backend's optimizer with the CPU
// backend's (or PyTorch's trajectory) on the same values and gradients.

func TestMain(m *testing.M) { gputest.Main(m) }

// hostCPU is the CPU backend of the references.
var hostCPU = tensor.NewCPU[float32](0)

// testAdamW is the optimizer of the GPU tests.
var testAdamW = tensor.AdamW{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}

// TestGPUAdamWArena runs train.Params' AdamW steps over an arena placed on
// the backend and over a copy of it on the CPU backend, on the same values
// and gradients for several steps (weight decay on the matrices only, as
// train.NoDecay decides): the master weights must agree to 1e-6 relative
// (the kernel repeats the CPU's operations, so they are expected bitwise
// equal) and the compute copy must be their bf16 rounding.
func TestGPUAdamWArena(t *testing.T) {
	r := testseed.New(t)
	a, host := testArenas(r, []paramSpec{{"embed.weight", []int{50, 33}}, {"layers.0.input_norm.weight", []int{33}},
		{"layers.0.proj.weight", []int{70, 33}}, {"layers.0.proj.bias", []int{70}}, {"empty.weight", []int{0, 3}}, {"fc.weight", []int{33, 70}}})
	ref, err := train.NewParams(hostCPU, host, testAdamW)
	if err != nil {
		t.Fatal(err)
	}
	gputest.OnBackend(t, tensorcuda.NewBackend, func(d *gpu.Device, b *tensorcuda.Backend) error {
		a.Place(b, true)
		opt, err := train.NewParams(b, a, testAdamW)
		if err != nil {
			return err
		}
		for k := 1; k <= 5; k++ {
			scale := math.Pow(10, float64(r.IntN(5)-3))
			flat := host.HostGrad()
			for i := range flat {
				flat[i] = float32(r.NormFloat64() * scale)
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
		for i, q := range host.Params() {
			for j, want := range q.Data() {
				g := got[a.Offset(i)+j]
				if g == want {
					equal++
				}
				if e := math.Abs(float64(g-want)) / max(math.Abs(float64(want)), 1e-30); !(e <= 1e-6) {
					t.Fatalf("%s[%d]: %g, the CPU's %g", q.Name, j, g, want)
				}
				if c := compute[a.Offset(i)+j]; c != dtype.BF16ToFloat32(dtype.Float32ToBF16(g)) {
					t.Fatalf("%s[%d]: compute copy %g is not the bf16 of %g", q.Name, j, c, g)
				}
			}
		}
		t.Logf("%d of %d weights bitwise equal to the CPU's", equal, a.Len())
		return nil
	})
}

// paramSpec names a parameter of testArenas and gives its shape.
type paramSpec struct {
	name  string
	shape []int
}

// testArenas returns two arenas in host memory of the given parameters
// with the same values N(0, 0.1²): dev, to be placed on a device, and
// host, with its gradient, for the CPU reference.
func testArenas(r *rand.Rand, specs []paramSpec) (dev, host *tensor.Arena[float32]) {
	dev, host = &tensor.Arena[float32]{}, &tensor.Arena[float32]{}
	for _, p := range specs {
		dev.Param(p.name, p.shape...)
		host.Param(p.name, p.shape...)
	}
	dev.Alloc()
	host.Alloc()
	host.EnsureGrad()
	for _, p := range dev.Params() {
		p.FillNormal(r, 0, 0.1)
	}
	copy(host.HostValues(), dev.HostValues())
	return dev, host
}
