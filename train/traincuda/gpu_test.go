package traincuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/checkreport"
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

// TestGPUAdamW runs several steps of the fused kernel (tensorcuda's
// Ops.AdamW, with tensor.AdamW.Scalars) and of the CPU backend's AdamWStep
// (float64 arithmetic on fp32 state, through train.Params) on the same
// fp32 weights and gradients, for
// each storage dtype's Ops: the weights must agree to 1e-6 relative (the
// kernel repeats the CPU's operations in order, so they are expected to be
// bitwise equal; the count is logged), and the bf16 copy must be the
// rounding of the weights.
func TestGPUAdamW(t *testing.T) {
	w, cache := gputest.Worker0Cache(t)
	for _, dt := range []dtype.DType{dtype.BF16, dtype.F32} {
		t.Run(dt.String(), func(t *testing.T) {
			r := testseed.New(t)
			shapes := []paramSpec{{"layers.0.mlp.weight", []int{33, 7}}, {"layers.0.input_norm.weight", []int{33}},
				{"fc.weight", []int{300, 250}}, {"head.bias", []int{1}}, {"layers.1.q.weight", []int{17, 64}}}
			_, host := testArenas(r, shapes)
			cfg := testAdamW
			opt, err := train.NewParams(hostCPU, host, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var segs []tensorcuda.AdamWSegment
			total := int64(0)
			for i, p := range host.Params() {
				segs = append(segs, tensorcuda.AdamWSegment{Start: total, End: total + int64(p.Numel()), Decay: opt.Decays(i)})
				total += int64(p.Numel())
			}
			var got []float32
			var p16 []uint16
			err = w.Run(func(d *gpu.Device) error {
				o, err := tensorcuda.New(cache, d, dt)
				if err != nil {
					return err
				}
				l, err := tensorcuda.NewAdamWLayout(segs, total)
				if err != nil {
					return err
				}
				var bufs []gpu.Buffer
				defer func() {
					for _, b := range bufs {
						d.Free(b)
					}
				}()
				alloc := func(n int64) gpu.Buffer {
					b, e := gputest.Alloc(d, n)
					if e != nil && err == nil {
						err = e
					}
					bufs = append(bufs, b)
					return b
				}
				table, pb, gb, mb, vb := alloc(int64(8*len(l.Table))), alloc(4*total), alloc(4*total), alloc(4*total), alloc(4*total)
				var p16b gpu.Buffer // bf16 copy written only in the bf16 run
				if dt == dtype.BF16 {
					p16b = alloc(2 * total)
				}
				if err != nil {
					return err
				}
				for _, e := range []error{gpu.Upload(d, table, l.Table), gpu.Upload(d, mb, make([]float32, total)),
					gpu.Upload(d, vb, make([]float32, total)), gpu.Upload(d, pb, host.HostValues())} {
					if e != nil {
						return e
					}
				}
				const steps = 6
				for k := int64(1); k <= steps; k++ {
					gs := math.Pow(10, float64(r.IntN(5)-3)) // gradients of 1e-3 .. 10
					for i := range host.HostGrad() {
						host.HostGrad()[i] = float32(r.NormFloat64() * gs)
					}
					if err := gpu.Upload(d, gb, host.HostGrad()); err != nil {
						return err
					}
					lr := 1e-3 * float64(k)
					opt.Step(lr)
					stepSize, bc2Sqrt, shrink := cfg.Scalars(lr, k)
					if err := o.AdamW(l, table, pb, gb, mb, vb, p16b, tensorcuda.AdamWStep{Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps,
						StepSize: stepSize, BC2Sqrt: bc2Sqrt, Shrink: shrink}); err != nil {
						return err
					}
				}
				got = make([]float32, total)
				if err := gpu.Download(d, got, pb); err != nil {
					return err
				}
				if p16b.Ptr != 0 {
					p16 = make([]uint16, total)
					return gpu.Download(d, p16, p16b)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			want := host.HostValues()
			worst, equal := 0.0, 0
			for i := range want {
				if got[i] == want[i] {
					equal++
				}
				e := math.Abs(float64(got[i])-float64(want[i])) / max(math.Abs(float64(want[i])), 1e-30)
				if math.IsNaN(e) {
					e = math.Inf(1)
				}
				worst = max(worst, e)
			}
			detail := fmt.Sprintf("6 steps, %d weights, %d bitwise equal, max rel err %.3g (tol 1e-6)", total, equal, worst)
			checkreport.Write(t, "tensorcuda", dt.String()+" AdamW vs CPU AdamWStep", worst <= 1e-6, detail,
				map[string]float64{"max_rel_err": worst, "bitwise_equal_frac": float64(equal) / float64(total)})
			if worst > 1e-6 {
				t.Errorf("AdamW weights differ from the CPU backend's: %s", detail)
			}
			for i, v := range got[:len(p16)] {
				if p16[i] != dtype.Float32ToBF16(v) {
					t.Errorf("bf16 copy %d: %#04x, want %#04x (bf16 of %g)", i, p16[i], dtype.Float32ToBF16(v), v)
					break
				}
			}
		})
	}
}
