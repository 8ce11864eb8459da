package tensorcuda

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"dflash/cuda"
	"dflash/dtype"
	"dflash/flex"
	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/testseed"
	"dflash/tensor"
)

// These tests run the Backend on a fake device: host bytes behind fake
// addresses (fakeMem) and the fake kernel runner, which records launches.

// fakeMem is the backend's memory interface on a gputest.FakeMem.
type fakeMem struct {
	*gputest.FakeMem
	trims     int
	hosts     map[*byte]bool // host memory from allocHost not yet freed
	downloads []*byte        // the destination of every download, in order
}

func newFakeMem() *fakeMem { return &fakeMem{FakeMem: gputest.NewFakeMem()} }

func (m *fakeMem) alloc(n int64) (gpu.Buffer, error)     { return m.Alloc(n) }
func (m *fakeMem) free(b gpu.Buffer)                     { m.Free(b) }
func (m *fakeMem) zero(b gpu.Buffer) error               { clear(m.Bytes(b)); return nil }
func (m *fakeMem) upload(b gpu.Buffer, src []byte) error { copy(m.Bytes(b), src); return nil }
func (m *fakeMem) sync() error                           { return nil }
func (m *fakeMem) trim() error                           { m.trims++; return nil }

func (m *fakeMem) download(dst []byte, b gpu.Buffer) error {
	if len(dst) > 0 {
		m.downloads = append(m.downloads, &dst[0])
	}
	copy(dst, m.Bytes(b))
	return nil
}

func (m *fakeMem) allocHost(n int64) ([]byte, error) {
	h := make([]byte, n)
	if m.hosts == nil {
		m.hosts = map[*byte]bool{}
	}
	m.hosts[&h[0]] = true
	return h, nil
}

func (m *fakeMem) freeHost(b []byte) error {
	if !m.hosts[&b[0]] {
		return errors.New("fakeMem: freeHost of memory allocHost did not return")
	}
	delete(m.hosts, &b[0])
	return nil
}

// fakeBackend returns a Backend on fake memory with fake bf16 and fp32 Ops.
func fakeBackend() (*Backend, *fakeRun, *fakeRun, *fakeMem) {
	bf, bfRun := fakeOps(dtype.BF16)
	f32, f32Run := fakeOps(dtype.F32)
	mem := newFakeMem()
	return newBackend(nil, nil, bf, f32, mem, nil), bfRun, f32Run, mem
}

// launches returns the kernels launched since the last call as
// "dtype:name" (gemms as "dtype:gemm in->out"), sorted, and forgets them.
func launches(bfRun, f32Run *fakeRun) []string {
	var out []string
	for _, r := range []struct {
		dt  string
		run *fakeRun
	}{{"bf16", bfRun}, {"f32", f32Run}} {
		for name, n := range r.run.launched {
			if name == "gemm" {
				continue
			}
			for range n {
				out = append(out, r.dt+":"+name)
			}
		}
		for _, g := range r.run.gemms {
			out = append(out, fmt.Sprintf("%s:gemm %s->%s", r.dt, g.In, g.Out))
		}
		r.run.launched, r.run.gemms = map[string]int{}, nil
	}
	sort.Strings(out)
	return out
}

