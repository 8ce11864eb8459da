package backendtest

import (
	"math"
	"math/rand/v2"

	"dflash/tensor"
)

type tp[T tensor.Float] = tensor.TapeOf[T]
type ten[T tensor.Float] = tensor.Of[T]
type opFn[T tensor.Float] = func(tp *tp[T], in []*ten[T]) *ten[T]

func embeddingOp[T tensor.Float](ids []int32) opFn[T] {
	return func(tp *tp[T], in []*ten[T]) *ten[T] { return tp.Embedding(in[0], tp.Backend().UploadInts(ids)) }
}

func linearOp[T tensor.Float](tp *tp[T], in []*ten[T]) *ten[T] {
	var b *ten[T]
	if len(in) > 2 {
		b = in[2]
	}
	return tp.Linear(in[0], in[1], b)
}

func addScaleOp[T tensor.Float](tp *tp[T], in []*ten[T]) *ten[T] {
	return tp.Scale(tp.Add(in[0], tp.Reshape(in[1], in[0].Shape...)), -1.5)
}

// addIntoOp writes a + b into a buffer of the caller's, then scales it
// (the gradient flows back through the buffer).
func addIntoOp[T tensor.Float](tp *tp[T], in []*ten[T]) *ten[T] {
	out := tensor.FromStorage("out", tp.Backend().Alloc(in[0].Numel()), in[0].Shape...)
	return tp.Scale(tp.AddInto(in[0], in[1], out), 0.5)
}

func concatOp[T tensor.Float](axis int) opFn[T] {
	return func(tp *tp[T], in []*ten[T]) *ten[T] { return tp.Concat(axis, in...) }
}

func sliceOp[T tensor.Float](axis, lo, hi int) opFn[T] {
	return func(tp *tp[T], in []*ten[T]) *ten[T] { return tp.Slice(in[0], axis, lo, hi) }
}

func transposeOp[T tensor.Float](tp *tp[T], in []*ten[T]) *ten[T] { return tp.Transpose12(in[0]) }

func rmsnormOp[T tensor.Float](eps float64) opFn[T] {
	return func(tp *tp[T], in []*ten[T]) *ten[T] { return tp.RMSNorm(in[0], in[1], eps) }
}

func ropeOp[T tensor.Float](r *tensor.Rope, pos []int32) opFn[T] {
	return func(tp *tp[T], in []*ten[T]) *ten[T] { return tp.RoPE(in[0], tensor.Table(tp.Backend(), r, pos)) }
}

// normRoPEOp is NormRoPEHeads (heads) or NormRoPE, with a weight when the
// case has a second input.
func normRoPEOp[T tensor.Float](r *tensor.Rope, pos []int32, heads bool) opFn[T] {
	return func(tp *tp[T], in []*ten[T]) *ten[T] {
		var w *ten[T]
		if len(in) > 1 {
			w = in[1]
		}
		table := tensor.Table(tp.Backend(), r, pos)
		if heads {
			return tp.NormRoPEHeads(in[0], w, 1e-6, table)
		}
		return tp.NormRoPE(in[0], w, 1e-6, table)
	}
}

func swigluOp[T tensor.Float](tp *tp[T], in []*ten[T]) *ten[T] { return tp.SwiGLU(in[0], in[1]) }

func mlpOp[T tensor.Float](tp *tp[T], in []*ten[T]) *ten[T] {
	x := tp.RMSNorm(in[0], in[1], 1e-6)
	return tp.Linear(tp.SwiGLU(tp.Linear(x, in[2], nil), tp.Linear(x, in[3], nil)), in[4], nil)
}

func swigluPackedOp[T tensor.Float](tp *tp[T], in []*ten[T]) *ten[T] { return tp.SwiGLUPacked(in[0]) }

// mlpPackedOp is mlpOp as tensor.MLP computes it: gate and up as one
// weight [2I, H], act recomputed in the backward step.
func mlpPackedOp[T tensor.Float](tp *tp[T], in []*ten[T]) *ten[T] {
	return tp.MLP(tp.RMSNorm(in[0], in[1], 1e-6), in[2], in[3], nil, nil)
}

