package tensorcuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"dflash/dtype"
	"dflash/flex"
	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/testseed"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

// bf16Tol are the conformance suite's tolerances for the CUDA backend,
// relative to the largest magnitude of the reference. Every value the
// backend stores in bf16 (inputs as uploaded, activations, their gradients,
// the GEMMs' bf16 outputs) carries a relative rounding error of at most
// u = 2⁻⁹ ≈ 2e-3; arithmetic is fp32 (errors ≈ 6e-8, negligible here).
//
//   - Forward: a case's output passes through at most about 10 roundings
//     of well-conditioned values (the MLP: x, the norm weight, the three
//     weights, the normed x, gate, up, their SwiGLU and the output), so
//     10u ≈ 2e-2.
//   - Backward: the gradient adds the seed gradient's rounding, the
//     gradients stored between ops and the bf16 accumulations of a tensor
//     used twice (Add, the MLP's normed x), about 20u ≈ 4e-2.
//   - Gemm (per unit of depth, as the suite scales it by k+1): A and B
//     rounded (2u·Σ|a·b| in the sum), C rounded on upload and on output
//     (2u·max|C|); at k = 1 that is 4u·max|want| = 2u·(k+1), the worst
//     case, so 2u ≈ 4e-3, doubled for the fp32 summation order and beta·C.
//
// The attention cases run at head dimension 64, the smallest the GPU
// kernels take.
var bf16Tol = backendtest.Tolerances{Fwd: 2e-2, Bwd: 4e-2, Gemm: 8e-3, Scale: 1, HeadDim: 64}

// TestGPUBackendConformance runs the tensor conformance suite on the CUDA
// backend (through onWorker, since the suite's subtests run on goroutines
// of their own) with the bf16 tolerances above.
func TestGPUBackendConformance(t *testing.T) {
	w, cache := gputest.Worker0Cache(t)
	var b *Backend
	if err := w.Run(func(d *gpu.Device) (err error) { b, err = NewBackend(cache, d); return err }); err != nil {
		t.Fatal(err)
	}
	defer w.Run(func(*gpu.Device) error { b.Close(); return nil })
	backendtest.Run(t, &onWorker{w: w, b: b, t: t}, bf16Tol)
}

// mlpModel is a small model for the step tests: an embedding, RMSNorm, a
// SwiGLU MLP with a residual, and the LM-head cross-entropy.
type mlpModel struct {
	arena                       tensor.Arena[float32]
	embed, norm, gate, up, down *tensor.Tensor
	head                        *tensor.Tensor
	vocab, dim, hidden, tokens  int
}

func newMLPModel(r *rand.Rand) *mlpModel {
	m := &mlpModel{vocab: 97, dim: 64, hidden: 160, tokens: 48}
	a := &m.arena
	m.embed = a.Param("embed.weight", m.vocab, m.dim)
	m.norm = a.Param("norm.weight", m.dim)
	m.gate = a.Param("mlp.gate.weight", m.hidden, m.dim)
	m.up = a.Param("mlp.up.weight", m.hidden, m.dim)
	m.down = a.Param("mlp.down.weight", m.dim, m.hidden)
	m.head = a.Param("head.weight", m.vocab, m.dim)
	a.Alloc()
	for _, p := range a.Params() {
		p.FillNormal(r, 0, 1/math.Sqrt(float64(p.Cols())))
	}
	m.norm.Fill(1)
	return m
}

// loss runs the forward pass on tp and returns the cross-entropy.
func (m *mlpModel) loss(tp *tensor.Tape, ids tensor.Ints, rows *tensor.XentRows[float32]) *tensor.Tensor {
	x := tp.Embedding(m.embed, ids)
	h := tp.RMSNorm(x, m.norm, 1e-6)
	y := tp.Linear(tp.SwiGLU(tp.Linear(h, m.gate, nil), tp.Linear(h, m.up, nil)), m.down, nil)
	return tp.LMHeadXentRows(tp.Add(x, y), m.head, rows, 20).Loss
}

// inputs returns token ids and targets (a quarter ignored).
func (m *mlpModel) inputs(r *rand.Rand) (ids, targets []int32) {
	for i := range m.tokens {
		ids = append(ids, int32(r.IntN(m.vocab)))
		t := int32(r.IntN(m.vocab))
		if i%4 == 3 {
			t = -1
		}
		targets = append(targets, t)
	}
	return ids, targets
}

