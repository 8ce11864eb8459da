package model

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"dflash/dtype"
	"dflash/internal/testseed"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

// countingCPU is the CPU backend counting the activation elements it
// allocates (no step memory: nothing is released).
type countingCPU struct {
	*tensor.CPU[float32]
	n int
}

func (c *countingCPU) Alloc(n int) tensor.Storage[float32]     { c.n += n; return c.CPU.Alloc(n) }
func (c *countingCPU) AllocStat(n int) tensor.Storage[float32] { c.n += n; return c.CPU.AllocStat(n) }
func (c *countingCPU) AllocOut(n int) tensor.Storage[float32]  { c.n += n; return c.CPU.AllocOut(n) }

// TestForwardScoped: a forward pass without gradients on a backend with
// step memory (one scope per layer, released) gives bit for bit the states
// and final output of the same pass on the CPU (where nothing is released), for every set of requested states (with and
// without StatesOnly), while holding a fraction of the memory the plain
// pass allocates.
func TestForwardScoped(t *testing.T) {
	rng := testseed.New(t)
	c := tinyConfig(Qwen3, false)
	c.NumLayers = 6
	m := perturbed(t, c, rng.Uint64(), rng.Uint64())
	const batch, length = 2, 11
	ids := randIDs(rng, batch*length, c.VocabSize)
	for _, in := range []Input{
		{States: []int{0, 2, 6}},
		{States: []int{3}},
		{States: []int{1, 4}, StatesOnly: true},
		{States: []int{0}, StatesOnly: true},
		{States: []int{6}, StatesOnly: true},
	} {
		in.IDs, in.Batch, in.Len = ids, batch, length
		plain := m.Forward(tensor.NewInference[float32](tensor.NewCPU[float32](1)), in)
		counting := &countingCPU{CPU: tensor.NewCPU[float32](1)}
		m.Forward(tensor.NewInference[float32](counting), in)
		a := backendtest.NewStepCPU(1)
		scoped := m.Forward(tensor.NewInference[float32](a), in)
		if !slices.Equal(keys(scoped.States), keys(plain.States)) {
			t.Fatalf("%+v: states %v, plain pass %v", in.States, keys(scoped.States), keys(plain.States))
		}
		for i, s := range plain.States {
			if !sameBits(scoped.States[i].Data(), s.Data()) {
				t.Fatalf("States %v StatesOnly %v: state %d differs from the plain pass", in.States, in.StatesOnly, i)
			}
		}
		if (plain.Final == nil) != (scoped.Final == nil) || plain.Final != nil && !sameBits(scoped.Final.Data(), plain.Final.Data()) {
			t.Fatalf("States %v: the final output differs from the plain pass", in.States)
		}
		if in.States[len(in.States)-1] > 1 && a.Peak*2 > counting.n {
			t.Errorf("States %v: the scoped pass held %d elements at once, the plain pass allocates %d", in.States, a.Peak, counting.n)
		}
		t.Logf("States %v StatesOnly %v: peak %d of %d elements", in.States, in.StatesOnly, a.Peak, counting.n)
	}
}

func keys(m map[int]*tensor.Tensor) []int {
	var k []int
	for i := range m {
		k = append(k, i)
	}
	slices.Sort(k)
	return k
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// placingCPU is the CPU backend placing parameters as a device does:
// parameters in host memory it allocates itself (no master copy for a
// frozen model), so that the CPU kernels still run on them,
// counting what is written.
type placingCPU struct {
	*tensor.CPU[float32]
	writes int
}

func (p *placingCPU) AllocParams(n int, master bool) (values, compute tensor.Storage[float32]) {
	compute = make(tensor.Host[float32], n)
	if master {
		values = make(tensor.Host[float32], n)
	}
	return values, compute
}

func (p *placingCPU) WriteParams(dst tensor.Storage[float32], host []float32) {
	p.writes++
	copy(tensor.HostData(dst, "WriteParams"), host)
}

func (p *placingCPU) WriteParamBytes(dst tensor.Storage[float32], dt dtype.DType, raw []byte) {
	p.writes++
	p.CPU.WriteParamBytes(dst, dt, raw)
}

// TestLoadOn: a model loaded onto a backend that places parameters gets
// them written there one tensor at a time (each smaller than a piece),
// frozen (no master values), and
// computes exactly what the model Load reads into host memory computes.
func TestLoadOn(t *testing.T) {
	dir := filepath.Join("testdata", "qwen3-tiny")
	want, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pc := &placingCPU{CPU: tensor.NewCPU[float32](1)}
	m, err := LoadOn(dir, pc)
	if err != nil {
		t.Fatal(err)
	}
	if pc.writes != len(m.Params()) || m.Arena().Values != nil {
		t.Fatalf("%d writes for %d parameters, master values %v: want one write each, frozen", pc.writes, len(m.Params()), m.Arena().Values != nil)
	}
	ids := []int32{5, 17, 3, 99, 42, 7}
	in := Input{IDs: ids, Batch: 2, Len: 3}
	a := want.Forward(tensor.NewInference[float32](tensor.NewCPU[float32](1)), in).Final.Data()
	b := m.Forward(tensor.NewInference[float32](pc), in).Final.Data()
	if !sameBits(a, b) {
		t.Fatal("the model loaded onto the placing backend computes another output")
	}
}
