package traincuda

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"testing"

	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/safetensors"
	"dflash/tensor"
	"dflash/tensor/tensorcuda"
	"dflash/train"
)

// TestGPUAdamWMatchesTorch replays on the device the torch.optim.AdamW
// trajectory that train's TestAdamWMatchesTorch replays on the CPU (two
// parameter groups: decay 0.1 on a matrix, none on a norm vector;
// clip_grad_norm_(1.0) before every step; a changing learning rate;
// train/testdata/adamw_golden.safetensors, recorded with PyTorch):
// train.Params' clipped norm and fused AdamW on the CUDA backend must give
// torch's values to the CPU test's tolerances (norm 1e-6, weights 2e-6,
// relative to 1+|torch|).
func TestGPUAdamWMatchesTorch(t *testing.T) {
	// The test binary runs from its package folder (go test) or from the
	// repository root (the GPU scripts).
	var f *safetensors.File
	var err error
	for _, dir := range []string{filepath.Join("..", ".."), "."} {
		if f, err = safetensors.Open(filepath.Join(dir, "train", "testdata", "adamw_golden.safetensors")); err == nil {
			break
		}
	}
	if err != nil {
		t.Skipf("golden file missing (%v)", err)
	}
	defer f.Close()
	get := func(name string) []float32 {
		v, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	steps, _ := strconv.Atoi(f.Metadata()["steps"])
	var a tensor.Arena[float32]
	w, n := a.Param("layer.weight", 6, 5), a.Param("layer.norm.weight", 5)
	a.Alloc()
	copy(w.Data(), get("w0"))
	copy(n.Data(), get("n0"))
	lrs, norms := get("lrs"), get("norms")
	type stepResult struct {
		norm float64
		vals []float32
	}
	var got []stepResult
	gputest.OnBackend(t, tensorcuda.NewBackend, func(d *gpu.Device, b *tensorcuda.Backend) error {
		a.Place(b, true)
		dev, err := train.NewParams(b, &a, testAdamW)
		if err != nil {
			return err
		}
		grad := make([]float32, a.Len())
		for s := range steps {
			copy(grad, get(fmt.Sprintf("gw.%d", s)))
			copy(grad[a.Offset(1):], get(fmt.Sprintf("gn.%d", s)))
			b.WriteParams(a.Grad, grad)
			norm := dev.ClipGradNorm(1.0)
			dev.Step(float64(lrs[s]))
			vals := make([]float32, a.Len())
			b.Download(a.Values, vals)
			got = append(got, stepResult{norm, vals})
		}
		return nil
	})
	close := func(x, y, tol float64) bool { return math.Abs(x-y) <= tol*(1+math.Abs(y)) } // as train's close32
	for s, r := range got {
		if !close(r.norm, float64(norms[s]), 1e-6) {
			t.Fatalf("step %d: grad norm %g, torch %g", s, r.norm, norms[s])
		}
		want := append(get(fmt.Sprintf("w.%d", s)), get(fmt.Sprintf("n.%d", s))...)
		for i, v := range want {
			if !close(float64(r.vals[i]), float64(v), 2e-6) {
				t.Fatalf("step %d element %d: %.9g, torch %.9g", s, i, r.vals[i], v)
			}
		}
	}
}