// TestGPUStepNoSync runs forward and backward of mlpModel through the tape
// on the CUDA backend, twice with a ResetStep between: between the upload of
// the second step's inputs and the read of its loss there must be no copy
// between host and device and no synchronisation (gpu.Device.Counters), the
// step must get the same addresses as the first, and the loss and the head's
// gradient must agree with the float32 CPU backend to bf16 accuracy.
func TestGPUStepNoSync(t *testing.T) {
	r := testseed.New(t)
	m := newMLPModel(r)
	ids, targets := m.inputs(r)
	weights := make([]float64, len(targets))
	for i := range weights {
		weights[i] = 0.5 + r.Float64()
	}

	cpu := tensor.NewCPU[float32](0)
	m.arena.EnsureGrad()
	cpuTape := tensor.NewTape(cpu)
	cpuLoss := m.loss(cpuTape, tensor.HostInts(ids), tensor.NewXentRows(cpu, targets, weights))
	cpuTape.Backward(cpuLoss)
	wantLoss := float64(cpuLoss.Data()[0])
	wantHead := append([]float32(nil), m.head.Grad()...)
	m.arena.Grad = nil
	for _, p := range m.arena.Params() {
		p.DropGrad()
	}

	gputest.OnBackend(t, NewBackend, func(d *gpu.Device, b *Backend) error {
		m.arena.Place(b, true)
		grad := m.arena.EnsureGrad()
		var ptrs [2]uintptr
		var loss [1]float32
		for step := range 2 {
			b.Fill(grad, 0)
			devIDs, rows := b.UploadInts(ids), tensor.NewXentRows(b, targets, weights)
			before := d.Counters()
			tp := tensor.NewTape(b)
			l := m.loss(tp, devIDs, rows)
			tp.Backward(l)
			if c := d.Counters().Since(before); !c.IsZero() && step == 1 {
				t.Errorf("forward and backward made %v", c)
			}
			ptrs[step] = uintptr(l.Store.(Buf).ptr)
			b.Download(l.Store, loss[:])
			b.ResetStep()
		}
		if ptrs[0] != ptrs[1] {
			t.Errorf("the loss moved from %#x to %#x between two equal steps", ptrs[0], ptrs[1])
		}
		if got := float64(loss[0]); math.Abs(got-wantLoss) > 2e-2*math.Abs(wantLoss) {
			t.Errorf("loss %g, CPU float32 %g", got, wantLoss)
		}
		head := make([]float32, m.head.Numel())
		b.Download(m.head.GradStore, head)
		if err := backendtest.CloseErr(head, dtype.Convert[float64](wantHead), 4e-2); err != nil {
			t.Errorf("head gradient vs CPU: %v", err)
		}
		st := b.StepBytes()
		t.Logf("loss %g (CPU %g); step arena %d bytes reserved, %d peak", loss[0], wantLoss, st.Reserved, st.Peak)
		return nil
	})
}

