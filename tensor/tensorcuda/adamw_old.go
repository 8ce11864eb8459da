package tensorcuda

// (temporary: the old AdamW, until package train moves to tensor.Optimizer)

import (
	"encoding/binary"
	"fmt"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/tensor"
)

// AdamW is the fused AdamW update (Ops.AdamW) over a parameter arena placed
// on a Backend: one launch per step over the whole flat buffer, fp32 master
// weights, gradient and moments, and the bf16 compute copy refreshed in the
// same pass. The update count and the hyper-parameters are the caller's
// (package train/traincuda's Device keeps them).
type AdamW struct {
	be              *Backend
	layout          *AdamWLayout
	table           gpu.Buffer // layout.Table (int64) on the device
	p, g, m, v, p16 Buf
}

// NewAdamW returns the optimizer of arena a, placed on b with master values
// (tensor.Arena.Place(b, true)); it allocates the arena's gradient if there
// is none, and zero moments. decay reports whether the parameter of that
// name and shape takes weight decay.
func NewAdamW(b *Backend, a *tensor.Arena[float32], decay func(name string, shape []int) bool) (*AdamW, error) {
	if a.Values == nil {
		return nil, fmt.Errorf("tensorcuda: AdamW: the arena is frozen (placed without master values)")
	}
	p, ok := a.Values.(Buf)
	if !ok || p.be != b || p.dt != dtype.F32 || p.step != 0 {
		return nil, fmt.Errorf("tensorcuda: AdamW: the arena's values are %T %v, not fp32 parameter memory of this backend (Place the arena on it)", a.Values, a.Values.DType())
	}
	p16, ok := a.Compute.(Buf)
	if !ok || p16.be != b || p16.dt != dtype.BF16 {
		return nil, fmt.Errorf("tensorcuda: AdamW: the arena's compute copy is not bf16 storage of this backend")
	}
	var segs []AdamWSegment
	for i, t := range a.Params() {
		if t.Numel() == 0 {
			continue
		}
		off := int64(a.Offset(i))
		segs = append(segs, AdamWSegment{Start: off, End: off + int64(t.Numel()), Decay: decay(t.Name, t.Shape)})
	}
	l, err := NewAdamWLayout(segs, int64(a.Len()))
	if err != nil {
		return nil, err
	}
	g := b.buf(a.EnsureGrad(), "AdamW gradient")
	raw := make([]byte, 8*len(l.Table))
	for i, v := range l.Table {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(v))
	}
	table := b.alloc(int64(len(raw)), true, false)
	must("AdamW table", b.mem.upload(table, raw))
	return &AdamW{be: b, layout: l, table: table, p: p, g: g, p16: p16,
		m: b.newBuf(a.Len(), dtype.F32, true, true), v: b.newBuf(a.Len(), dtype.F32, true, true)}, nil
}

// Step applies one update of hyper-parameters h to every parameter and
// refreshes the compute copy; it queues one kernel and returns.
func (o *AdamW) Step(h AdamWStep) {
	defer o.be.span("AdamW", 0, o.g.n)()
	must("AdamW", o.be.bf.AdamW(o.layout, o.table, o.p.Buffer(), o.g.Buffer(), o.m.Buffer(), o.v.Buffer(), o.p16.Buffer(), h))
}

// Moments returns the first and second moments (fp32, laid out like the
// arena).
func (o *AdamW) Moments() (m, v Buf) { return o.m, o.v }
