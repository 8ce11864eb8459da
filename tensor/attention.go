package tensor

import (
	"fmt"
	"slices"

	"dflash/flex"
)

// AttentionBackend holds the attention kernels of a Backend, with package
// flex's layouts and semantics (flex.Forward and flex.Backward).
type AttentionBackend[T Float] interface {
	// Attention computes out = softmax(score(q·kᵀ·scale) masked)·v and the
	// per-row log-sum-exp lse.
	Attention(d flex.Dims, q, k, v []T, bm *flex.BlockMask, score *flex.ScoreProgram, args *flex.Args, scale float64) (out, lse []T)
	// AttentionBackward returns the gradients of Attention for dout.
	AttentionBackward(d flex.Dims, q, k, v, out, lse, dout []T, bm *flex.BlockMask, score *flex.ScoreProgram, args *flex.Args, scale float64) flex.Grads[T]
}

// Attention runs flex's CPU attention.
func (c *CPU[T]) Attention(d flex.Dims, q, k, v []T, bm *flex.BlockMask, score *flex.ScoreProgram, args *flex.Args, scale float64) (out, lse []T) {
	return flex.Forward(d, q, k, v, bm, score, args, scale)
}

// AttentionBackward runs flex's CPU attention backward pass.
func (c *CPU[T]) AttentionBackward(d flex.Dims, q, k, v, out, lse, dout []T, bm *flex.BlockMask, score *flex.ScoreProgram, args *flex.Args, scale float64) flex.Grads[T] {
	return flex.Backward(d, q, k, v, out, lse, dout, bm, score, args, scale)
}

// AttentionDims returns the flex dimensions of q [B, Hq, Lq, D] and k [B, Hkv, Lkv, D].
func AttentionDims[T Float](q, k *Of[T]) flex.Dims {
	if len(q.Shape) != 4 || len(k.Shape) != 4 || q.Shape[0] != k.Shape[0] || q.Shape[3] != k.Shape[3] {
		panic(fmt.Sprintf("tensor.Attention: q %v and k %v are not [batch, heads, len, headDim] alike", q, k))
	}
	return flex.Dims{Batch: q.Shape[0], HeadsQ: q.Shape[1], HeadsKV: k.Shape[1], LenQ: q.Shape[2], LenKV: k.Shape[2], HeadDim: q.Shape[3]}
}

// Attention computes flex attention: for query i of head h (kv head
// g = h/(Hq/Hkv)), with s_j = score(scale·q_i·k_j) over the keys j the mask
// allows, out_i = Σ_j softmax(s)_j·v_j (0 when no key is allowed).
// q is [B, Hq, Lq, D]; k and v are [B, Hkv, Lkv, D]; bm is built for
// AttentionDims(q, k). Gradients (P the softmax, dS = P⊙(dP − rowsum(dO⊙O))):
// dv = Pᵀ·dO, dq = scale·dS·k, dk = scale·dSᵀ·q. Gradients of tensors read by
// the score program are not propagated.
func (tp *TapeOf[T]) Attention(q, k, v *Of[T], bm *flex.BlockMask, score *flex.ScoreProgram, args *flex.Args, scale float64) *Of[T] {
	d := AttentionDims(q, k)
	if !slices.Equal(k.Shape, v.Shape) {
		panic(fmt.Sprintf("tensor.Attention: k %v and v %v differ", k, v))
	}
	if err := d.Check(); err != nil {
		panic("tensor.Attention: " + err.Error())
	}
	if bm.Dims != d {
		panic(fmt.Sprintf("tensor.Attention: block mask built for %+v, tensors are %+v", bm.Dims, d))
	}
	outData, lse := tp.b.Attention(d, q.Data, k.Data, v.Data, bm, score, args, scale)
	out := FromData("attn", outData, q.Shape...)
	if tp.needs(q, k, v) {
		tp.Record(out, func() {
			g := tp.b.AttentionBackward(d, q.Data, k.Data, v.Data, out.Data, lse, out.Grad, bm, score, args, scale)
			for _, p := range []struct {
				t *Of[T]
				g []T
			}{{q, g.DQ}, {k, g.DK}, {v, g.DV}} {
				if p.t.RequiresGrad {
					tp.b.Axpy(1, p.g, p.t.EnsureGrad())
				}
			}
		})
	}
	return out
}
