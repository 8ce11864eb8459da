package dflash

import (
	"math"
	"os"
	"strconv"
	"testing"

	"dflash/dtype"
	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/tensor"
	"dflash/tensor/tensorcuda"
)

// goldenGPUPath is the golden file of the GPU test: the golden of
// goldenPath at head dimension 64 (bench/drafter_ref.py --head-dim 64), a
// size the GPU attention kernels take. DFLASH_DRAFTER_GPU_GOLDEN overrides it.
const goldenGPUPath = "testdata/golden_drafter_d64.safetensors"

// TestGPUGolden runs the golden drafter step (forward, loss, backward) on
// the CUDA backend in bf16 and compares it with the float64 PyTorch
// reference. Tolerances, as relative L2 errors: bf16 stores every
// activation, weight copy and activation gradient with a relative rounding
// of at most 2⁻⁹ ≈ 2e-3; the forward pass goes through about ten such
// roundings per layer on two layers (≈ 2e-2 on the hidden states, 1e-2 on
// the loss, an average of many rows), the backward through about twice as
// many (5e-2 on the gradients). Predictions may differ only on slots whose
// reference logits' top two are within 0.05.
func TestGPUGolden(t *testing.T) {
	path := goldenGPUPath
	if p := os.Getenv("DFLASH_DRAFTER_GPU_GOLDEN"); p != "" {
		path = p
	}
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no GPU golden file (%v): generate it with bench/drafter_ref.py --head-dim 64", err)
	}
	w := gputest.Worker0(t)
	cache := gputest.NVRTCCache(t, "")
	g := openGoldenAt(t, path)
	d, head, b, bl := goldenSetup[float32](t, g)
	d.LossChunk = 7
	type result struct {
		loss    float32
		context []float32
		hidden  [][]float32
		pred    []int32
		grads   [][]float32
	}
	var res result
	err := gputest.RunBackend(w, cache, tensorcuda.NewBackend, func(_ *gpu.Device, be *tensorcuda.Backend) error {
		d.Arena().Place(be, true)
		up := func(x *tensor.Tensor) *tensor.Tensor {
			return tensor.FromStorage(x.Name, be.Upload(x.Data(), false), x.Shape...)
		}
		dh := Head[float32]{Embed: up(head.Embed), LMHead: up(head.LMHead)}
		for i, x := range b.Taps {
			b.Taps[i] = up(x)
		}
		in, err := d.Inputs(be, b, bl)
		if err != nil {
			return err
		}
		tp := tensor.NewTape(be)
		tp.ReleaseGrads() // as the training step: the gradients below are checked with the step arena's frees
		out := d.ForwardInputs(tp, true, dh, in)
		for _, x := range append([]*tensor.Tensor{out.Context}, out.Hidden...) {
			tp.KeepValue(x) // read after Backward, which gives back what it no longer reads
		}
		tp.Backward(out.Loss)
		out.Read(be)
		down := func(x *tensor.Tensor) []float32 {
			v := make([]float32, x.Numel())
			be.Download(x.Store, v)
			return v
		}
		res.loss, res.context, res.pred = down(out.Loss)[0], down(out.Context), out.Pred
		for _, z := range out.Hidden {
			res.hidden = append(res.hidden, down(z))
		}
		for _, p := range d.Params() {
			v := make([]float32, p.Numel())
			be.Download(p.GradStore, v)
			res.grads = append(res.grads, v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	f64 := dtype.Convert[float64, float32]
	wantLoss := g.f64(t, "out.loss")[0]
	lossErr := math.Abs(float64(res.loss)-wantLoss) / wantLoss
	if lossErr > 1e-2 {
		t.Errorf("loss %.6f, reference %.6f (rel %.2e > 1e-2)", res.loss, wantLoss, lossErr)
	}
	ctxErr := relErr(f64(res.context), g.f64(t, "out.context"))
	if ctxErr > 2e-2 {
		t.Errorf("context u: rel err %.2e > 2e-2", ctxErr)
	}
	for l, z := range res.hidden {
		if e := liveRowsErr(bl, d.Cfg.HiddenSize, z, g.f64(t, "out.z."+strconv.Itoa(l))); e > 2e-2 {
			t.Errorf("hidden after layer %d: rel err %.2e > 2e-2", l, e)
		}
	}
	logits, pred, V := g.f64(t, "out.logits"), g.ints(t, "out.pred"), d.Cfg.VocabSize
	differ := 0
	for i, l := range bl.Labels {
		if l < 0 || int64(res.pred[i]) == pred[i] {
			continue
		}
		row := logits[i*V : (i+1)*V]
		top, second := math.Inf(-1), math.Inf(-1)
		for _, x := range row {
			if x > top {
				top, second = x, top
			} else if x > second {
				second = x
			}
		}
		if top-second >= 0.05 {
			t.Errorf("slot %d: predicted %d, reference %d with a margin of %.3g", i, res.pred[i], pred[i], top-second)
		}
		differ++
	}
	worst := 0.0
	for i, p := range d.Params() {
		e := relErr(f64(res.grads[i]), g.f64(t, "grad."+p.Name))
		worst = math.Max(worst, e)
		if e > 5e-2 {
			t.Errorf("grad %s: rel err %.2e > 5e-2", p.Name, e)
		}
	}
	t.Logf("bf16 on CUDA against float64: loss rel %.2e, context %.2e, worst gradient %.2e, %d near-tie predictions differ", lossErr, ctxErr, worst, differ)
}
