package dflash

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"testing"

	"dflash/dtype"
	"dflash/flex"
	"dflash/safetensors"
	"dflash/tensor"
	"dflash/tensor/backendtest"
)

// The golden file is written by bench/drafter_ref.py (PyTorch, float64, dense
// mask) on the GPU machine:
//
//	python3 bench/drafter_ref.py --out model/dflash/testdata/golden_drafter.safetensors
const goldenPath = "testdata/golden_drafter.safetensors"

type golden struct {
	f   *safetensors.File
	cfg *Config
}

func openGolden(t *testing.T) *golden { return openGoldenAt(t, filepath.FromSlash(goldenPath)) }

func openGoldenAt(t *testing.T, path string) *golden {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatalf("open golden file (regenerate with bench/drafter_ref.py): %v", err)
	}
	t.Cleanup(func() { f.Close() })
	cfg, err := ParseConfig([]byte(f.Metadata()["config"]))
	if err != nil {
		t.Fatalf("golden config: %v", err)
	}
	return &golden{f, cfg}
}

func (g *golden) f64(t *testing.T, name string) []float64 {
	t.Helper()
	info, ok := g.f.Info(name)
	if !ok {
		t.Fatalf("golden file lacks %s", name)
	}
	if info.DType != "F64" {
		v, err := g.f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	}
	b, err := g.f.Bytes(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(b)/8)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out
}