// TestGPUBackendAttention checks attention through the tape on the CUDA
// backend at a head dimension flexcuda compiles (the conformance suite's
// attention cases use head dims 4 and 8, which it does not), with the
// generic block-mask builder (causal, GQA) and the DFlash one (rows unpacked
// and packed with conversations), against the float64 CPU backend: output
// and the gradients of q, k and v for a random output gradient, to the
// suite's bf16 tolerances.
func TestGPUBackendAttention(t *testing.T) {
	r := testseed.New(t)
	ctx, blocks, bs := 150, 3, 16
	anchors := []int32{20, 77, 140, 5, 60, 149}
	for _, c := range []struct {
		name string
		mask *flex.MaskProgram
		args *flex.Args
		d    flex.Dims
	}{
		{"causal", flex.Causal(), flex.NewArgs(), flex.Dims{Batch: 2, HeadsQ: 4, HeadsKV: 2, LenQ: 200, LenKV: 200, HeadDim: 64}},
		{"dflash", flex.DFlashMask(bs), flex.DFlashArgs(ctx, anchors, nil, blocks, []int32{3, 2}), flex.DFlashDims(2, 4, 1, blocks, bs, ctx, 128)},
		// rows packed with conversations starting at 0, 41 and 0, 33, 100
		{"dflash packed", flex.DFlashMask(bs), flex.DFlashArgs(ctx, anchors, []int32{0, 41, 41, 0, 33, 100}, blocks, []int32{3, 3}),
			flex.DFlashDims(2, 4, 1, blocks, bs, ctx, 128)},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := c.d
			qs, ks := []int{d.Batch, d.HeadsQ, d.LenQ, d.HeadDim}, []int{d.Batch, d.HeadsKV, d.LenKV, d.HeadDim}
			vals := make([][]float32, 4)
			for i, n := range []int{d.Batch * d.HeadsQ * d.LenQ * d.HeadDim, d.Batch * d.HeadsKV * d.LenKV * d.HeadDim,
				d.Batch * d.HeadsKV * d.LenKV * d.HeadDim, d.Batch * d.HeadsQ * d.LenQ * d.HeadDim} {
				vals[i] = make([]float32, n)
				for j := range vals[i] { // bf16 values, so that both backends see the same inputs
					vals[i][j] = dtype.BF16ToFloat32(dtype.Float32ToBF16(float32(r.NormFloat64())))
				}
			}
			scale := 1 / math.Sqrt(float64(d.HeadDim))
			cpu := tensor.NewCPU[float64](0)
			ref, err := attnThrough[float64](cpu, c.mask, c.args, d, qs, ks, vals, scale)
			if err != nil {
				t.Fatal(err)
			}
			gputest.OnBackend(t, NewBackend, func(_ *gpu.Device, b *Backend) error {
				got, err := attnThrough[float32](b, c.mask, c.args, d, qs, ks, vals, scale)
				if err != nil {
					return err
				}
				for i, what := range []string{"out", "dq", "dk", "dv"} {
					tl := bf16Tol.Bwd
					if i == 0 {
						tl = bf16Tol.Fwd
					}
					if err := backendtest.CloseErr(got[i], ref[i], tl); err != nil {
						t.Errorf("%s: %v", what, err)
					}
				}
				return nil
			})
		})
	}
}

// attnThrough runs attention and its backward for output gradient vals[3]
// on b and returns out, dq, dk and dv as float64.
func attnThrough[T tensor.Float](b tensor.Backend[T], mask *flex.MaskProgram, args *flex.Args, d flex.Dims, qs, ks []int, vals [][]float32, scale float64) ([4][]float64, error) {
	up := func(x []float32) tensor.Storage[T] {
		y := make([]T, len(x))
		for i, v := range x {
			y[i] = T(v)
		}
		return b.Upload(y, false)
	}
	q, k, v := tensor.FromStorage("q", up(vals[0]), qs...), tensor.FromStorage("k", up(vals[1]), ks...), tensor.FromStorage("v", up(vals[2]), ks...)
	for _, x := range []*tensor.Of[T]{q, k, v} {
		x.RequiresGrad = true
	}
	m, err := b.NewMask(mask, args, d)
	if err != nil {
		return [4][]float64{}, err
	}
	tp := tensor.NewTape(b)
	out := tp.Attention(q, k, v, m, nil, scale)
	res := [4][]float64{read(b, out.Store)}
	tp.BackwardFrom(out, up(vals[3]))
	res[1], res[2], res[3] = read(b, q.GradStore), read(b, k.GradStore), read(b, v.GradStore)
	return res, nil
}

func read[T tensor.Float](b tensor.Backend[T], s tensor.Storage[T]) []float64 {
	x := make([]T, s.Len())
	b.Download(s, x)
	return dtype.Convert[float64](x)
}