func xentOp[T tensor.Float](targets []int32, weights []float64, chunk int) opFn[T] {
	return func(tp *tp[T], in []*ten[T]) *ten[T] {
		return tp.LMHeadXent(in[0], in[1], targets, weights, chunk).Loss
	}
}

// caseList collects op cases; rng draws the cases' fixed indices (and, through
// their generators, their inputs) in the order the cases are added.
type caseList struct {
	cs  []opCase
	rng *rand.Rand
}

func (l *caseList) add(name string, inputs []input, f32 opFn[float32], f64 opFn[float64], naive func([][]float64) []float64) *opCase {
	l.cs = append(l.cs, opCase{name: name, inputs: inputs, f32: f32, f64: f64, naive: naive})
	return &l.cs[len(l.cs)-1]
}

// near1 draws a norm weight near 1.
func (l *caseList) near1() float64 { return 1 + 0.3*l.rng.NormFloat64() }

func opCases(rng *rand.Rand, headDim int) []opCase {
	l := &caseList{rng: rng}
	l.dataCases()
	l.residualCases()
	l.layerCases()
	l.lossCases()
	return append(l.cs, attentionCases(rng, headDim)...)
}

// dataCases: the ops that move or combine values (embedding, linear,
// elementwise, concatenation, slicing, transposition).
func (l *caseList) dataCases() {
	vocab, dim := 11, 6
	ids := randIDs(l.rng, 9, vocab)
	l.add("Embedding", []input{{name: "w", shape: []int{vocab, dim}, grad: true}},
		embeddingOp[float32](ids), embeddingOp[float64](ids),
		func(in [][]float64) []float64 {
			var out []float64
			for _, id := range ids {
				out = append(out, in[0][int(id)*dim:int(id)*dim+dim]...)
			}
			return out
		})

	l.add("LinearBias", []input{
		{name: "x", shape: []int{2, 3, 7}, grad: true},
		{name: "w", shape: []int{5, 7}, grad: true},
		{name: "b", shape: []int{5}, grad: true}},
		linearOp[float32], linearOp[float64], naiveLinear(6, 7, 5))
	l.add("Linear", []input{
		{name: "x", shape: []int{9, 13}, grad: true},
		{name: "w", shape: []int{6, 13}, grad: true}},
		linearOp[float32], linearOp[float64], naiveLinear(9, 13, 6))
	l.add("LinearFrozenWeight", []input{
		{name: "x", shape: []int{4, 5}, grad: true},
		{name: "w", shape: []int{3, 5}}},
		linearOp[float32], linearOp[float64], naiveLinear(4, 5, 3))

	l.add("AddScaleReshape", []input{
		{name: "a", shape: []int{3, 4}, grad: true},
		{name: "b", shape: []int{12}, grad: true}},
		addScaleOp[float32], addScaleOp[float64],
		func(in [][]float64) []float64 {
			out := make([]float64, 12)
			for i := range out {
				out[i] = -1.5 * (in[0][i] + in[1][i])
			}
			return out
		})

	l.add("AddInto", []input{
		{name: "a", shape: []int{5, 7}, grad: true},
		{name: "b", shape: []int{5, 7}, grad: true}},
		addIntoOp[float32], addIntoOp[float64],
		func(in [][]float64) []float64 {
			out := make([]float64, 35)
			for i := range out {
				out[i] = 0.5 * (in[0][i] + in[1][i])
			}
			return out
		})

	l.add("ConcatMiddle", []input{
		{name: "a", shape: []int{2, 3, 4}, grad: true},
		{name: "b", shape: []int{2, 5, 4}, grad: true}},
		concatOp[float32](1), concatOp[float64](1),
		func(in [][]float64) []float64 {
			var out []float64
			for o := range 2 {
				out = append(out, in[0][o*12:o*12+12]...)
				out = append(out, in[1][o*20:o*20+20]...)
			}
			return out
		})
	l.add("ConcatLast", []input{
		{name: "a", shape: []int{3, 2}, grad: true},
		{name: "b", shape: []int{3, 5}, grad: true},
		{name: "c", shape: []int{3, 1}, grad: true}},
		concatOp[float32](-1), concatOp[float64](-1),
		func(in [][]float64) []float64 {
			var out []float64
			for r := range 3 {
				out = append(out, in[0][r*2:r*2+2]...)
				out = append(out, in[1][r*5:r*5+5]...)
				out = append(out, in[2][r:r+1]...)
			}
			return out
		})
	l.add("Slice", []input{{name: "x", shape: []int{2, 6, 3}, grad: true}},
		sliceOp[float32](1, 2, 5), sliceOp[float64](1, 2, 5),
		func(in [][]float64) []float64 {
			var out []float64
			for o := range 2 {
				out = append(out, in[0][o*18+6:o*18+15]...)
			}
			return out
		})
	l.add("Transpose12", []input{{name: "x", shape: []int{2, 3, 4, 5}, grad: true}},
		transposeOp[float32], transposeOp[float64],
		func(in [][]float64) []float64 {
			out := make([]float64, 120)
			for a := range 2 {
				for b := range 3 {
					for c := range 4 {
						for d := range 5 {
							out[((a*4+c)*3+b)*5+d] = in[0][((a*3+b)*4+c)*5+d]
						}
					}
				}
			}
			return out
		})
}

