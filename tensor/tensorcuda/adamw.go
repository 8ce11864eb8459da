package tensorcuda

import (
	"fmt"

	"dflash/cuda"
	"dflash/gpu"
)

// AdamWSegment is one parameter's range [Start, End) of the flat buffer and
// whether it takes weight decay.
type AdamWSegment struct {
	Start, End int64
	Decay      bool
}

// AdamWLayout is the flat parameter buffer's segments. Table is what the
// kernel reads: upload it once (int64, 3 per segment) and pass that buffer
// to AdamW.
type AdamWLayout struct {
	Table  []int64
	Segs   int
	Total  int64 // elements of the flat buffer
	MaxLen int64 // longest segment
}

// maxSegments is the most segments one launch takes (grid.y).
const maxSegments = 65535

// NewAdamWLayout checks segs (ordered, non-overlapping, non-empty) and
// returns their layout over a buffer of total elements.
func NewAdamWLayout(segs []AdamWSegment, total int64) (*AdamWLayout, error) {
	if len(segs) == 0 || len(segs) > maxSegments {
		return nil, fmt.Errorf("tensorcuda: AdamW: %d segments (want 1 to %d)", len(segs), maxSegments)
	}
	l := &AdamWLayout{Segs: len(segs), Total: total}
	prev := int64(0)
	for i, s := range segs {
		if s.Start < prev || s.End <= s.Start || s.End > total {
			return nil, fmt.Errorf("tensorcuda: AdamW: segment %d [%d, %d) is empty, overlaps the previous one or passes the buffer's %d elements", i, s.Start, s.End, total)
		}
		prev = s.End
		dec := int64(0)
		if s.Decay {
			dec = 1
		}
		l.Table = append(l.Table, s.Start, s.End, dec)
		l.MaxLen = max(l.MaxLen, s.End-s.Start)
	}
	return l, nil
}

// AdamWStep holds one step's hyper-parameters: the betas and epsilon, and
// the step's scalars, which the caller computes for the update count t and
// learning rate lr (tensor.AdamW.Scalars): StepSize = lr/(1-β1^t),
// BC2Sqrt = √(1-β2^t) and Shrink = 1-lr·weight decay (applied to the
// segments that take decay).
type AdamWStep struct {
	Beta1, Beta2, Eps         float64
	StepSize, BC2Sqrt, Shrink float64
}

// AdamW applies one AdamW step to every segment of the flat fp32 buffers p
// (master weights), g (gradient), m and v (moments), and writes bf16(p)
// into p16 unless it is null:
//
//	m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²
//	p = p·Shrink - StepSize·m / (√v/BC2Sqrt + eps)   (Shrink 1 without decay)
//
// in float64 on fp32 state, with the operations in the order of the CPU
// backend's AdamWStep, so the results equal its. table holds l.Table on
// the device.
func (o *Ops) AdamW(l *AdamWLayout, table gpu.Buffer, p, g, m, v, p16 gpu.Buffer, h AdamWStep) error {
	for _, b := range []struct {
		name string
		buf  gpu.Buffer
	}{{"p", p}, {"g", g}, {"m", m}, {"v", v}} {
		need("AdamW", b.name, b.buf, l.Total, 4)
	}
	optional("AdamW", "p16", p16, l.Total, 2)
	need("AdamW", "table", table, int64(len(l.Table)), 8)
	c := o.begin(kAdamW).ptr("p", p).ptr("g", g).ptr("m", m).ptr("v", v).ptr("p16", p16).ptr("seg", table).
		f64("b1", h.Beta1).f64("b2", h.Beta2).f64("eps", h.Eps).f64("step_size", h.StepSize).f64("bc2_sqrt", h.BC2Sqrt).f64("shrink", h.Shrink)
	gx := o.strided(l.MaxLen).X
	return o.launch(c, cuda.Dim(gx, uint32(l.Segs), 1), threads)
}
