package backendtest

import (
	"math"
	"math/rand/v2"

	"dflash/flex"
	"dflash/tensor"
)

// Softmax replaces the scores s by softmax(s) in place: exp(s_j − max s) / Σ
// over the finite scores, 0 for a score of −Inf (a masked pair); a row
// whose scores are all −Inf becomes all 0.
func Softmax(s []float64) {
	mx := math.Inf(-1)
	for _, x := range s {
		mx = math.Max(mx, x)
	}
	var z float64
	for j, x := range s {
		if math.IsInf(x, -1) {
			s[j] = 0
			continue
		}
		s[j] = math.Exp(x - mx)
		z += s[j]
	}
	if z > 0 {
		for j := range s {
			s[j] /= z
		}
	}
}

// attnOp is tp.Attention, or tp.AttentionHeadsInner when d.OutHeadsInner.
func attnOp[T tensor.Float](mask *flex.MaskProgram, args *flex.Args, d flex.Dims, scale float64) opFn[T] {
	inner := d.OutHeadsInner
	d.OutHeadsInner = false // the mask's dims
	return func(tp *tp[T], in []*ten[T]) *ten[T] {
		var m tensor.Mask
		if _, cpu := tp.Backend().(*tensor.CPU[T]); cpu {
			// Small blocks so that empty, partial and full blocks all occur.
			bm, err := flex.NewBlockMask(mask, args, d, 2, 3)
			if err != nil {
				panic(err)
			}
			m = tensor.HostMask{BlockMask: bm}
		} else {
			var err error
			if m, err = tp.Backend().NewMask(mask, args, d); err != nil {
				panic(err)
			}
		}
		if inner {
			return tp.AttentionHeadsInner(in[0], in[1], in[2], m, nil, scale)
		}
		return tp.Attention(in[0], in[1], in[2], m, nil, scale)
	}
}

// attentionCases returns the flex attention cases: causal with grouped-query
// heads, and a decode-style mask where LenQ < LenKV (q + offset ≥ kv), at
// head dimensions 8 and 4, or both at headDim when it is not 0; each also
// with its output laid out [B, Lq, Hq, D] (AttentionHeadsInner, the name's
// suffix HeadsInner).
func attentionCases(rng *rand.Rand, headDim int) []opCase {
	offset := flex.NewMask("causal_offset", flex.Q().Add(flex.IntScalar("offset")).Ge(flex.KV()))
	var cs []opCase
	for _, c := range []struct {
		name  string
		d     flex.Dims
		mask  *flex.MaskProgram
		args  *flex.Args
		allow func(q, kv int) bool
	}{
		{"AttentionCausalGQA", flex.Dims{Batch: 2, HeadsQ: 4, HeadsKV: 2, LenQ: 5, LenKV: 5, HeadDim: 8}, flex.Causal(), flex.NewArgs(),
			func(q, kv int) bool { return q >= kv }},
		{"AttentionCausalOffset", flex.Dims{Batch: 1, HeadsQ: 2, HeadsKV: 1, LenQ: 3, LenKV: 7, HeadDim: 4}, offset, flex.NewArgs().SetInt("offset", 4),
			func(q, kv int) bool { return q+4 >= kv }},
	} {
		for _, inner := range []bool{false, true} {
			d := c.d
			if headDim != 0 {
				d.HeadDim = headDim
			}
			d.OutHeadsInner = inner
			name := c.name
			if inner {
				name += "HeadsInner"
			}
			cs = append(cs, attentionCase(name, d, c.mask, c.args, c.allow))
		}
	}
	return cs
}

// attentionCase is the conformance case of attention over d with mask
// (whose pairs allow admits): the naive reference is dense float64
// softmax attention, its output in the layout d.OutHeadsInner names.
func attentionCase(name string, d flex.Dims, mask *flex.MaskProgram, args *flex.Args, allow func(q, kv int) bool) opCase {
	scale := 1 / math.Sqrt(float64(d.HeadDim))
	qs := []int{d.Batch, d.HeadsQ, d.LenQ, d.HeadDim}
	ks := []int{d.Batch, d.HeadsKV, d.LenKV, d.HeadDim}
	return opCase{
		name: name,
		inputs: []input{
			{name: "q", shape: qs, grad: true},
			{name: "k", shape: ks, grad: true},
			{name: "v", shape: ks, grad: true}},
		f32: attnOp[float32](mask, args, d, scale),
		f64: attnOp[float64](mask, args, d, scale),
		naive: func(in [][]float64) []float64 {
			q, k, v := in[0], in[1], in[2]
			D := d.HeadDim
			out := make([]float64, len(q))
			for b := range d.Batch {
				for h := range d.HeadsQ {
					g := h / (d.HeadsQ / d.HeadsKV)
					for i := range d.LenQ {
						qi := q[((b*d.HeadsQ+h)*d.LenQ+i)*D:][:D]
						s := make([]float64, d.LenKV)
						for j := range d.LenKV {
							s[j] = math.Inf(-1)
							if !allow(i, j) {
								continue
							}
							kj := k[((b*d.HeadsKV+g)*d.LenKV+j)*D:][:D]
							var dot float64
							for x := range D {
								dot += qi[x] * kj[x]
							}
							s[j] = dot * scale
						}
						Softmax(s)
						row := (b*d.HeadsQ+h)*d.LenQ + i
						if d.OutHeadsInner {
							row = (b*d.LenQ+i)*d.HeadsQ + h
						}
						o := out[row*D:][:D]
						for j := range s {
							if s[j] == 0 {
								continue
							}
							vj := v[((b*d.HeadsKV+g)*d.LenKV+j)*D:][:D]
							for x := range D {
								o[x] += s[j] * vj[x]
							}
						}
					}
				}
			}
			return out
		},
	}
}
