package tensor

import (
	"fmt"
	"math"
	"sync"
)

// RopeScaling is HF's rope_scaling (or rope_parameters) beyond the base
// theta. Type is "default", "linear" or "llama3".
type RopeScaling struct {
	Type                          string
	Factor                        float64
	LowFreqFactor, HighFreqFactor float64 // llama3
	OriginalMaxPositions          int     // llama3: original_max_position_embeddings
}

// Rope holds the rotary frequencies of one head dimension.
type Rope struct {
	HeadDim int
	// InvFreq[i] is the angle per position of pair i (i < HeadDim/2).
	InvFreq []float64
	// AttentionScale multiplies cos and sin (HF's attention_factor; 1 here).
	AttentionScale float64

	// The scaled cos and sin of positions [0, len(cos)/(HeadDim/2)), made
	// as Angles first needs them and kept: a training step asks for tens
	// of thousands of positions, always among the same few thousand.
	mu       sync.Mutex
	cos, sin []float64
	// kept holds the table kept on each backend (Backend.KeepStat): a
	// *keptTable[T] by backend.
	kept map[any]any
}

// keptTable is a Rope's table of positions [0, rows) on one backend.
type keptTable[T Float] struct {
	rows     int
	cos, sin Storage[T] // [rows, HeadDim/2]
}

