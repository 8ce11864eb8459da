package tensorcuda

import (
	"fmt"

	"dflash/dtype"
	"dflash/flex"
	"dflash/flex/flexcuda"
	"dflash/tensor"
)

// Mask is the CUDA backend's tensor.Mask: a block mask built on the device
// (flexcuda.Builder) with the device copy of its arguments, for one step
// (ResetStep frees it).
type Mask struct {
	be   *Backend
	prog *flex.MaskProgram
	bm   *flexcuda.BlockMask
	args *flexcuda.Args
	host *flex.Args
	dims flex.Dims
	step uint64
}

// MaskDims returns the dimensions the mask was built for.
func (m *Mask) MaskDims() flex.Dims { return m.dims }

// MaskArgs returns the host arguments the mask was built with.
func (m *Mask) MaskArgs() *flex.Args { return m.host }

// attnKey identifies the compiled attention of a mask program, head
// dimension and GQA group.
type attnKey struct {
	mask           string // the program's hash
	headDim, group int
}

// builder returns the block-mask builder of p, made on first use: the
// closed-form DFlash builder for flex.DFlashMask programs, the generic one
// otherwise, both with flexcuda's default blocks (those of the attention).
func (b *Backend) builder(p *flex.MaskProgram) (*flexcuda.Builder, error) {
	key := p.Hash()
	if bl := b.builders[key]; bl != nil {
		return bl, nil
	}
	bl, err := b.newBuilder(p)
	if err != nil {
		return nil, err
	}
	b.builders[key] = bl
	return bl, nil
}

