package tensorcuda

import (
	"encoding/binary"
	"fmt"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/tensor"
)

// adamTable is the CUDA backend's tensor.AdamState.Table: the layout of the
// arena's segments and its table of them in device memory, made once.
type adamTable struct {
	layout *AdamWLayout
	table  gpu.Buffer // layout.Table (int64) on the device
}

// NewAdamState returns zero AdamW state for arena a, placed on b with
// master values (tensor.Arena.Place(b, true)): fp32 moments in parameter
// memory and the segment table of the fused update (tensor.Optimizer).
func (b *Backend) NewAdamState(a *tensor.Arena[float32], h tensor.AdamW, decay []bool) (*tensor.AdamState[float32], error) {
	if a.Values == nil {
		return nil, fmt.Errorf("tensorcuda: AdamW: the arena is frozen (placed without master values)")
	}
	if p, ok := a.Values.(Buf); !ok || p.be != b || p.dt != dtype.F32 || p.step != 0 {
		return nil, fmt.Errorf("tensorcuda: AdamW: the arena's values are %T %v, not fp32 parameter memory of this backend (Place the arena on it)", a.Values, a.Values.DType())
	}
	if p16, ok := a.Compute.(Buf); !ok || p16.be != b || p16.dt != dtype.BF16 {
		return nil, fmt.Errorf("tensorcuda: AdamW: the arena's compute copy is not bf16 storage of this backend")
	}
	ps := a.Params()
	if len(decay) != len(ps) {
		return nil, fmt.Errorf("tensorcuda: AdamW: %d decay flags for %d parameters", len(decay), len(ps))
	}
	var segs []AdamWSegment
	for i, t := range ps {
		if t.Numel() == 0 {
			continue
		}
		off := int64(a.Offset(i))
		segs = append(segs, AdamWSegment{Start: off, End: off + int64(t.Numel()), Decay: decay[i]})
	}
	l, err := NewAdamWLayout(segs, int64(a.Len()))
	if err != nil {
		return nil, err
	}
	raw := make([]byte, 8*len(l.Table))
	for i, v := range l.Table {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(v))
	}
	table := b.alloc(int64(len(raw)), true, false)
	must("AdamW table", b.mem.upload(table, raw))
	return &tensor.AdamState[float32]{Config: h, Decay: append([]bool(nil), decay...), Table: &adamTable{l, table},
		M: b.newBuf(a.Len(), dtype.F32, true, true), V: b.newBuf(a.Len(), dtype.F32, true, true)}, nil
}

// AdamWStep applies one update to every parameter of a and refreshes its
// bf16 compute copy in the same pass (Ops.AdamW, one launch over the
// flat buffers); it queues the kernel and returns.
func (b *Backend) AdamWStep(a *tensor.Arena[float32], s *tensor.AdamState[float32], lr float64) {
	t, ok := s.Table.(*adamTable)
	if !ok {
		panic(fmt.Sprintf("tensorcuda: AdamWStep: state of another backend (table %T)", s.Table))
	}
	s.Steps++
	h := s.Config
	stepSize, bc2Sqrt, shrink := h.Scalars(lr, s.Steps)
	p, g, p16 := b.buf(a.Values, "AdamW values"), b.buf(a.Grad, "AdamW gradient"), b.buf(a.Compute, "AdamW compute copy")
	m, v := b.buf(s.M, "AdamW exp_avg"), b.buf(s.V, "AdamW exp_avg_sq")
	defer b.span("AdamW", 0, g.n)()
	must("AdamW", b.bf.AdamW(t.layout, t.table, p.Buffer(), g.Buffer(), m.Buffer(), v.Buffer(), p16.Buffer(),
		AdamWStep{Beta1: h.Beta1, Beta2: h.Beta2, Eps: h.Eps, StepSize: stepSize, BC2Sqrt: bc2Sqrt, Shrink: shrink}))
}

// WriteAdamState copies host moments into s (fp32, exact).
func (b *Backend) WriteAdamState(s *tensor.AdamState[float32], m, v []float32) {
	b.write("WriteAdamState exp_avg", b.buf(s.M, "WriteAdamState exp_avg"), m)
	b.write("WriteAdamState exp_avg_sq", b.buf(s.V, "WriteAdamState exp_avg_sq"), v)
}
