package gpu_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"dflash/cuda"
	"dflash/gpu"
	"dflash/internal/testseed"
)

// TestGPUReplay runs a region (staged upload of its input, a copy, a
// memset, four kernels) through Device.Replay nine times, in graphs of two
// calls each: eager, then captured, launched, launched, then on other
// buffers (recaptured from the first call), launched, launched, then with
// the last kernel's scalar changed (recaptured from its graph on, the
// graphs before it launched during the dry run), launched. Every run's
// result must equal a float64 reference of the same work, and a host wait
// inside a dry run must fail.
func TestGPUReplay(t *testing.T) {
	w, img := elementwiseImage(t)
	rng := testseed.New(t)
	const n = 40_000
	const a, b, b2 = float32(0.75), float32(-0.2), float32(0.3)
	want := []gpu.ReplayKind{gpu.ReplayEager, gpu.ReplayCaptured, gpu.ReplayLaunched, gpu.ReplayLaunched,
		gpu.ReplayRecaptured, gpu.ReplayLaunched, gpu.ReplayLaunched, gpu.ReplayRecaptured, gpu.ReplayLaunched}
	var diff string
	var kinds []gpu.ReplayKind
	var waitErr error
	worst := 0.0
	err := w.Run(func(d *gpu.Device) error {
		gpu.SetReplaySegment(d, 2)
		fns, bufs, free, err := elementwiseSetup(d, img, 6, n)
		if err != nil {
			return err
		}
		defer free()
		gr, bl := grid1(n, 128)
		// region: x = in; y = 0; x = (a·x+b)²; y += x; x = a·x+last
		region := func(x, y gpu.Buffer, in gpu.Buffer, last float32) error {
			if err := d.CopyAsync(x, in, 4*n, nil); err != nil {
				return err
			}
			if err := d.Memset(y, 0, nil); err != nil {
				return err
			}
			if err := d.Launch(fns["ew_affine"], gr, bl, 0, nil, cuda.NewArgs().Ptr(x.Ptr).F32(a).F32(b).I32(n)); err != nil {
				return err
			}
			if err := d.Launch(fns["ew_square"], gr, bl, 0, nil, cuda.NewArgs().Ptr(x.Ptr).I32(n)); err != nil {
				return err
			}
			if err := d.Launch(fns["ew_accumulate"], gr, bl, 0, nil, cuda.NewArgs().Ptr(y.Ptr).Ptr(x.Ptr).I32(n)); err != nil {
				return err
			}
			return d.Launch(fns["ew_affine"], gr, bl, 0, nil, cuda.NewArgs().Ptr(x.Ptr).F32(a).F32(last).I32(n))
		}
		host := make([]float32, n)
		gotX, gotY := make([]float32, n), make([]float32, n)
		for run := range want {
			set := bufs[:3]
			if run >= 4 {
				set = bufs[3:]
			}
			for i := range host {
				host[i] = float32(rng.Float64()*2 - 1)
			}
			if err := gpu.Stage(d, set[2], host); err != nil {
				return err
			}
			last := b
			if run >= 7 {
				last = b2
			}
			kind, err := d.Replay("region", func() error { return region(set[0], set[1], set[2], last) })
			if err != nil {
				return err
			}
			kinds = append(kinds, kind)
			if run == 7 {
				diff = d.ReplayDiff("region")
			}
			if err := gpu.Download(d, gotX, set[0]); err != nil {
				return err
			}
			if err := gpu.Download(d, gotY, set[1]); err != nil {
				return err
			}
			for i, v := range host {
				x := float64(a)*float64(v) + float64(b)
				x *= x
				y := x
				x = float64(a)*x + float64(last)
				worst = math.Max(worst, math.Max(math.Abs(float64(gotX[i])-x), math.Abs(float64(gotY[i])-y))/(1+math.Abs(y)))
			}
		}
		_, waitErr = d.Replay("region", func() error { return gpu.Download(d, gotX, bufs[0]) })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The scalar is the last call's (6 of 6) third argument word.
	ok := fmt.Sprint(kinds) == fmt.Sprint(want) && worst < 1e-5 && errors.Is(waitErr, gpu.ErrReplayHostWait) &&
		strings.HasPrefix(diff, "call 5 of 6 (kernel ew_affine)")
	if !ok {
		t.Errorf("runs %v, want %v; worst relative error %.2e; download in a dry run: %v; scalar change: %q", kinds, want, worst, waitErr, diff)
	}
	report(t, "Replay: eager, captured, launched, recaptured on new buffers", ok,
		fmt.Sprintf("runs %v, worst relative error %.1e, host wait in a dry run: %v", kinds, worst, waitErr),
		map[string]float64{"max_rel_err": worst})
}