// layerCases: the transformer layer's ops (norms, RoPE, SwiGLU, an MLP).
func (l *caseList) layerCases() {
	l.add("RMSNorm", []input{
		{name: "x", shape: []int{5, 16}, grad: true},
		{name: "w", shape: []int{16}, grad: true, gen: l.near1}},
		rmsnormOp[float32](1e-6), rmsnormOp[float64](1e-6), naiveRMSNorm(16, 1e-6))
	// Rows of 1040: past 1024 and whole 16-byte vectors in bf16 and fp32
	// (the CUDA backend's backward computes dx and dw in one pass there).
	l.add("RMSNormWide", []input{
		{name: "x", shape: []int{3, 1040}, grad: true},
		{name: "w", shape: []int{1040}, grad: true, gen: l.near1}},
		rmsnormOp[float32](1e-6), rmsnormOp[float64](1e-6), naiveRMSNorm(1040, 1e-6))
	l.add("QKNorm", []input{
		{name: "x", shape: []int{3, 4, 8}, grad: true},
		{name: "w", shape: []int{8}, grad: true, gen: l.near1}},
		rmsnormOp[float32](1e-5), rmsnormOp[float64](1e-5), naiveRMSNorm(8, 1e-5))

	for _, rc := range []struct {
		name  string
		theta float64
		sc    *tensor.RopeScaling
	}{
		{"RoPE", 10000, nil},
		{"RoPELlama3", 500000, &tensor.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 64}},
	} {
		const rows, heads, hd = 6, 3, 8
		r, err := tensor.NewRope(hd, rc.theta, rc.sc)
		if err != nil {
			panic(err)
		}
		pos := randIDs(l.rng, rows, 300)
		inv := naiveInvFreq(hd, rc.theta, rc.sc)
		l.add(rc.name, []input{{name: "x", shape: []int{rows, heads * hd}, grad: true}},
			ropeOp[float32](r, pos), ropeOp[float64](r, pos),
			func(in [][]float64) []float64 {
				out := make([]float64, rows*heads*hd)
				for t := range rows {
					for h := range heads {
						x := in[0][(t*heads+h)*hd : (t*heads+h+1)*hd]
						y := out[(t*heads+h)*hd : (t*heads+h+1)*hd]
						// out = x·cos + rotate_half(x)·sin, rotate_half(x) = [−x2, x1]
						for i := range hd {
							ang := float64(pos[t]) * inv[i%(hd/2)]
							rot := -x[(i+hd/2)%hd]
							if i >= hd/2 {
								rot = x[i-hd/2]
							}
							y[i] = x[i]*math.Cos(ang) + rot*math.Sin(ang)
						}
					}
				}
				return out
			})
	}

	l.normRoPECases()
	l.projectionsCases()

	l.add("SwiGLU", []input{
		{name: "gate", shape: []int{4, 10}, grad: true, gen: func() float64 { return 3 * l.rng.NormFloat64() }},
		{name: "up", shape: []int{4, 10}, grad: true}},
		swigluOp[float32], swigluOp[float64],
		func(in [][]float64) []float64 {
			out := make([]float64, 40)
			for i, g := range in[0] {
				out[i] = g / (1 + math.Exp(-g)) * in[1][i]
			}
			return out
		})

	// Packed: 16 columns a half (whole 16-byte vectors in bf16 and f32).
	l.add("SwiGLUPacked", []input{
		{name: "y2", shape: []int{4, 32}, grad: true, gen: func() float64 { return 2 * l.rng.NormFloat64() }}},
		swigluPackedOp[float32], swigluPackedOp[float64],
		func(in [][]float64) []float64 {
			out := make([]float64, 4*16)
			for i := range out {
				g, u := in[0][i/16*32+i%16], in[0][i/16*32+16+i%16]
				out[i] = g / (1 + math.Exp(-g)) * u
			}
			return out
		})

	l.add("MLP", []input{
		{name: "x", shape: []int{3, 8}, grad: true},
		{name: "norm", shape: []int{8}, grad: true, gen: l.near1},
		{name: "gate", shape: []int{12, 8}, grad: true},
		{name: "up", shape: []int{12, 8}, grad: true},
		{name: "down", shape: []int{8, 12}, grad: true}},
		mlpOp[float32], mlpOp[float64],
		func(in [][]float64) []float64 {
			x := naiveRMSNorm(8, 1e-6)([][]float64{in[0], in[1]})
			g := naiveLinear(3, 8, 12)([][]float64{x, in[2]})
			u := naiveLinear(3, 8, 12)([][]float64{x, in[3]})
			for i := range g {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
			}
			return naiveLinear(3, 12, 8)([][]float64{g, in[4]})
		})
	l.add("MLPPacked", []input{
		{name: "x", shape: []int{3, 8}, grad: true},
		{name: "norm", shape: []int{8}, grad: true, gen: l.near1},
		{name: "gate+up", shape: []int{24, 8}, grad: true},
		{name: "down", shape: []int{8, 12}, grad: true}},
		mlpPackedOp[float32], mlpPackedOp[float64], naiveNormMLP)
}