// TestGPUDecodeAttention compares op_decode_attn_mma and op_decode_attn
// (each with its combine) with the float64 brute force on inputs rounded to bf16: past lengths 1, 127,
// 128 and 4097 (one tile, a partial and a whole tile, many splits), 1..16
// query rows, causal and not, GQA groups 1 and 4, head dims 64 and 128,
// on the grid of the pass's span and, for even row counts, of four times
// it (splits that find no key).
// The cache rows after the attended ones hold NaN, so a read past length
// shows. The tolerance covers the output's bf16 rounding and fp32 sums.
func TestGPUDecodeAttention(t *testing.T) {
	rng := testseed.New(t)
	const kvHeads = 2
	gputest.OnBackend(t, NewBackend, func(_ *gpu.Device, b *Backend) error {
		for _, D := range []int{64, 128} {
			for _, group := range []int{1, 4} {
				for _, past := range []int{1, 127, 128, 4097} {
					for n := 1; n <= 16; n++ {
						for _, causal := range []bool{true, false} {
							heads, length := group*kvHeads, past+n
							maxLen := length + 3
							q := make([]float32, heads*n*D)
							for i := range q {
								q[i] = float32(rng.NormFloat64())
							}
							k, v := make([]float32, kvHeads*maxLen*D), make([]float32, kvHeads*maxLen*D)
							for i := range k {
								if (i/D)%maxLen >= length {
									k[i], v[i] = float32(math.NaN()), float32(math.NaN())
									continue
								}
								k[i], v[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
							}
							qs, qr := uploadRounded(b, q)
							ks, kr := uploadRounded(b, k)
							vs, vr := uploadRounded(b, v)
							out := b.AllocOut(len(q))
							scale := 1 / math.Sqrt(float64(D))
							at := tensor.CacheAts(b, []int{past}, n)[0]
							if n%2 == 0 {
								at.Span *= 4 // a grid of splits past the length, which find no key
							}
							want := backendtest.DecodeAttention(qr, heads, n, D, kr, vr, kvHeads, maxLen, length, causal, scale)
							label := fmt.Sprintf("D %d group %d past %d n %d causal %v", D, group, past, n, causal)
							b.DecodeAttention(qs, heads, n, D, ks, vs, kvHeads, maxLen, at, causal, scale, out)
							got := make([]float32, len(q))
							b.Download(out, got)
							backendtest.Close(t, label+", tensor cores", got, want, 1e-2)
							// The CUDA-core kernel (bf16 operands off 16 bytes) on the same grid's span.
							b.decodeAttention(qs, heads, n, D, ks, vs, kvHeads, maxLen, at, causal, scale, out, false)
							b.Download(out, got)
							backendtest.Close(t, label+", CUDA cores", got, want, 1e-2)
							b.ResetStep()
						}
					}
				}
			}
		}
		return nil
	})
}

// TestGPUDecodeReplay records one decoding pass (a row into the cache,
// attention over it) as a replayed region and runs it at positions 9, 10,
// 40 and 63 of one span: after the eager run and the capture, every run
// launches the graph (the positions are read on the device, not recorded),
// writes its row at its own position and attends over its own length, as
// the float64 brute force on the cache it leaves says.
func TestGPUDecodeReplay(t *testing.T) {
	rng := testseed.New(t)
	const heads, kvHeads, D, maxLen = 8, 2, 64, 128
	gputest.OnBackend(t, NewBackend, func(_ *gpu.Device, b *Backend) error {
		k, v := b.AllocKeep(kvHeads*maxLen*D), b.AllocKeep(kvHeads*maxLen*D)
		defer b.FreeKeep(v)
		defer b.FreeKeep(k)
		for _, c := range []tensor.Storage[float32]{k, v} {
			x := make([]float32, kvHeads*maxLen*D)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			b.WriteParams(c, x)
		}
		scale := 1 / math.Sqrt(float64(D))
		for i, past := range []int{9, 10, 40, 63} {
			var err error
			tensor.Scope(b, func() {
				q, kr, vr := b.Upload(normals(rng, heads*D), false), b.Upload(normals(rng, kvHeads*D), false), b.Upload(normals(rng, kvHeads*D), false)
				at := tensor.CacheAts(b, []int{past}, 1)[0]
				out := b.AllocOut(heads * D)
				kind := b.Replay("decode pass", func() {
					b.CacheRows(kr, kvHeads, 1, D, false, k, maxLen, at)
					b.CacheRows(vr, kvHeads, 1, D, false, v, maxLen, at)
					b.DecodeAttention(q, heads, 1, D, k, v, kvHeads, maxLen, at, true, scale, out)
				})
				if want := []string{"eager", "captured", "launched", "launched"}[i]; kind != want {
					err = fmt.Errorf("run %d at %d: Replay %s, want %s", i, past, kind, want)
					return
				}
				host := func(s tensor.Storage[float32]) []float32 {
					x := make([]float32, s.Len())
					b.Download(s, x)
					return x
				}
				qh, kh, vh, krh, vrh, got := host(q), host(k), host(v), host(kr), host(vr), host(out)
				for g := range kvHeads {
					for d := range D {
						if kh[(g*maxLen+past)*D+d] != krh[g*D+d] || vh[(g*maxLen+past)*D+d] != vrh[g*D+d] {
							err = fmt.Errorf("run %d: kv head %d of the row is not at position %d of the cache", i, g, past)
							return
						}
					}
				}
				want := backendtest.DecodeAttention(qh, heads, 1, D, kh, vh, kvHeads, maxLen, past+1, true, scale)
				backendtest.Close(t, fmt.Sprintf("run %d at %d", i, past), got, want, 1e-2)
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// TestGPUCacheRows compares op_cache_rows with the CPU backend for both
// source layouts, on a cache whose other rows keep their values.
func TestGPUCacheRows(t *testing.T) {
	rng := testseed.New(t)
	const heads, n, D, maxLen, past = 3, 5, 64, 20, 9
	cpu := tensor.NewCPU[float32](1)
	gputest.OnBackend(t, NewBackend, func(_ *gpu.Device, b *Backend) error {
		for _, inner := range []bool{false, true} {
			src, dst := make([]float32, heads*n*D), make([]float32, heads*maxLen*D)
			for i := range src {
				src[i] = float32(rng.NormFloat64())
			}
			for i := range dst {
				dst[i] = float32(rng.NormFloat64())
			}
			ss, cs := b.Upload(src, false), b.AllocKeep(len(dst))
			b.WriteParams(cs, dst)
			b.Download(ss, src) // the bf16 values
			b.Download(cs, dst)
			b.CacheRows(ss, heads, n, D, inner, cs, maxLen, tensor.CacheAts(b, []int{past}, n)[0])
			got := make([]float32, len(dst))
			b.Download(cs, got)
			cpu.CacheRows(tensor.Host[float32](src), heads, n, D, inner, tensor.Host[float32](dst), maxLen, tensor.CacheAts(cpu, []int{past}, n)[0])
			want := make([]float64, len(dst))
			for i, x := range dst {
				want[i] = float64(x)
			}
			backendtest.Close(t, fmt.Sprintf("CacheRows headsInner %v", inner), got, want, 0)
			b.FreeKeep(cs)
			b.ResetStep()
		}
		return nil
	})
}

// TestGPUWriteParamBytes: on the device, a parameter copy written from the
// bytes of a float dtype (WriteParamBytes: bf16 into the compute copy and
// f32 into the masters as they are, the rest converted on the host) reads
// back as WriteParams of the decoded values does, bit for bit, for a
// parameter larger than a staging slot (split over slots) and a small one.
func TestGPUWriteParamBytes(t *testing.T) {
	rng := testseed.New(t)
	gputest.OnBackend(t, NewBackend, func(_ *gpu.Device, b *Backend) error {
		for _, n := range []int{37, 9<<20 + 3} {
			for _, raw := range []dtype.DType{dtype.BF16, dtype.F16, dtype.F32, dtype.F64} {
				vals := make([]float32, n)
				for i := range vals {
					vals[i] = float32(rng.NormFloat64())
				}
				src := make([]byte, n*raw.Size())
				dtype.EncodeFloat32(raw, src, vals)
				decoded := make([]float32, n)
				dtype.DecodeFloat32(raw, decoded, src)
				values, compute := b.AllocParams(n, true)
				refValues, refCompute := b.AllocParams(n, true)
				b.WriteParamBytes(values, raw, src)
				b.WriteParamBytes(compute, raw, src)
				b.WriteParams(refValues, decoded)
				b.WriteParams(refCompute, decoded)
				for _, c := range []struct {
					name      string
					got, want Buf
				}{{"master", values.(Buf), refValues.(Buf)}, {"compute", compute.(Buf), refCompute.(Buf)}} {
					g, wnt := make([]float32, n), make([]float32, n)
					b.Download(c.got, g)
					b.Download(c.want, wnt)
					for i := range g {
						if math.Float32bits(g[i]) != math.Float32bits(wnt[i]) {
							return fmt.Errorf("%d %v elements into the %s copy (%v): [%d] = %v, WriteParams wrote %v", n, raw, c.name, c.got.dt, i, g[i], wnt[i])
						}
					}
				}
			}
		}
		return nil
	})
}