// panicText runs f and returns what it panicked with ("" if it did not).
func panicText(f func()) (s string) {
	defer func() {
		if r := recover(); r != nil {
			s = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}

// TestBackendDispatch checks which kernels each dtype combination of each
// op reaches, and that combinations without a kernel panic naming the op
// and the dtypes.
func TestBackendDispatch(t *testing.T) {
	b, bfRun, f32Run, _ := fakeBackend()
	rope, err := tensor.NewRope(8, 1e4, nil)
	if err != nil {
		t.Fatal(err)
	}
	bf := func(n int) tensor.Storage[float32] { return b.Alloc(n) }
	f32 := func(n int) tensor.Storage[float32] { return b.AllocStat(n) }
	_, param := b.AllocParams(64, true) // the compute copy: bf16, persistent
	pgrad := b.AllocStat(64)
	ids := b.UploadInts([]int32{1, 0, 3})
	none := tensor.Storage[float32](nil)
	for _, c := range []struct {
		name  string
		f     func()
		want  []string
		panic string
	}{
		{"Gemm bf16 out", func() { b.Gemm(false, true, 2, 3, 4, 1, bf(8), 4, param, 4, 0, bf(6), 3) }, []string{"bf16:gemm bf16->bf16"}, ""},
		{"Gemm weight gradient f32", func() { b.Gemm(true, false, 3, 4, 2, 1, bf(6), 3, bf(8), 4, 1, pgrad, 4) }, []string{"bf16:gemm bf16->f32"}, ""},
		{"Gemm f32 loss", func() { b.Gemm(false, false, 1, 1, 5, 1, f32(5), 5, f32(5), 1, 0, f32(1), 1) }, []string{"f32:gemm f32->f32"}, ""},
		{"Gemm mixed inputs", func() { b.Gemm(false, false, 1, 1, 5, 1, bf(5), 5, f32(5), 1, 0, f32(1), 1) }, nil, "Gemm: dtypes (bf16, f32, f32)"},
		{"Axpy bf16", func() { b.Axpy(2, bf(9), bf(9)) }, []string{"bf16:op_axpy"}, ""},
		{"Axpy f32", func() { b.Axpy(2, f32(9), f32(9)) }, []string{"f32:op_axpy"}, ""},
		{"Axpy bf16 into f32", func() { b.Axpy(2, bf(9), f32(9)) }, []string{"bf16:op_axpy_to_f32"}, ""},
		{"Axpy f32 into bf16", func() { b.Axpy(2, f32(9), bf(9)) }, []string{"bf16:op_axpy_from_f32"}, ""},
		{"Axpy lengths", func() { b.Axpy(2, bf(9), bf(8)) }, nil, "Axpy: length 9, want 8"},
		{"AxpyBy bf16", func() { b.AxpyBy(1, f32(1), bf(9), bf(9)) }, []string{"bf16:op_axpy_by"}, ""},
		{"AxpyBy f32", func() { b.AxpyBy(1, f32(1), f32(9), f32(9)) }, []string{"f32:op_axpy_by"}, ""},
		{"AxpyBy bf16 into f32", func() { b.AxpyBy(1, f32(1), bf(9), f32(9)) }, []string{"bf16:op_axpy_to_f32"}, ""},
		{"AxpyBy bf16 scalar", func() { b.AxpyBy(1, bf(1), bf(9), bf(9)) }, nil, "AxpyBy: a statistic is bf16"},
		{"Fill zero", func() { b.Fill(bf(9), 0) }, nil, ""},
		{"Fill bf16", func() { b.Fill(bf(9), 1) }, []string{"bf16:op_fill"}, ""},
		{"Fill f32", func() { b.Fill(f32(9), 1) }, []string{"f32:op_fill"}, ""},
		{"Scale", func() { b.Scale(3, f32(9)) }, []string{"f32:op_scale"}, ""},
		{"AddRows", func() { b.AddRows(bf(12), param.Slice(0, 4)) }, []string{"bf16:op_add_rows"}, ""},
		{"AddRows mixed", func() { b.AddRows(bf(12), f32(4)) }, nil, "AddRows: dtypes (bf16, f32)"},
		{"SumRows into f32", func() { b.SumRows(bf(12), pgrad.Slice(0, 4)) }, []string{"bf16:op_colsum", "bf16:op_sum_rows"}, ""},
		{"SumRows into bf16", func() { b.SumRows(bf(12), bf(4)) }, []string{"bf16:op_axpy_from_f32", "bf16:op_colsum", "bf16:op_sum_rows"}, ""},
		{"Copy2D", func() { b.Copy2D(2, 3, bf(6), 3, 0, bf(8), 4, 1, false) }, []string{"bf16:op_copy2d"}, ""},
		{"Copy2D accumulate into f32", func() { b.Copy2D(2, 3, bf(6), 3, 0, f32(8), 4, 1, true) }, []string{"bf16:op_axpy_to_f32", "bf16:op_copy2d"}, ""},
		{"Copy2D mixed", func() { b.Copy2D(2, 3, bf(6), 3, 0, f32(8), 4, 1, false) }, nil, "Copy2D: dtypes (bf16, f32)"},
		{"Transpose12", func() { b.Transpose12(1, 2, 3, 4, bf(24), bf(24), false) }, []string{"bf16:op_transpose12"}, ""},
		{"Gather", func() { b.Gather(param, 16, ids, bf(48)) }, []string{"bf16:op_gather"}, ""},
		{"Gather mixed", func() { b.Gather(param, 16, ids, f32(48)) }, nil, "Gather: dtypes (bf16, f32)"},
		{"rotary table", func() { tensor.Table[float32](b, rope, []int32{0, 5, 2}) }, []string{"f32:op_gather", "f32:op_gather"}, ""},
		{"ScatterAdd into f32", func() { b.ScatterAdd(bf(48), 16, ids, pgrad) }, []string{"bf16:op_scatter_add"}, ""},
		{"ScatterAdd into bf16", func() { b.ScatterAdd(bf(48), 16, ids, bf(64)) }, []string{"bf16:op_axpy_from_f32", "bf16:op_scatter_add"}, ""},
		{"RMSNorm", func() { b.RMSNorm(bf(32), param.Slice(0, 16), 16, 1e-6, bf(32), f32(2)) }, []string{"bf16:op_rmsnorm_fwd_small"}, ""},
		{"RMSNorm bf16 rstd", func() { b.RMSNorm(bf(32), param.Slice(0, 16), 16, 1e-6, bf(32), bf(2)) }, nil, "RMSNorm: a statistic is bf16"},
		{"RMSNormBackward dw f32", func() {
			b.RMSNormBackward(bf(32), param.Slice(0, 16), f32(2), bf(32), 16, bf(32), pgrad.Slice(0, 16), true)
		},
			[]string{"bf16:op_colsum", "bf16:op_rmsnorm_bwd_dw", "bf16:op_rmsnorm_bwd_dx_small"}, ""},
		{"RMSNormBackward dw bf16", func() { b.RMSNormBackward(bf(32), bf(16), f32(2), bf(32), 16, none, bf(16), true) },
			[]string{"bf16:op_axpy_from_f32", "bf16:op_colsum", "bf16:op_rmsnorm_bwd_dw"}, ""},
		{"RoPE", func() { b.RoPE(bf(24), 3, 4, f32(4), f32(4), bf(24), false, false) }, []string{"bf16:op_rope"}, ""},
		{"RoPE inverse into f32", func() { b.RoPE(bf(24), 3, 4, f32(4), f32(4), f32(24), true, true) }, []string{"bf16:op_axpy_to_f32", "bf16:op_rope"}, ""},
		{"SwiGLU", func() { b.SwiGLU(bf(8), bf(8), bf(8)) }, []string{"bf16:op_swiglu_fwd"}, ""},
		{"SwiGLUBackward", func() { b.SwiGLUBackward(bf(8), bf(8), bf(8), bf(8), none, true) }, []string{"bf16:op_swiglu_bwd"}, ""},
		{"SwiGLUBackward into f32", func() { b.SwiGLUBackward(bf(8), bf(8), bf(8), f32(8), f32(8), true) },
			[]string{"bf16:op_axpy_to_f32", "bf16:op_axpy_to_f32", "bf16:op_swiglu_bwd"}, ""},
		{"SwiGLUPacked", func() { b.SwiGLUPacked(bf(16), 4, bf(8)) }, []string{"bf16:op_swiglu_packed_fwd"}, ""},
		{"SwiGLUPacked lengths", func() { b.SwiGLUPacked(bf(15), 4, bf(8)) }, nil, "SwiGLUPacked y2: length 15, want 16"},
		{"SwiGLUPackedBackward", func() { b.SwiGLUPackedBackward(bf(16), bf(8), 4, bf(16), false) }, []string{"bf16:op_swiglu_packed_bwd"}, ""},
		{"SwiGLUPackedBackward into f32", func() { b.SwiGLUPackedBackward(bf(16), bf(8), 4, f32(16), true) },
			[]string{"bf16:op_axpy_to_f32", "bf16:op_swiglu_packed_bwd"}, ""},
		{"SoftmaxXent", func() { b.SoftmaxXent(bf(30), 3, 10, ids, f32(3), f32(3), b.AllocInts(3)) }, []string{"bf16:op_softmax_xent"}, ""},
		{"SoftmaxXent bf16 loss", func() { b.SoftmaxXent(bf(30), 3, 10, ids, f32(3), bf(3), b.AllocInts(3)) }, nil, "SoftmaxXent: a statistic is bf16"},
		{"ArgmaxRows bf16", func() { b.ArgmaxRows(bf(30), 3, 10, b.AllocInts(3)) }, []string{"bf16:op_argmax_rows"}, ""},
		{"ArgmaxRows f32", func() { b.ArgmaxRows(f32(30), 3, 10, b.AllocInts(3)) }, []string{"f32:op_argmax_rows"}, ""},
		{"ArgmaxRows lengths", func() { b.ArgmaxRows(bf(29), 3, 10, b.AllocInts(3)) }, nil, "ArgmaxRows x: length 29, want 30"},
		{"ArgmaxRows ids", func() { b.ArgmaxRows(bf(30), 3, 10, b.AllocInts(2)) }, nil, "ArgmaxRows out: length 2, want 3"},
		{"Attention score", func() { b.Attention(flex.Dims{}, bf(1), bf(1), bf(1), nil, flex.Softcap(30), 1) }, nil, "score programs are not yet on CUDA"},
		{"host storage", func() { b.Axpy(1, tensor.Host[float32]{1}, bf(1)) }, nil, "Axpy x is tensor.Host[float32], not CUDA backend storage"},
	} {
		t.Run(c.name, func(t *testing.T) {
			launches(bfRun, f32Run)
			got := panicText(c.f)
			if c.panic == "" && got != "" || !strings.Contains(got, c.panic) {
				t.Fatalf("panic %q, want one containing %q", got, c.panic)
			}
			if l := launches(bfRun, f32Run); c.panic == "" && !slices.Equal(l, c.want) {
				t.Errorf("launched %v, want %v", l, c.want)
			}
		})
	}
}

// TestBufViews checks Slice and Like arithmetic, the storage classes'
// dtypes, and the round trip of values through Upload and Download (bf16
// rounds to nearest even, also when written in pieces; fp32 is exact).
func TestBufViews(t *testing.T) {
	b, _, _, mem := fakeBackend()
	for _, dt := range []dtype.DType{dtype.BF16, dtype.F32} {
		s := b.newBuf(10, dt, false, true)
		v := s.Slice(3, 7).(Buf)
		if v.n != 4 || v.ptr != s.ptr+cuda.DevicePtr(3*dt.Size()) || v.dt != dt {
			t.Errorf("%v: Slice(3, 7) of %v is %v", dt, s, v)
		}
		if w := v.Slice(1, 2).(Buf); w.ptr != s.ptr+cuda.DevicePtr(4*dt.Size()) || w.n != 1 {
			t.Errorf("%v: slice of a slice is %v", dt, w)
		}
		if p := panicText(func() { v.Slice(2, 5) }); !strings.Contains(p, "Buf.Slice(2, 5) of 4 elements") {
			t.Errorf("out-of-range slice: panic %q", p)
		}
		l := v.Like(5).(Buf)
		if l.n != 5 || l.dt != dt || l.step != b.gen {
			t.Errorf("%v: Like(5) of a step buffer is %v (step %d)", dt, l, l.step)
		}
	}
	if d := b.Alloc(1).DType(); d != dtype.BF16 {
		t.Errorf("Alloc gives %v, want bf16", d)
	}
	if d := b.AllocStat(1).DType(); d != dtype.F32 {
		t.Errorf("AllocStat gives %v, want f32", d)
	}
	values, compute := b.AllocParams(3, true)
	if values.DType() != dtype.F32 || compute.DType() != dtype.BF16 || values.(Buf).step != 0 || compute.(Buf).step != 0 {
		t.Errorf("AllocParams: values %v, compute %v", values, compute)
	}
	b.WriteParams(values, []float32{1, 2.001, 3})
	b.WriteParams(compute, []float32{1, 2.001, 3})
	got := make([]float32, 3)
	if b.Download(values, got); got[1] != 2.001 {
		t.Errorf("master values after WriteParams: %v", got)
	}
	if b.Download(compute, got); got[1] != 2 {
		t.Errorf("compute copy after WriteParams: %v, want bf16 roundings", got)
	}
	allocs := mem.Allocs
	g := values.Like(3).(Buf)
	if g.step != 0 || g.dt != dtype.F32 || mem.Allocs != allocs+1 {
		t.Errorf("Like of parameter values: %v step %d, %d allocations (want persistent fp32, one allocation)", g, g.step, mem.Allocs-allocs)
	}
	if v, _ := b.AllocParams(1, false); v != nil {
		t.Errorf("AllocParams without master: values %v, want nil", v)
	}

	rng := testseed.New(t)
	x := make([]float32, 37)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	defer func(c int) { writeChunk = c }(writeChunk)
	for _, chunk := range []int{writeChunk, 10} { // 10 bytes: bf16 encoded and staged 5 elements at a time
		writeChunk = chunk
		for _, stat := range []bool{false, true} {
			got := make([]float32, len(x))
			b.Download(b.Upload(x, stat).Slice(0, len(x)), got)
			for i, v := range x {
				want := v
				if !stat {
					want = dtype.BF16ToFloat32(dtype.Float32ToBF16(v))
				}
				if got[i] != want {
					t.Fatalf("write pieces of %d bytes, stat %v: element %d: %g came back %g, want %g", chunk, stat, i, v, got[i], want)
				}
			}
		}
	}
	ids := []int32{5, -1, 1 << 30, 7}
	gotIDs := make([]int32, 2)
	b.DownloadInts(b.UploadInts(ids).Slice(1, 3), gotIDs)
	if !slices.Equal(gotIDs, ids[1:3]) {
		t.Errorf("ints: %v, want %v", gotIDs, ids[1:3])
	}
}

// TestStepArena checks that a step repeating the last one's allocations
// gets the same addresses without allocating from the device, that
// allocations are aligned and disjoint, that ResetStep invalidates step storage
// (the ops panic naming it) and not parameters, and that Alloc is zeroed
// when its memory is reused.
func TestStepArena(t *testing.T) {
	b, _, _, mem := fakeBackend()
	b.arena.chunk = 4096
	_, param := b.AllocParams(2, true)
	sizes := []int{1, 300, 5000, 7, 2048, 2048, 1, 100000, 3}
	step := func() []gpu.Buffer {
		var ps []gpu.Buffer
		for i, n := range sizes {
			var s Buf
			if i%2 == 0 {
				s = b.Alloc(n).(Buf)
			} else {
				s = b.AllocStat(n).(Buf)
			}
			b.Fill(s, 1) // the fake runner writes nothing; make the memory nonzero by hand
			for j := range mem.Bytes(s.Buffer()) {
				mem.Bytes(s.Buffer())[j] = 0xab
			}
			ps = append(ps, s.Buffer())
		}
		return ps
	}
	first := step()
	for i, p := range first {
		if p.Ptr%arenaAlign != 0 {
			t.Errorf("allocation %d at %#x is not %d-aligned", i, uint64(p.Ptr), arenaAlign)
		}
		for j, q := range first[:i] {
			if p.Ptr < q.Ptr+cuda.DevicePtr(q.Size) && q.Ptr < p.Ptr+cuda.DevicePtr(p.Size) {
				t.Errorf("allocation %d %+v overlaps allocation %d %+v", i, p, j, q)
			}
		}
	}
	stale := b.Alloc(4)
	b.ResetStep() // the first step took several chunks: they become one
	if len(b.arena.chunks) != 1 || mem.trims != 1 || mem.Live() != 3 {
		t.Errorf("after a step of several chunks: %d chunks, %d trims, %d device blocks; want 1, 1, 3 (with the two of the parameters)", len(b.arena.chunks), mem.trims, mem.Live())
	}
	second := step()
	b.ResetStep()
	allocs := mem.Allocs
	if third := step(); !slices.Equal(third, second) {
		t.Errorf("addresses after ResetStep %v, want %v", third, second)
	}
	if mem.Allocs != allocs {
		t.Errorf("repeating the step allocated %d chunks", mem.Allocs-allocs)
	}
	b.ResetStep()
	z := b.Alloc(sizes[0])
	for _, v := range mem.Bytes(z.(Buf).Buffer()) {
		if v != 0 {
			t.Fatal("Alloc over reused memory is not zero")
		}
	}
	if p := panicText(func() { b.Scale(2, stale) }); !strings.Contains(p, "Scale was allocated in step 1 and used after ResetStep (now step 4)") {
		t.Errorf("stale storage: panic %q", p)
	}
	if p := panicText(func() { b.Scale(2, param) }); p != "" {
		t.Errorf("parameter after ResetStep: panic %q", p)
	}
	if st := b.StepBytes(); st.Reserved < st.Peak || st.Peak < 100000*4 || st.Chunks != 1 {
		t.Errorf("StepBytes: %+v", st)
	}
	b.Close()
	if mem.Live() != 0 {
		t.Errorf("Close left %d allocations", mem.Live())
	}
}

// TestAdamWArenaLayout checks the segments NewAdamState makes from an
// arena (empty parameters skipped, decay as the flags say), that
// AdamWStep counts the steps and launches the fused kernel once each, and
// the errors for arenas it cannot take.
func TestAdamWArenaLayout(t *testing.T) {
	b, bfRun, _, _ := fakeBackend()
	var a tensor.Arena[float32]
	a.Param("embed.weight", 5, 4)
	a.Param("empty.weight", 0, 4)
	a.Param("layers.0.input_norm.weight", 4)
	a.Param("fc.weight", 3, 4)
	a.Alloc()
	decay := []bool{true, true, false, true}
	h := tensor.AdamW{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	if _, err := b.NewAdamState(&a, h, decay); err == nil || !strings.Contains(err.Error(), "not fp32 parameter memory of this backend") {
		t.Errorf("host arena: %v", err)
	}
	a.Place(b, true)
	if _, err := b.NewAdamState(&a, h, decay[:3]); err == nil || !strings.Contains(err.Error(), "3 decay flags for 4 parameters") {
		t.Errorf("too few flags: %v", err)
	}
	a.EnsureGrad()
	st, err := b.NewAdamState(&a, h, decay)
	if err != nil {
		t.Fatal(err)
	}
	l := st.Table.(*adamTable).layout
	want := []int64{0, 20, 1, 20, 24, 0, 24, 36, 1}
	if !slices.Equal(l.Table, want) || l.Total != 36 {
		t.Errorf("table %v over %d, want %v over 36", l.Table, l.Total, want)
	}
	for _, m := range []tensor.Storage[float32]{st.M, st.V} {
		if m.Len() != 36 || m.DType() != dtype.F32 {
			t.Errorf("moment of %d %v, want 36 fp32", m.Len(), m.DType())
		}
	}
	b.AdamWStep(&a, st, 1e-2)
	b.AdamWStep(&a, st, 1e-2)
	if bfRun.launched["op_adamw"] != 2 || st.Steps != 2 {
		t.Errorf("%d launches of op_adamw and %d steps counted, want 2", bfRun.launched["op_adamw"], st.Steps)
	}
	var frozen tensor.Arena[float32]
	frozen.Param("w", 2)
	frozen.Alloc()
	frozen.Place(b, false)
	if _, err := b.NewAdamState(&frozen, h, []bool{true}); err == nil || !strings.Contains(err.Error(), "frozen") {
		t.Errorf("frozen arena: %v", err)
	}
}

// TestStepScope: ReleaseStep gives the memory allocated since MarkStep back
// (the next allocations take the same addresses, across chunks too), keeps
// what came before, refuses a mark past the arena's position, and a chunk
// that doubling would make too large falls back to what the allocation needs.
func TestStepScope(t *testing.T) {
	b, _, _, mem := fakeBackend()
	b.arena.chunk = 4096
	keep := b.Alloc(100).(Buf)
	m := b.MarkStep()
	var first []cuda.DevicePtr
	for _, n := range []int{1000, 3000, 9000} {
		first = append(first, b.Alloc(n).(Buf).ptr)
	}
	b.ReleaseStep(m)
	allocs := mem.Allocs
	for i, n := range []int{1000, 3000, 9000} {
		if p := b.Alloc(n).(Buf).ptr; p != first[i] {
			t.Errorf("allocation %d after ReleaseStep at %#x, before it at %#x", i, uint64(p), uint64(first[i]))
		}
	}
	if mem.Allocs != allocs {
		t.Errorf("the released scope's second run allocated %d chunks", mem.Allocs-allocs)
	}
	if p := b.Alloc(1).(Buf).ptr; p == keep.ptr {
		t.Error("storage from before the mark was handed out again")
	}
	later := b.MarkStep()
	b.ReleaseStep(m)
	if p := panicText(func() { b.ReleaseStep(later) }); !strings.Contains(p, "past the arena's position") {
		t.Errorf("release to a mark past the position: panic %q", p)
	}
	// A device of 4096 + 50000 bytes: chunks of 4096 and 40000 bytes, then a
	// doubled chunk (44096) does not fit but one of 8000 does.
	b2, _, _, mem2 := fakeBackend()
	b2.arena.chunk, mem2.Limit = 4096, 4096+50000
	b2.Alloc(2000)
	b2.Alloc(20000)
	if p := panicText(func() { b2.Alloc(4000) }); p != "" {
		t.Errorf("an allocation that fits the device but not a doubled chunk failed: %q", p)
	}
	if p := panicText(func() { b2.Alloc(4000) }); !strings.Contains(p, "out of memory") {
		t.Errorf("an allocation past the device: panic %q", p)
	}
}

// TestRecoverOOM: an op's out-of-memory panic becomes the error of the
// function that deferred RecoverOOM; any other panic goes on.
func TestRecoverOOM(t *testing.T) {
	oom := fmt.Errorf("tensorcuda: step arena chunk of 64 bytes: %w", &gpu.OutOfMemoryError{GPU: 0, Requested: 64, Err: errors.New("CUDA_ERROR_OUT_OF_MEMORY")})
	run := func(v any) (err error) {
		defer RecoverOOM(&err)
		panic(v)
	}
	if err := run(oom); !errors.Is(err, oom) {
		t.Fatalf("out of memory: error %v", err)
	}
	if p := panicText(func() { _ = run("tensorcuda: Scale: dtypes (bf16, f32) are not supported") }); !strings.Contains(p, "not supported") {
		t.Fatalf("another panic: %q", p)
	}
}

// TestSetDeterministic: a deterministic backend asks flexcuda for the
// deterministic backward; SetDeterministic after an attention exists is an
// error (it would not apply to it).
func TestSetDeterministic(t *testing.T) {
	b, _, _, _ := fakeBackend()
	if c := b.attnConfig(64, 2); c.Deterministic || c.Group != 2 || c.HeadDim != 64 {
		t.Fatalf("default attention config %+v", c)
	}
	if err := b.SetDeterministic(); err != nil {
		t.Fatal(err)
	}
	if c := b.attnConfig(64, 2); !c.Deterministic {
		t.Fatalf("deterministic backend's attention config %+v", c)
	}
	b.attns[attnKey{}] = nil
	if err := b.SetDeterministic(); err == nil || !strings.Contains(err.Error(), "after the first attention") {
		t.Fatalf("SetDeterministic after an attention: %v", err)
	}
}

// TestReplaysCounted checks that Replay without a device runs its region
// each time and counts every run as eager in Replays.
func TestReplaysCounted(t *testing.T) {
	b, _, _, _ := fakeBackend()
	runs := 0
	for range 3 {
		if kind := b.Replay("region", func() { runs++ }); kind != "eager" {
			t.Errorf("Replay on fake memory: %q, want eager", kind)
		}
	}
	if got := b.Replays(); runs != 3 || len(got) != 1 || got["eager"] != 3 {
		t.Errorf("3 replays: the region ran %d times, Replays() = %v, want map[eager:3]", runs, got)
	}
}