// naiveNormMLP is the reference of the packed MLP cases: 3 rows x of width
// 8, RMSNorm(x, norm), gate and up (12 each) stacked in one [24, 8] weight,
// then down [8, 12].
func naiveNormMLP(in [][]float64) []float64 {
	x := naiveRMSNorm(8, 1e-6)([][]float64{in[0], in[1]})
	g := naiveLinear(3, 8, 12)([][]float64{x, in[2][:96]})
	u := naiveLinear(3, 8, 12)([][]float64{x, in[2][96:]})
	for i := range g {
		g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
	}
	return naiveLinear(3, 12, 8)([][]float64{g, in[3]})
}

// normRoPECases: QK-norm, RoPE and the move to [B, H, L, D] in one op,
// with and without a norm weight, and without the move; head dimension 8,
// and 64 for the weighted move (whole 16-byte vectors of pairs in bf16).
func (l *caseList) normRoPECases() {
	l.normRoPECase("NormRoPEHeads", 2, 3, 4, 8, true, true)
	l.normRoPECase("NormRoPEHeadsNoWeight", 2, 3, 4, 8, false, true)
	l.normRoPECase("NormRoPE", 2, 3, 4, 8, true, false)
	l.normRoPECase("NormRoPEHeadsD64", 1, 3, 2, 64, true, true)
}

// normRoPECase adds the case of x [b, n, heads, hd], with a weight or not,
// moved to [b, heads, n, hd] or not.
func (l *caseList) normRoPECase(name string, b, n, heads, hd int, weight, move bool) {
	r, err := tensor.NewRope(hd, 10000, nil)
	if err != nil {
		panic(err)
	}
	pos := randIDs(l.rng, b*n, 300)
	inv := naiveInvFreq(hd, 10000, nil)
	naive := func(in [][]float64) []float64 {
		var w []float64
		if weight {
			w = in[1]
		}
		return naiveNormRoPE(in[0], w, b, n, heads, hd, heads*hd, pos, inv, move)
	}
	inputs := []input{{name: "x", shape: []int{b, n, heads, hd}, grad: true, gen: func() float64 { return 2 * l.rng.NormFloat64() }}}
	if weight {
		inputs = append(inputs, input{name: "w", shape: []int{hd}, grad: true, gen: l.near1})
	}
	l.add(name, inputs, normRoPEOp[float32](r, pos, move), normRoPEOp[float64](r, pos, move), naive)
}

