package flexcuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"dflash/dtype"
	"dflash/flex"
	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/testseed"
)

// GPU tests run on the GPU machine as a compiled test binary; here they skip
// with a message naming what is missing (the GPU or NVRTC).

func TestMain(m *testing.M) { gputest.Main(m) }

func newRand(t testing.TB) *rand.Rand {
	return testseed.New(t)
}

// gridValues draws n values k/64 with |k| <= 64: exact in bf16 and fp16, so
// the float64 reference sees exactly the device's inputs.
func gridValues(r *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = float64(r.IntN(129)-64) / 64
	}
	return x
}

// devHalf uploads x as dt (bf16 or f16).
func devHalf(t testing.TB, d *gpu.Device, x []float64, dt dtype.DType) gpu.Buffer {
	t.Helper()
	b, _, err := gputest.Upload(d, dt, x)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// devAlloc allocates n bytes poisoned with NaNs (gputest.Alloc).
func devAlloc(t testing.TB, d *gpu.Device, n int64) gpu.Buffer {
	t.Helper()
	b, err := gputest.Alloc(d, n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// download reads n elements of dt (bf16, f16 or f32) from b.
func download(t testing.TB, d *gpu.Device, b gpu.Buffer, n int, dt dtype.DType) []float64 {
	t.Helper()
	x, err := gputest.Download(d, dt, b, n)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// relErr returns ||got - want|| / ||want|| over the entries where keep is
// true (all when keep is nil); NaN in got gives +Inf.
func relErr(got, want []float64, keep func(i int) bool) float64 {
	var num, den float64
	for i := range want {
		if keep != nil && !keep(i) {
			continue
		}
		if math.IsNaN(got[i]) {
			return math.Inf(1)
		}
		num += (got[i] - want[i]) * (got[i] - want[i])
		den += want[i] * want[i]
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// attnResult holds the errors of one GPU attention call against the float64
// CPU reference.
type attnResult struct {
	errs      map[string]float64 // out, lse, dq, dk, dv, grad:<tensor>
	emptyRows int
	problems  []string // NaN, unwritten or wrong empty rows, list mismatches
	// repeatDiff counts the elements of dq, dk, dv whose bits differ between
	// two backward calls on the same inputs (0 everywhere for the
	// deterministic backward; the atomic one may differ).
	repeatDiff map[string]int
}

func (r *attnResult) String() string {
	ks := make([]string, 0, len(r.errs))
	for k := range r.errs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	s := ""
	for _, k := range ks {
		s += fmt.Sprintf("%s=%.2e ", k, r.errs[k])
	}
	return s + fmt.Sprintf("empty_rows=%d repeat_bit_diffs=%v", r.emptyRows, r.repeatDiff)
}

// runAttention runs a's forward and backward on d for dims (Out and DOut in
// the layout dims.OutHeadsInner says) with random grid inputs, the block
// mask built on the GPU by bld (and checked equal to the CPU one), and
// compares everything with flex's float64 Forward and Backward.
func runAttention(t testing.TB, d *gpu.Device, a *Attention, bld *Builder, dims flex.Dims, hargs *flex.Args, r *rand.Rand) *attnResult {
	t.Helper()
	dt := a.spec.storage()
	nq := dims.Batch * dims.HeadsQ * dims.LenQ * dims.HeadDim
	nk := dims.Batch * dims.HeadsKV * dims.LenKV * dims.HeadDim
	rows := dims.Batch * dims.HeadsQ * dims.LenQ
	var bufs []gpu.Buffer
	keep := func(b gpu.Buffer) gpu.Buffer { bufs = append(bufs, b); return b }
	defer func() {
		for _, b := range bufs {
			d.Free(b)
		}
	}()
	c, q, k, v, dout := testCall(t, d, dt, dims, r, keep)
	dargs, err := UploadArgs(d, hargs)
	if err != nil {
		t.Fatal(err)
	}
	defer dargs.Free(d)
	c.Args = dargs
	res := &attnResult{errs: map[string]float64{}}
	for _, name := range a.layout.grads {
		c.TensorGrads[name] = keep(devAlloc(t, d, int64(4*len(hargs.FloatTensors[name].Data))))
	}
	cbm, err := flex.NewBlockMask(a.mask, hargs, dims, a.spec.BlockQ, a.spec.BlockKV)
	if err != nil {
		t.Fatal(err)
	}
	gbm, err := bld.Build(d, nil, dims, dargs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer gbm.Free(d)
	lists, err := gbm.Download(d)
	if err != nil {
		t.Fatal(err)
	}
	if diff := lists.Compare(gbm, cbm); diff != "" {
		res.problems = append(res.problems, "GPU-built block mask differs from the CPU one: "+diff)
	}
	c.Mask = gbm
	if err := a.Forward(d, c); err != nil {
		t.Fatal(err)
	}
	if err := a.Backward(d, c); err != nil {
		t.Fatal(err)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	// The backward again into fresh poisoned buffers: bitwise comparison.
	c2 := *c
	c2.DQ, c2.DK, c2.DV = keep(devAlloc(t, d, int64(2*nq))), keep(devAlloc(t, d, int64(2*nk))), keep(devAlloc(t, d, int64(2*nk)))
	c2.TensorGrads = map[string]gpu.Buffer{}
	for name := range c.TensorGrads {
		c2.TensorGrads[name] = keep(devAlloc(t, d, int64(4*len(hargs.FloatTensors[name].Data))))
	}
	if err := a.Backward(d, &c2); err != nil {
		t.Fatal(err)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	res.repeatDiff = map[string]int{}
	for _, p := range []struct {
		name string
		x, y gpu.Buffer
		n    int
	}{{"dq", c.DQ, c2.DQ, nq}, {"dk", c.DK, c2.DK, nk}, {"dv", c.DV, c2.DV, nk}} {
		res.repeatDiff[p.name] = bitDiffs(t, d, p.x, p.y, p.n)
	}
	scale := 1 / math.Sqrt(float64(dims.HeadDim))
	rout, rlse := flex.Forward(dims, q, k, v, cbm, a.score, hargs, scale)
	rg := flex.Backward(dims, q, k, v, rout, rlse, dout, cbm, a.score, hargs, scale)

	out, lse := download(t, d, c.Out, nq, dt), download(t, d, c.LSE, rows, dtype.F32)
	dq, dk, dv := download(t, d, c.DQ, nq, dt), download(t, d, c.DK, nk, dt), download(t, d, c.DV, nk, dt)
	finite := func(i int) bool { return !math.IsInf(rlse[i], -1) }
	res.errs["out"] = relErr(out, rout, nil)
	res.errs["lse"] = relErr(lse, rlse, finite)
	res.errs["dq"] = relErr(dq, rg.DQ, nil)
	res.errs["dk"] = relErr(dk, rg.DK, nil)
	res.errs["dv"] = relErr(dv, rg.DV, nil)
	for name, b := range c.TensorGrads {
		res.errs["grad:"+name] = relErr(download(t, d, b, len(rg.Tensors[name]), dtype.F32), rg.Tensors[name], nil)
	}
	for name, x := range map[string][]float64{"out": out, "lse": lse, "dq": dq, "dk": dk, "dv": dv} {
		for i, v := range x {
			if math.IsNaN(v) {
				res.problems = append(res.problems, fmt.Sprintf("%s[%d] is NaN (unwritten or invalid)", name, i))
				break
			}
		}
	}
	D := dims.HeadDim
	for i := 0; i < rows; i++ {
		if finite(i) {
			continue
		}
		res.emptyRows++
		if !math.IsInf(lse[i], -1) {
			res.problems = append(res.problems, fmt.Sprintf("fully masked row %d: lse %v, want -Inf", i, lse[i]))
			break
		}
		o := dims.OutRow(i/dims.LenQ/dims.HeadsQ, i/dims.LenQ%dims.HeadsQ, i%dims.LenQ) // out's row of lse row i
		for j := 0; j < D; j++ {
			if out[o+j] != 0 || dq[i*D+j] != 0 {
				res.problems = append(res.problems, fmt.Sprintf("fully masked row %d: out %v dq %v, want 0", i, out[o+j], dq[i*D+j]))
				break
			}
		}
	}
	return res
}

// testCall returns a Call of dims with random grid Q, K, V and DOut in dt
// (also returned as host values), poisoned Out, LSE, DQ, DK, DV and no
// tensor gradients; keep collects every buffer, for the caller to free.
func testCall(t testing.TB, d *gpu.Device, dt dtype.DType, dims flex.Dims, r *rand.Rand, keep func(gpu.Buffer) gpu.Buffer) (c *Call, q, k, v, dout []float64) {
	t.Helper()
	nq := dims.Batch * dims.HeadsQ * dims.LenQ * dims.HeadDim
	nk := dims.Batch * dims.HeadsKV * dims.LenKV * dims.HeadDim
	q, k, v, dout = gridValues(r, nq), gridValues(r, nk), gridValues(r, nk), gridValues(r, nq)
	c = &Call{Dims: dims,
		Q: keep(devHalf(t, d, q, dt)), K: keep(devHalf(t, d, k, dt)), V: keep(devHalf(t, d, v, dt)),
		DOut: keep(devHalf(t, d, dout, dt)),
		Out:  keep(devAlloc(t, d, int64(2*nq))), LSE: keep(devAlloc(t, d, int64(4*dims.Batch*dims.HeadsQ*dims.LenQ))),
		DQ: keep(devAlloc(t, d, int64(2*nq))), DK: keep(devAlloc(t, d, int64(2*nk))), DV: keep(devAlloc(t, d, int64(2*nk))),
		TensorGrads: map[string]gpu.Buffer{}}
	return c, q, k, v, dout
}

// bitDiffs counts the 16-bit elements that differ between x and y.
func bitDiffs(t testing.TB, d *gpu.Device, x, y gpu.Buffer, n int) int {
	t.Helper()
	hx, hy := make([]uint16, n), make([]uint16, n)
	if err := gpu.Download(d, hx, x); err != nil {
		t.Fatal(err)
	}
	if err := gpu.Download(d, hy, y); err != nil {
		t.Fatal(err)
	}
	diff := 0
	for i := range hx {
		if hx[i] != hy[i] {
			diff++
		}
	}
	return diff
}

// dflashHostArgs draws DFlash arguments for batch sequences of nb blocks:
// anchors in [0, ctx+extra) (sorted or not), num_valid in [0, nb+1], and
// block starts: 0 when convs is 0, else those of rows cut at random points
// into convs conversations (each block's start the first position of the
// conversation that holds its anchor) and, when not sorted, one block in
// eight with an arbitrary start in [-4, ctx+8) (past its anchor, negative or
// past the context): the closed form must match the program on every input,
// not only on those training makes.
func dflashHostArgs(r *rand.Rand, batch, nb, ctx int, sorted bool, convs int) *flex.Args {
	an := make([]int32, batch*nb)
	for i := range an {
		an[i] = int32(r.IntN(ctx + 8))
	}
	if sorted {
		for b := 0; b < batch; b++ {
			row := an[b*nb : (b+1)*nb]
			sort.Slice(row, func(i, j int) bool { return row[i] < row[j] })
		}
	}
	var st []int32
	if convs > 0 {
		st = make([]int32, batch*nb)
		for b := 0; b < batch; b++ {
			cuts := []int32{0}
			if ctx > 1 {
				for _, p := range r.Perm(ctx - 1)[:min(convs-1, ctx-1)] {
					cuts = append(cuts, int32(p+1))
				}
			}
			sort.Slice(cuts, func(i, j int) bool { return cuts[i] < cuts[j] })
			for j := 0; j < nb; j++ {
				i := b*nb + j
				c := sort.Search(len(cuts), func(k int) bool { return cuts[k] > an[i] }) - 1
				st[i] = cuts[c]
				if !sorted && r.IntN(8) == 0 {
					st[i] = int32(r.IntN(ctx+12) - 4)
				}
			}
		}
	}
	nv := make([]int32, batch)
	for i := range nv {
		nv[i] = int32(nb)
		if r.IntN(2) == 0 {
			nv[i] = int32(r.IntN(nb + 2))
		}
	}
	return flex.DFlashArgs(ctx, an, st, nb, nv)
}