func (g *golden) ints(t *testing.T, name string) []int64 {
	t.Helper()
	b, err := g.f.Bytes(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, len(b)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out
}

func (g *golden) shape(t *testing.T, name string) []int {
	info, ok := g.f.Info(name)
	if !ok {
		t.Fatalf("golden file lacks %s", name)
	}
	return info.Shape
}

// goldenSetup loads the drafter, head, batch and blocks of the golden file.
func goldenSetup[T tensor.Float](t *testing.T, g *golden) (*Drafter[T], Head[T], *Batch, *Blocks) {
	t.Helper()
	c := g.cfg
	d := &Drafter[T]{Cfg: c}
	for _, p := range d.alloc() {
		v := g.f64(t, "param."+p.Name)
		if len(v) != p.Numel() {
			t.Fatalf("%s: golden has %d values, drafter %v", p.Name, len(v), p)
		}
		for i, x := range v {
			p.Data()[i] = T(x)
		}
	}
	toT := func(name string) *tensor.Of[T] {
		v := g.f64(t, name)
		o := tensor.New[T](name, g.shape(t, name)...)
		for i, x := range v {
			o.Data()[i] = T(x)
		}
		return o
	}
	head := Head[T]{Embed: toT("target.embed"), LMHead: toT("target.lm_head")}
	hs := g.shape(t, "input.hidden") // [k, R, S, H]
	k, R, S, H := hs[0], hs[1], hs[2], hs[3]
	hid := g.f64(t, "input.hidden")
	b := &Batch{Rows: R, Len: S, IDs: make([]int32, R*S), LossMask: make([]uint8, R*S), SeqLen: make([]int, R)}
	for i := 0; i < k; i++ {
		h := make([]float32, R*S*H)
		for j := range h {
			h[j] = float32(hid[i*R*S*H+j])
		}
		b.Taps = append(b.Taps, tensor.FromData(fmt.Sprintf("tap%d", len(b.Taps)), h, R*S, H))
	}
	for i, v := range g.ints(t, "input.ids") {
		b.IDs[i] = int32(v)
	}
	for i, v := range g.f64(t, "input.loss_mask") {
		if v > 0.5 {
			b.LossMask[i] = 1
		}
	}
	for i, v := range g.ints(t, "input.seq_len") {
		b.SeqLen[i] = int(v)
	}
	as := g.shape(t, "input.anchors")
	anc, live := g.ints(t, "input.anchors"), g.ints(t, "input.live")
	anchors := make([][]int32, R)
	for r := 0; r < R; r++ {
		for j := 0; j < as[1]; j++ {
			if live[r*as[1]+j] == 1 {
				anchors[r] = append(anchors[r], int32(anc[r*as[1]+j]))
			}
		}
	}
	return d, head, b, BuildBlocks(c, b, anchors)
}

// denseCPU is the CPU backend with its attention replaced by the dense
// masked attention of the reference (denseAttention), used only in tests.
// It supports the drafter's mask without a score program.
type denseCPU[T tensor.Float] struct{ *tensor.CPU[T] }

func newDenseCPU[T tensor.Float]() tensor.Backend[T] { return denseCPU[T]{tensor.NewCPU[T](2)} }

// Attention returns the dense attention's output (and no log-sum-exp).
func (c denseCPU[T]) Attention(d flex.Dims, q, k, v tensor.Storage[T], m tensor.Mask, score *flex.ScoreProgram, scale float64) (out, lse tensor.Storage[T]) {
	if score != nil {
		panic("denseCPU: score programs are not supported")
	}
	o, _ := denseAttention(d, host(q), host(k), host(v), m.(tensor.HostMask).BlockMask, scale)
	return tensor.Host[T](o), nil
}

// AttentionBackward recomputes the dense attention and writes its
// gradients, or adds them with accumulate.
func (c denseCPU[T]) AttentionBackward(d flex.Dims, q, k, v, out, lse, dout tensor.Storage[T], m tensor.Mask, score *flex.ScoreProgram, scale float64, dq, dk, dv tensor.Storage[T], accumulate bool) {
	_, back := denseAttention(d, host(q), host(k), host(v), m.(tensor.HostMask).BlockMask, scale)
	gq, gk, gv := back(host(dout))
	for _, p := range []struct {
		dst tensor.Storage[T]
		g   []T
	}{{dq, gq}, {dk, gk}, {dv, gv}} {
		switch {
		case p.dst == nil:
		case accumulate:
			c.Axpy(1, tensor.Host[T](p.g), p.dst)
		default:
			copy(host(p.dst), p.g)
		}
	}
}

func host[T tensor.Float](s tensor.Storage[T]) []T { return tensor.HostData(s, "denseCPU") }

// denseAttention is the dense masked attention of the reference (the mask
// evaluated per element through BlockMask.Allowed), out and dout laid out
// as d.OutHeadsInner says.
func denseAttention[T tensor.Float](d flex.Dims, q, k, v []T, bm *flex.BlockMask, scale float64) ([]T, func([]T) ([]T, []T, []T)) {
	D, g := d.HeadDim, d.Group()
	orow := func(b, h, i int) int { // out's row of query i of head h
		if d.OutHeadsInner {
			return (b*d.LenQ+i)*d.HeadsQ + h
		}
		return (b*d.HeadsQ+h)*d.LenQ + i
	}
	out := make([]T, len(q))
	probs := make([][]float64, d.Batch*d.HeadsQ*d.LenQ)
	for b := 0; b < d.Batch; b++ {
		for h := 0; h < d.HeadsQ; h++ {
			kh := h / g
			for i := 0; i < d.LenQ; i++ {
				qi := q[((b*d.HeadsQ+h)*d.LenQ+i)*D:][:D]
				s := make([]float64, d.LenKV)
				for j := 0; j < d.LenKV; j++ {
					if !bm.Allowed(b, h, i, j) {
						s[j] = math.Inf(-1)
						continue
					}
					kj := k[((b*d.HeadsKV+kh)*d.LenKV+j)*D:][:D]
					var acc float64
					for x := range D {
						acc += float64(qi[x]) * float64(kj[x])
					}
					s[j] = acc * scale
				}
				backendtest.Softmax(s)
				o := out[orow(b, h, i)*D:][:D]
				for j := range s {
					if s[j] == 0 {
						continue
					}
					vj := v[((b*d.HeadsKV+kh)*d.LenKV+j)*D:][:D]
					for x := range D {
						o[x] += T(s[j] * float64(vj[x]))
					}
				}
				probs[(b*d.HeadsQ+h)*d.LenQ+i] = s
			}
		}
	}
	return out, func(dout []T) ([]T, []T, []T) {
		dq, dk, dv := make([]T, len(q)), make([]T, len(k)), make([]T, len(v))
		for b := 0; b < d.Batch; b++ {
			for h := 0; h < d.HeadsQ; h++ {
				kh := h / g
				for i := 0; i < d.LenQ; i++ {
					row := (b*d.HeadsQ+h)*d.LenQ + i
					p := probs[row]
					do := dout[orow(b, h, i)*D:][:D]
					o := out[orow(b, h, i)*D:][:D]
					var delta float64
					for x := range D {
						delta += float64(do[x]) * float64(o[x])
					}
					for j := range p {
						if p[j] == 0 {
							continue
						}
						kv := ((b*d.HeadsKV+kh)*d.LenKV + j) * D
						var dp float64
						for x := range D {
							dp += float64(do[x]) * float64(v[kv+x])
							dv[kv+x] += T(p[j] * float64(do[x]))
						}
						ds := p[j] * (dp - delta) * scale
						for x := range D {
							dq[row*D+x] += T(ds * float64(k[kv+x]))
							dk[kv+x] += T(ds * float64(q[row*D+x]))
						}
					}
				}
			}
		}
		return dq, dk, dv
	}
}

// liveRowsErr returns relErr of got against want over the rows of live
// blocks (H values each) of the block hidden states [Rows*N*B, H].
func liveRowsErr[T tensor.Float](bl *Blocks, H int, got []T, want []float64) float64 {
	var gl, wl []float64
	for r := 0; r < bl.Rows; r++ {
		for j := 0; j < int(bl.NumValid[r]); j++ {
			lo := ((r*bl.N + j) * bl.B) * H
			for i := lo; i < lo+bl.B*H; i++ {
				gl, wl = append(gl, float64(got[i])), append(wl, want[i])
			}
		}
	}
	return relErr(gl, wl)
}

func relErr(got, want []float64) float64 {
	var num, den float64
	for i := range want {
		num += (got[i] - want[i]) * (got[i] - want[i])
		den += want[i] * want[i]
	}
	return math.Sqrt(num / math.Max(den, 1e-300))
}

func runGolden[T tensor.Float](t *testing.T, g *golden, backend tensor.Backend[T], tol float64) {
	d, head, b, bl := goldenSetup[T](t, g)
	d.LossChunk = 7 // several chunks, one partial
	tp := tensor.NewTape[T](backend)
	out, err := d.Forward(tp, true, head, b, bl)
	if err != nil {
		t.Fatal(err)
	}
	wantLoss := g.f64(t, "out.loss")[0]
	if e := math.Abs(float64(out.Loss.Data()[0])-wantLoss) / wantLoss; e > tol {
		t.Errorf("loss %.10f, reference %.10f (rel %.2e)", out.Loss.Data()[0], wantLoss, e)
	}
	if e := math.Abs(out.WeightSum - g.f64(t, "out.weight_sum")[0]); e > 1e-9 {
		t.Errorf("weight sum %v, reference %v", out.WeightSum, g.f64(t, "out.weight_sum")[0])
	}
	if e := relErr(dtype.Convert[float64](out.Context.Data()), g.f64(t, "out.context")); e > tol {
		t.Errorf("context u: rel err %.2e", e)
	}
	// Block hidden states of live blocks after each layer.
	for l, z := range out.Hidden {
		if e := liveRowsErr(bl, d.Cfg.HiddenSize, z.Data(), g.f64(t, "out.z."+strconv.Itoa(l))); e > tol {
			t.Errorf("hidden after layer %d: rel err %.2e", l, e)
		}
	}
	valid := g.f64(t, "out.valid")
	pred := g.ints(t, "out.pred")
	labels := g.ints(t, "out.labels")
	for i := range valid {
		if (valid[i] > 0.5) != (bl.Labels[i] >= 0) {
			t.Fatalf("slot %d: valid %v in the reference, label %d here", i, valid[i], bl.Labels[i])
		}
		if bl.Labels[i] >= 0 && (int64(bl.Labels[i]) != labels[i] || int64(out.Pred[i]) != pred[i]) {
			t.Errorf("slot %d: label %d pred %d, reference label %d pred %d", i, bl.Labels[i], out.Pred[i], labels[i], pred[i])
		}
	}
	tp.Backward(out.Loss)
	worst := 0.0
	for _, p := range d.Params() {
		want := g.f64(t, "grad."+p.Name)
		if p.Grad() == nil {
			t.Errorf("%s: no gradient", p.Name)
			continue
		}
		e := relErr(dtype.Convert[float64](p.Grad()), want)
		worst = math.Max(worst, e)
		if e > tol {
			t.Errorf("grad %s: rel err %.2e (tolerance %.0e)", p.Name, e, tol)
		}
	}
	t.Logf("loss %.10f (reference %.10f), worst gradient rel err %.2e", out.Loss.Data()[0], wantLoss, worst)

	// Evaluation quantities: τ per live block.
	m := NewMetrics(bl.B)
	m.Add(bl, out.Pred, out.CE)
	tau := g.f64(t, "out.tau")
	var want float64
	var n int
	for _, v := range tau {
		if v > 0 {
			want += v
			n++
		}
	}
	if math.Abs(m.Acceptance()-want/float64(n)) > 1e-12 || m.Blocks != int64(n) {
		t.Errorf("acceptance %v over %d blocks, reference %v over %d", m.Acceptance(), m.Blocks, want/float64(n), n)
	}
	if math.Abs(m.Loss()-wantLoss) > tol*wantLoss {
		t.Errorf("metrics loss %v, reference %v", m.Loss(), wantLoss)
	}
}

func TestGoldenDense(t *testing.T) {
	g := openGolden(t)
	t.Run("float64", func(t *testing.T) { runGolden[float64](t, g, newDenseCPU[float64](), 1e-9) })
	t.Run("float32", func(t *testing.T) { runGolden[float32](t, g, newDenseCPU[float32](), 1e-4) })
}

func TestGoldenFlex(t *testing.T) {
	g := openGolden(t)
	t.Run("float64", func(t *testing.T) { runGolden[float64](t, g, tensor.NewCPU[float64](2), 1e-9) })
	t.Run("float32", func(t *testing.T) { runGolden[float32](t, g, tensor.NewCPU[float32](2), 1e-4) })
}