// lossCases: the chunked LM-head cross-entropy, with an ignored target and a
// zero weight, for several chunk sizes.
func (l *caseList) lossCases() {
	const n, hid, v = 7, 8, 13
	targets := randIDs(l.rng, n, v)
	targets[2] = -1
	weights := make([]float64, n)
	for i := range weights {
		weights[i] = 0.2 + l.rng.Float64()
	}
	weights[4] = 0
	for _, chunk := range []int{1, 3, 0} {
		c := l.add("LMHeadXentChunk"+string(rune('0'+chunk)), []input{
			{name: "h", shape: []int{n, hid}, grad: true},
			{name: "w", shape: []int{v, hid}, grad: true}},
			xentOp[float32](targets, weights, chunk), xentOp[float64](targets, weights, chunk),
			func(in [][]float64) []float64 {
				logits := naiveLinear(n, hid, v)(in)
				var num, den float64
				for i := range n {
					if targets[i] < 0 || weights[i] <= 0 {
						continue
					}
					row := logits[i*v : i*v+v]
					mx := math.Inf(-1)
					for _, z := range row {
						mx = math.Max(mx, z)
					}
					var s float64
					for _, z := range row {
						s += math.Exp(z - mx)
					}
					num += weights[i] * (mx + math.Log(s) - row[targets[i]])
					den += weights[i]
				}
				return []float64{num / den}
			})
		c.fwd32 = 1e-5
	}
}

func randIDs(rng *rand.Rand, n, hi int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(rng.IntN(hi))
	}
	return ids
}

// naiveLinear returns y = x·Wᵀ (+ b) for x [rows, in], W [out, in].
func naiveLinear(rows, in, out int) func([][]float64) []float64 {
	return func(v [][]float64) []float64 {
		y := make([]float64, rows*out)
		for r := range rows {
			for o := range out {
				var s float64
				for i := range in {
					s += v[0][r*in+i] * v[1][o*in+i]
				}
				if len(v) > 2 {
					s += v[2][o]
				}
				y[r*out+o] = s
			}
		}
		return y
	}
}

func naiveRMSNorm(dim int, eps float64) func([][]float64) []float64 {
	return func(v [][]float64) []float64 {
		x, w := v[0], v[1]
		y := make([]float64, len(x))
		for r := 0; r < len(x)/dim; r++ {
			var ms float64
			for _, a := range x[r*dim : r*dim+dim] {
				ms += a * a / float64(dim)
			}
			for i := range dim {
				y[r*dim+i] = x[r*dim+i] / math.Sqrt(ms+eps) * w[i]
			}
		}
		return y
	}
}

// naiveInvFreq follows HF's computation step by step (masks over the whole
// vector), independently of tensor.NewRope.
func naiveInvFreq(hd int, theta float64, sc *tensor.RopeScaling) []float64 {
	inv := make([]float64, hd/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(theta, float64(2*i)/float64(hd))
	}
	if sc == nil || sc.Type != "llama3" {
		return inv
	}
	old := float64(sc.OriginalMaxPositions)
	out := make([]float64, len(inv))
	for i, f := range inv {
		wavelen := 2 * math.Pi / f
		scaled := f
		if wavelen > old/sc.LowFreqFactor {
			scaled = f / sc.Factor
		}
		smooth := (old/wavelen - sc.LowFreqFactor) / (sc.HighFreqFactor - sc.LowFreqFactor)
		smoothed := (1-smooth)*scaled/sc.Factor + smooth*scaled
		medium := !(wavelen < old/sc.HighFreqFactor) && !(wavelen > old/sc.LowFreqFactor)
		if medium {
			scaled = smoothed
		}
		out[i] = scaled
	}
	return out
}