// NewRope computes the frequencies: InvFreq[i] = theta^(−2i/HeadDim), then
// the scaling. "linear" divides every frequency by Factor. "llama3" keeps
// high frequencies (wavelength 2π/f < orig/HighFreqFactor), divides low ones
// (wavelength > orig/LowFreqFactor) by Factor and blends in between with
// s = (orig/wavelength − LowFreqFactor)/(HighFreqFactor − LowFreqFactor):
// f' = (1−s)·f/Factor + s·f. Errors name the rope_scaling field at fault.
func NewRope(headDim int, theta float64, s *RopeScaling) (*Rope, error) {
	if headDim <= 0 || headDim%2 != 0 {
		return nil, fmt.Errorf("rope: head_dim %d must be positive and even", headDim)
	}
	if theta <= 0 {
		return nil, fmt.Errorf("rope: rope_theta %g must be positive", theta)
	}
	h := headDim / 2
	r := &Rope{HeadDim: headDim, InvFreq: make([]float64, h), AttentionScale: 1}
	for i := range h {
		r.InvFreq[i] = 1 / math.Pow(theta, float64(2*i)/float64(headDim))
	}
	if s == nil {
		return r, nil
	}
	switch s.Type {
	case "", "default":
	case "linear":
		if s.Factor <= 0 {
			return nil, fmt.Errorf("rope_scaling.factor %g must be positive", s.Factor)
		}
		for i := range r.InvFreq {
			r.InvFreq[i] /= s.Factor
		}
	case "llama3":
		if s.Factor <= 0 {
			return nil, fmt.Errorf("rope_scaling.factor %g must be positive", s.Factor)
		}
		if s.OriginalMaxPositions <= 0 {
			return nil, fmt.Errorf("rope_scaling.original_max_position_embeddings %d must be positive", s.OriginalMaxPositions)
		}
		if s.HighFreqFactor <= s.LowFreqFactor {
			return nil, fmt.Errorf("rope_scaling.high_freq_factor %g must exceed low_freq_factor %g", s.HighFreqFactor, s.LowFreqFactor)
		}
		orig := float64(s.OriginalMaxPositions)
		lowWave, highWave := orig/s.LowFreqFactor, orig/s.HighFreqFactor
		for i, f := range r.InvFreq {
			wave := 2 * math.Pi / f
			switch {
			case wave < highWave:
			case wave > lowWave:
				r.InvFreq[i] = f / s.Factor
			default:
				sm := (orig/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				r.InvFreq[i] = (1-sm)*f/s.Factor + sm*f
			}
		}
	default:
		return nil, fmt.Errorf("rope_scaling.rope_type %q is not supported (want default, linear or llama3)", s.Type)
	}
	return r, nil
}

// RopeTable holds cos and sin of every (row, pair) for a list of positions,
// as statistics on a backend.
type RopeTable[T Float] struct {
	HeadDim  int
	Cos, Sin Storage[T] // [len(pos), HeadDim/2]
}

// Angles returns cos and sin of angle = pos[r]·InvFreq[i] (computed in
// float64) for each row r, [len(pos), HeadDim/2] each, in host memory.
// Non-negative positions come from r's table of every position up to the
// largest asked for so far, computed once (the same values: angles are
// computed alike either way); Angles is safe for concurrent use.
func Angles[T Float](r *Rope, pos []int32) (cos, sin []T) {
	h := r.HeadDim / 2
	cos, sin = make([]T, len(pos)*h), make([]T, len(pos)*h)
	tc, ts := r.table(pos)
	for j, p := range pos {
		if p < 0 {
			for i := range h {
				c, s := r.angle(p, i)
				cos[j*h+i], sin[j*h+i] = T(c), T(s)
			}
			continue
		}
		row := int(p) * h
		for i := range h {
			cos[j*h+i], sin[j*h+i] = T(tc[row+i]), T(ts[row+i])
		}
	}
	return cos, sin
}

// angle returns the scaled cos and sin of position p, pair i.
func (r *Rope) angle(p int32, i int) (cos, sin float64) {
	s, c := math.Sincos(float64(p) * r.InvFreq[i])
	return c * r.AttentionScale, s * r.AttentionScale
}

// table returns r's cos and sin table, grown to hold every non-negative
// position of pos.
func (r *Rope) table(pos []int32) (cos, sin []float64) {
	need, _ := tableRows(pos)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.grow(need)
}

// tableRows returns the rows of a table holding every non-negative
// position of pos (the largest plus one; 0 for none) and whether pos has a
// negative position.
func tableRows(pos []int32) (rows int, negative bool) {
	for _, p := range pos {
		rows = max(rows, int(p)+1)
		negative = negative || p < 0
	}
	return rows, negative
}

// grow returns r's cos and sin table, grown to at least n positions (to at
// least twice its old size when it grows); r.mu is held.
func (r *Rope) grow(n int) (cos, sin []float64) {
	h := r.HeadDim / 2
	have := len(r.cos) / max(h, 1)
	if n > have {
		n = max(n, 2*have)
		cos, sin := make([]float64, n*h), make([]float64, n*h)
		copy(cos, r.cos)
		copy(sin, r.sin)
		for p := have; p < n; p++ {
			for i := range h {
				cos[p*h+i], sin[p*h+i] = r.angle(int32(p), i)
			}
		}
		r.cos, r.sin = cos, sin
	}
	return r.cos, r.sin
}

// Table returns the Angles of pos on b. r's table of every position up to
// the largest asked for is kept on b (Backend.KeepStat: made there once,
// made anew with at least twice its rows when a larger position comes, the
// old one left: at most a third of what is kept) and the rows of pos are
// gathered from it there: a step uploads its positions, not their angles.
// With a negative position the Angles are uploaded.
func Table[T Float](b Backend[T], r *Rope, pos []int32) *RopeTable[T] {
	if len(pos) > 0 {
		if t := kept(b, r, pos); t != nil {
			h := r.HeadDim / 2
			ids := b.UploadInts(pos)
			out := &RopeTable[T]{HeadDim: r.HeadDim, Cos: b.AllocStatOut(len(pos) * h), Sin: b.AllocStatOut(len(pos) * h)} // Gather writes them whole
			b.Gather(t.cos, h, ids, out.Cos)
			b.Gather(t.sin, h, ids, out.Sin)
			return out
		}
	}
	cos, sin := Angles[T](r, pos)
	return &RopeTable[T]{HeadDim: r.HeadDim, Cos: b.Upload(cos, true), Sin: b.Upload(sin, true)}
}

// kept returns r's table kept on b, holding every position of pos, or nil
// when pos has a negative position.
func kept[T Float](b Backend[T], r *Rope, pos []int32) *keptTable[T] {
	need, negative := tableRows(pos)
	if negative {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t, _ := r.kept[b].(*keptTable[T])
	if t != nil && t.rows >= need {
		return t
	}
	rows := need
	if t != nil {
		rows = max(need, 2*t.rows)
	}
	h := r.HeadDim / 2
	c64, s64 := r.grow(rows)
	cos, sin := make([]T, rows*h), make([]T, rows*h)
	for i := range cos {
		cos[i], sin[i] = T(c64[i]), T(s64[i])
	}
	t = &keptTable[T]{rows: rows, cos: b.KeepStat(cos), sin: b.KeepStat(sin)}
	if r.kept == nil {
		r.kept = map[any]any{}
	}
	r.kept[b] = t
	return t
}

// Rows returns the number of positions in the table.
func (t *RopeTable[T]) Rows() int { return t.Cos.Len() / (t.HeadDim / 2) }

// RoPE rotates every head of x by its row's angles (HF's rotate_half
// convention): with h = headDim/2, c = cos(pos·f_i), s = sin(pos·f_i),
// y[i] = x[i]·c − x[i+h]·s and y[i+h] = x[i+h]·c + x[i]·s. x holds
// table.Rows() rows of heads·headDim values (any shape with that size).
// Gradient: dx = the rotation of dy by −angle.
func (tp *TapeOf[T]) RoPE(x *Of[T], table *RopeTable[T]) *Of[T] {
	rows, hd := table.Rows(), table.HeadDim
	if rows == 0 || x.Numel()%(rows*hd) != 0 {
		panic(fmt.Sprintf("tensor.RoPE: %v is not %d rows of heads×%d", x, rows, hd))
	}
	heads := x.Numel() / (rows * hd)
	y := tp.alloc(x.Name+".rope", x.Shape...)
	tp.b.RoPE(x.Store, heads, hd, table.Cos, table.Sin, y.Store, false, false)
	if tp.needs(x) {
		tp.Record(y, nil, func() {
			dx, acc := tp.GradDst(x)
			tp.b.RoPE(y.GradStore, heads, hd, table.Cos, table.Sin, dx, true, acc)
		})
	}
	return y
}