// newBuilder makes the block-mask builder of p that builder keeps.
func (b *Backend) newBuilder(p *flex.MaskProgram) (*flexcuda.Builder, error) {
	var bl *flexcuda.Builder
	var err error
	if bs, ok := p.DFlashBlock(); ok {
		bl, err = flexcuda.NewDFlashBuilder(b.cache, bs, 0, 0)
	} else {
		bl, err = flexcuda.NewBuilder(b.cache, p, 0, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("tensorcuda: block mask builder for %s: %w", p.Name(), err)
	}
	return bl, nil
}

// NewMask uploads args and builds the block mask of p for d on the device;
// both live until the next ResetStep.
func (b *Backend) NewMask(p *flex.MaskProgram, args *flex.Args, d flex.Dims) (tensor.Mask, error) {
	bl, err := b.builder(p)
	if err != nil {
		return nil, err
	}
	dargs, err := flexcuda.UploadArgs(b.d, args)
	if err != nil {
		return nil, fmt.Errorf("tensorcuda: mask %s: %w", p.Name(), err)
	}
	bm, err := bl.Build(b.d, nil, d, dargs, nil)
	if err != nil {
		dargs.Free(b.d)
		return nil, fmt.Errorf("tensorcuda: mask %s: %w", p.Name(), err)
	}
	b.release = append(b.release, func() { bm.Free(b.d); dargs.Free(b.d) })
	if args == nil {
		args = flex.NewArgs()
	}
	return &Mask{be: b, prog: p, bm: bm, args: dargs, host: args, dims: d, step: b.gen}, nil
}

// mask returns m as this backend's live mask.
func (b *Backend) mask(m tensor.Mask) *Mask {
	x, ok := m.(*Mask)
	if !ok || x.be != b {
		panic(fmt.Sprintf("tensorcuda: attention given a %T, not a mask built by this CUDA backend", m))
	}
	b.live("the block mask", x.step)
	return x
}

// attention returns the attention of mask program p (identity score) over
// head dimension headDim and GQA group, made on first use (Prepare, or the
// first step) and kept for every later step.
func (b *Backend) attention(p *flex.MaskProgram, headDim, group int) (*flexcuda.Attention, error) {
	key := attnKey{p.Hash(), headDim, group}
	if a := b.attns[key]; a != nil {
		return a, nil
	}
	a, err := b.newAttention(p, headDim, group)
	if err != nil {
		return nil, err
	}
	b.attns[key] = a
	return a, nil
}

// newAttention makes the attention that attention keeps.
func (b *Backend) newAttention(p *flex.MaskProgram, headDim, group int) (*flexcuda.Attention, error) {
	return flexcuda.New(b.cache, p, nil, b.attnConfig(headDim, group))
}

// attnConfig is the flexcuda configuration of attention over head
// dimension headDim and GQA group.
func (b *Backend) attnConfig(headDim, group int) flexcuda.Config {
	return flexcuda.Config{HeadDim: headDim, Group: group, DType: dtype.BF16, Deterministic: b.det, Arch: b.arch}
}

// mustAttend panics with err, when not nil, from the kernels of direction
// dir ("forward", "backward") of the attention of m over d: a kernel that
// Prepare was not given and that failed to compile now, or a launch error.
// The message names the kernel (mask, head dimension, group, direction)
// and wraps err, a *jit.CompileError with the NVRTC log for a compile.
func mustAttend(op, dir string, m *Mask, d flex.Dims, err error) {
	if err != nil {
		panic(fmt.Errorf("tensorcuda: %s: %s kernels of mask %s, head dim %d, group %d: %w", op, dir, m.prog.Name(), d.HeadDim, d.Group(), err))
	}
}

// noScore panics for a score program: they are not yet on CUDA.
func noScore(op string, score *flex.ScoreProgram) {
	if score != nil {
		panic(fmt.Sprintf("tensorcuda: %s: score programs are not yet on CUDA (got %s); use the CPU backend", op, score))
	}
}

// attnCall returns the flexcuda call of q, k, v (bf16) with m.
func (b *Backend) attnCall(op string, d flex.Dims, q, k, v tensor.Storage[float32], m *Mask, scale float64) *flexcuda.Call {
	qb, kb, vb := b.buf(q, op+" q"), b.buf(k, op+" k"), b.buf(v, op+" v")
	if same(op, qb, kb, vb) != dtype.BF16 {
		unsupported(op, qb, kb, vb)
	}
	if scale == 0 {
		panic(fmt.Sprintf("tensorcuda: %s: scale 0 (flexcuda reads 0 as 1/sqrt(head dim))", op))
	}
	return &flexcuda.Call{Dims: d, Mask: m.bm, Args: m.args, Scale: scale, Q: qb.Buffer(), K: kb.Buffer(), V: vb.Buffer()}
}

// Attention computes flex attention through flexcuda: out bf16, lse fp32.
func (b *Backend) Attention(d flex.Dims, q, k, v tensor.Storage[float32], m tensor.Mask, score *flex.ScoreProgram, scale float64) (out, lse tensor.Storage[float32]) {
	noScore("Attention", score)
	defer b.span("Attention", 0, d.Batch, d.HeadsQ, d.HeadsKV, d.LenQ, d.LenKV, d.HeadDim)()
	mk := b.mask(m)
	c := b.attnCall("Attention", d, q, k, v, mk, scale)
	o := b.newBuf(q.Len(), dtype.BF16, false, false)
	l := b.newBuf(d.Batch*d.HeadsQ*d.LenQ, dtype.F32, false, false)
	c.Out, c.LSE = o.Buffer(), l.Buffer()
	a, err := b.attention(mk.prog, d.HeadDim, d.Group())
	mustAttend("Attention", "forward", mk, d, err)
	mustAttend("Attention", "forward", mk, d, a.Forward(b.d, c))
	return o, l
}

// AttentionBackward computes the gradients (flexcuda overwrites its
// outputs): straight into dq, dk and dv when they are to be overwritten and
// bf16, otherwise into bf16 temporaries that it adds into them or copies
// over them (any may be nil; an absent one gets a temporary).
func (b *Backend) AttentionBackward(d flex.Dims, q, k, v, out, lse, dout tensor.Storage[float32], m tensor.Mask, score *flex.ScoreProgram, scale float64, dq, dk, dv tensor.Storage[float32], accumulate bool) {
	noScore("AttentionBackward", score)
	defer b.span("AttentionBackward", 0, d.Batch, d.HeadsQ, d.HeadsKV, d.LenQ, d.LenKV, d.HeadDim)()
	if dq == nil && dk == nil && dv == nil {
		return
	}
	mk := b.mask(m)
	c := b.attnCall("AttentionBackward", d, q, k, v, mk, scale)
	ob, db, lb := b.buf(out, "AttentionBackward out"), b.buf(dout, "AttentionBackward dout"), b.buf(lse, "AttentionBackward lse")
	if same("AttentionBackward", ob, db) != dtype.BF16 {
		unsupported("AttentionBackward", ob, db)
	}
	f32s("AttentionBackward", lb)
	c.Out, c.LSE, c.DOut = ob.Buffer(), lb.Buffer(), db.Buffer()
	dsts := [3]tensor.Storage[float32]{dq, dk, dv}
	var grads [3]Buf
	var temp [3]bool
	for i, n := range []int{q.Len(), k.Len(), v.Len()} {
		if dsts[i] != nil {
			grads[i] = b.buf(dsts[i], "AttentionBackward gradient")
		}
		if temp[i] = dsts[i] == nil || accumulate || grads[i].dt != dtype.BF16; temp[i] {
			grads[i] = b.newBuf(n, dtype.BF16, false, false)
		}
	}
	c.DQ, c.DK, c.DV = grads[0].Buffer(), grads[1].Buffer(), grads[2].Buffer()
	a, err := b.attention(mk.prog, d.HeadDim, d.Group())
	mustAttend("AttentionBackward", "backward", mk, d, err)
	mustAttend("AttentionBackward", "backward", mk, d, a.Backward(b.d, c))
	for i, dst := range dsts {
		if !temp[i] {
			continue
		}
		if dst != nil {
			db := b.buf(dst, "AttentionBackward gradient")
			if !accumulate {
				must("zero", b.mem.zero(db.Buffer()))
			}
			b.axpy(1, Buf{}, grads[i], db)
		}
		b.freeTemp(grads[i])
	}
}
