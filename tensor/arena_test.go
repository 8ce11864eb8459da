package tensor_test

import (
	"slices"
	"strings"
	"testing"

	"dflash/dtype"
	"dflash/internal/testseed"
	"dflash/tensor"
)

func TestArenaViews(t *testing.T) {
	t.Run("float32", func(t *testing.T) { testArenaViews[float32](t) })
	t.Run("float64", func(t *testing.T) { testArenaViews[float64](t) })
}

// testArenaViews declares parameters of random shapes (some empty), then
// checks that every parameter is the range of the flat buffers at its
// offset both ways: a write into the flat buffer shows in the tensor, a
// write into the tensor shows in the buffer; for values and for gradients,
// whichever parameter's EnsureGrad allocates the flat gradient.
func testArenaViews[T tensor.Float](t *testing.T) {
	rng := testseed.New(t)
	var a tensor.Arena[T]
	var ps []*tensor.Of[T]
	var sizes []int
	for i := range 2 + rng.IntN(8) {
		shape := []int{rng.IntN(5), 1 + rng.IntN(7)}[:1+rng.IntN(2)] // empty ones too
		ps = append(ps, a.Param(string(rune('a'+i))+".weight", shape...))
		n := 1
		for _, d := range shape {
			n *= d
		}
		sizes = append(sizes, n)
	}
	a.Alloc()
	total := 0
	for i, p := range ps {
		if a.Offset(i) != total || p.Numel() != sizes[i] || !p.RequiresGrad {
			t.Fatalf("%v: offset %d numel %d (want %d, %d), requires grad %v", p, a.Offset(i), p.Numel(), total, sizes[i], p.RequiresGrad)
		}
		total += sizes[i]
	}
	if a.Len() != total || a.Values.Len() != total || a.Grad != nil {
		t.Fatalf("arena of %d elements has Len %d, Data %d, Grad %v", total, a.Len(), a.Values.Len(), a.Grad)
	}
	// The gradient appears flat whichever parameter asks first.
	ps[rng.IntN(len(ps))].EnsureGrad()
	if a.Grad.Len() != total {
		t.Fatalf("flat gradient has %d elements, want %d", a.Grad.Len(), total)
	}
	for _, buf := range []struct {
		name string
		flat []T
		of   func(*tensor.Of[T]) []T
	}{{"Data", tensor.HostData(a.Values, "values"), func(p *tensor.Of[T]) []T { return p.Data() }}, {"Grad", tensor.HostData(a.Grad, "grad"), func(p *tensor.Of[T]) []T { return p.Grad() }}} {
		for i, p := range ps {
			view := buf.of(p)
			if len(view) != sizes[i] || cap(view) != sizes[i] {
				t.Fatalf("%s of %v: len %d cap %d, want %d", buf.name, p, len(view), cap(view), sizes[i])
			}
			for j := range view {
				v := T(rng.NormFloat64())
				buf.flat[a.Offset(i)+j] = v
				if view[j] != v {
					t.Fatalf("%s[%d] = %v written into the flat buffer; %v[%d] reads %v", buf.name, a.Offset(i)+j, v, p, j, view[j])
				}
				view[j] = v + 1
				if buf.flat[a.Offset(i)+j] != v+1 {
					t.Fatalf("%v[%d] = %v written; flat %s[%d] reads %v", p, j, v+1, buf.name, a.Offset(i)+j, buf.flat[a.Offset(i)+j])
				}
			}
		}
	}
	names := a.Params()
	for i := range names {
		if names[i] != ps[i] {
			t.Fatalf("Params()[%d] = %v, declared %v", i, names[i], ps[i])
		}
	}
	a.ZeroGrad()
	for _, g := range tensor.HostData(a.Grad, "grad") {
		if g != 0 {
			t.Fatal("ZeroGrad left a non-zero gradient")
		}
	}
}

// TestArenaGradientFlows checks that an op's backward pass accumulates into
// the arena's flat gradient: y = x·Wᵀ + b with W and b in one arena, loss
// Σ y, so dW[o,i] = Σ_r x[r,i] and db[o] = rows, compared with those sums.
func TestArenaGradientFlows(t *testing.T) {
	rng := testseed.New(t)
	var a tensor.Arena[float64]
	w, b := a.Param("w", 3, 4), a.Param("b", 3)
	a.Alloc()
	w.FillNormal(rng, 0, 1)
	x := tensor.New[float64]("x", 5, 4)
	x.FillNormal(rng, 0, 1)
	tp := tensor.NewTape[float64](tensor.NewCPU[float64](1))
	y := tp.Linear(x, w, b)
	ones := make([]float64, y.Numel())
	for i := range ones {
		ones[i] = 1
	}
	tp.BackwardFrom(y, tensor.Host[float64](ones))
	for o := range 3 {
		for i := range 4 {
			var want float64
			for r := range 5 {
				want += x.Data()[r*4+i]
			}
			if got := tensor.HostData(a.Grad, "grad")[o*4+i]; abs(got-want) > 1e-12 {
				t.Fatalf("flat dW[%d,%d] = %g, want %g", o, i, got, want)
			}
		}
		if got := tensor.HostData(a.Grad, "grad")[12+o]; got != 5 {
			t.Fatalf("flat db[%d] = %g, want 5", o, got)
		}
	}
}

// mustPanic fails t unless f panics.
func mustPanic(t *testing.T, name string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", name)
		}
	}()
	f()
}

func TestArenaMisuse(t *testing.T) {
	var a tensor.Arena[float32]
	a.Param("w", 2)
	mustPanic(t, "EnsureGrad before Alloc", func() { a.EnsureGrad() })
	a.Alloc()
	mustPanic(t, "Param after Alloc", func() { a.Param("late", 1) })
	mustPanic(t, "second Alloc", a.Alloc)
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// devStore is storage of fakeDevice: host memory in a type the CPU kernels
// do not accept, as a device buffer would be. A compute copy rounds what is
// written to it to float32 (as the CUDA backend's bf16 copy rounds).
type devStore struct {
	h     tensor.Host[float64]
	round bool
}

func (s devStore) Len() int           { return len(s.h) }
func (s devStore) DType() dtype.DType { return dtype.F64 }
func (s devStore) Slice(lo, hi int) tensor.Storage[float64] {
	return devStore{s.h[lo:hi:hi], s.round}
}
func (s devStore) Like(n int) tensor.Storage[float64] {
	return devStore{make(tensor.Host[float64], n), false}
}
func (s devStore) LikeOut(n int) tensor.Storage[float64] { return s.Like(n) }

// fakeDevice places parameters in devStore: masters as given, compute
// copies rounded to float32.
type fakeDevice struct{ *tensor.CPU[float64] }

func (f fakeDevice) AllocParams(n int, master bool) (values, compute tensor.Storage[float64]) {
	compute = devStore{make(tensor.Host[float64], n), true}
	if master {
		values = devStore{make(tensor.Host[float64], n), false}
	}
	return values, compute
}

func (f fakeDevice) WriteParams(dst tensor.Storage[float64], host []float64) {
	d := dst.(devStore)
	for i, x := range host {
		if d.round {
			x = float64(float32(x))
		}
		d.h[i] = x
	}
}

// HostParams returns false: fakeDevice's parameters are its own storage.
func (f fakeDevice) HostParams() bool { return false }

func (f fakeDevice) Download(s tensor.Storage[float64], dst []float64) { copy(dst, s.(devStore).h) }

// TestArenaPlaceFetch: Place points every parameter at its range of the
// backend's compute copy and allocates gradients alike the master values;
// Fetch brings the masters back to host memory unchanged; a frozen arena
// keeps no masters and refuses gradients.
func TestArenaPlaceFetch(t *testing.T) {
	rng := testseed.New(t)
	build := func() (*tensor.Arena[float64], []*tensor.Of[float64]) {
		var a tensor.Arena[float64]
		ps := []*tensor.Of[float64]{a.Param("w", 3, 5), a.Param("b", 5), a.Param("n", 2)}
		a.Alloc()
		for _, p := range ps {
			p.FillNormal(rng, 0, 1)
		}
		return &a, ps
	}
	a, ps := build()
	want := slices.Clone(a.HostValues())
	dev := fakeDevice{tensor.NewCPU[float64](1)}
	a.Place(dev, true)
	for i, p := range ps {
		got := p.Store.(devStore).h
		for j, x := range got {
			if w := float64(float32(want[a.Offset(i)+j])); x != w {
				t.Fatalf("%s[%d] reads %v, want the compute copy %v", p.Name, j, x, w)
			}
		}
	}
	g := a.EnsureGrad()
	if _, ok := g.(devStore); !ok || g.Len() != a.Len() || ps[1].GradStore.Len() != 5 {
		t.Fatalf("gradient %T of %d elements, want the device's, %d", g, g.Len(), a.Len())
	}
	a.Fetch(dev)
	if !slices.Equal(a.HostValues(), want) || a.Grad != nil || ps[0].HasGrad() {
		t.Fatal("Fetch did not bring back the master values, or kept the gradients")
	}
	if &ps[2].Data()[0] != &a.HostValues()[a.Offset(2)] {
		t.Fatal("after Fetch the parameters are not views of the host values")
	}
	frozen, _ := build()
	frozen.Place(dev, false)
	if frozen.Values != nil {
		t.Fatal("a frozen arena kept master values")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("EnsureGrad on a frozen arena did not panic")
		}
	}()
	frozen.EnsureGrad()
}

// TestFP8ParamsNeedDevice: the CPU holds no FP8 parameters; placing or
// allocating an arena with FP8 matrices there is an error, not a silent
// bf16 or float32 arena, and the arena stays usable in host memory.
func TestFP8ParamsNeedDevice(t *testing.T) {
	a := &tensor.Arena[float32]{}
	w := a.Param("w", 4, 16)
	a.Alloc()
	cpu := tensor.NewCPU[float32](1)
	if err := a.PlaceFP8(cpu, []*tensor.Tensor{w}); err == nil || !strings.Contains(err.Error(), "device") {
		t.Errorf("PlaceFP8 on the CPU: %v, want an error naming the device", err)
	}
	w.Data()[0] = 1
	b := &tensor.Arena[float32]{}
	b.Param("v", 2, 16)
	if err := b.AllocOnFP8(cpu, nil); err == nil || !strings.Contains(err.Error(), "cannot hold FP8") {
		t.Errorf("AllocOnFP8 on the CPU: %v, want cannot hold FP8", err)
	}
}
