package traincuda

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"dflash/gpu"
	"dflash/internal/gputest"
	"dflash/internal/testseed"
	"dflash/safetensors"
	"dflash/tensor/tensorcuda"
	"dflash/train"
)

// TestGPUParams runs train.Params of an arena placed on the CUDA backend
// beside train.Params of a copy on the CPU backend, on the same values and
// gradients: scaled and clipped gradients give the same norm (float64 sums
// in another order: 1e-9 relative), the AdamW steps the same values and
// moments (1e-6, as TestGPUAdamWArena), and the checkpoints carry values,
// moments and the step count between the device and the files exactly:
// the CPU's checkpoint loaded on the device and saved again is the same
// bytes.
func TestGPUParams(t *testing.T) {
	r := testseed.New(t)
	a, host := testArenas(r, []paramSpec{{"fc.weight", []int{64, 300}}, {"norm.weight", []int{64}}, {"layers.0.mlp.up_proj.weight", []int{700, 64}}})
	ref, err := train.NewParams(hostCPU, host, testAdamW)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	save := func(p *train.Params, name string) (string, error) {
		return train.SaveCheckpoint(filepath.Join(out, name), &train.Checkpoint{Params: p, State: train.TrainerState{Step: 4}}, 0)
	}
	var hostDir, devDir, againDir string
	gputest.OnBackend(t, tensorcuda.NewBackend, func(d *gpu.Device, b *tensorcuda.Backend) error {
		a.Place(b, true)
		dev, err := train.NewParams(b, a, testAdamW)
		if err != nil {
			return err
		}
		flat := make([]float32, a.Len())
		for k := 1; k <= 4; k++ {
			dev.ZeroGrad()
			ref.ZeroGrad()
			for i := range flat {
				flat[i] = float32(r.NormFloat64())
			}
			copy(host.HostGrad(), flat)
			b.WriteParams(a.Grad, flat)
			dev.ScaleGrad(0.5)
			ref.ScaleGrad(0.5)
			maxNorm := []float64{0, 1e9, 3}[k%3] // measure only, no clipping, clipping
			got, want := dev.ClipGradNorm(maxNorm), ref.ClipGradNorm(maxNorm)
			if math.Abs(got-want) > 1e-9*want {
				t.Fatalf("step %d: gradient norm %.12g, CPU %.12g", k, got, want)
			}
			dev.Step(1e-3 * float64(k))
			ref.Step(1e-3 * float64(k))
		}
		if dev.Steps() != ref.Steps() {
			t.Fatalf("step count %d on the device, %d on the CPU", dev.Steps(), ref.Steps())
		}
		if hostDir, err = save(ref, "host"); err != nil {
			return err
		}
		if devDir, err = save(dev, "device"); err != nil {
			return err
		}
		// A fresh arena on the device resumes from the CPU's checkpoint.
		a2, _ := testArenas(r, []paramSpec{{"fc.weight", []int{64, 300}}, {"norm.weight", []int{64}}, {"layers.0.mlp.up_proj.weight", []int{700, 64}}})
		a2.Place(b, true)
		again, err := train.NewParams(b, a2, testAdamW)
		if err != nil {
			return err
		}
		if err := again.Load(hostDir); err != nil {
			return err
		}
		againDir, err = save(again, "again")
		return err
	})
	for _, f := range []string{train.ModelFile, train.OptimizerTensorsFile, train.OptimizerStateFile} {
		want, err := os.ReadFile(filepath.Join(hostDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(againDir, f)); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: the CPU's checkpoint loaded on the device and saved again differs (%v)", f, err)
		}
	}
	for _, f := range []string{train.ModelFile, train.OptimizerTensorsFile} {
		hf, err := safetensors.Open(filepath.Join(hostDir, f))
		if err != nil {
			t.Fatal(err)
		}
		df, err := safetensors.Open(filepath.Join(devDir, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range hf.Names() {
			want, err1 := hf.Float32(name)
			got, err2 := df.Float32(name)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s %s: %v %v", f, name, err1, err2)
			}
			for i := range want {
				if math.Abs(float64(got[i]-want[i])) > 1e-6*math.Abs(float64(want[i]))+1e-15 {
					t.Fatalf("%s %s[%d]: %g after 4 device steps, CPU %g", f, name, i, got[i], want[i])
				}
			}
		}
		hf.Close()
		df.Close()
	}
}

// TestGPUCheckpointSnapshot runs train.Run on the CUDA backend with
// 128M parameters (a 1.5 GB checkpoint: fp32 values and two moments),
// checkpointing every 3 steps of about a second each, so that each write
// runs in the background beside the steps: every checkpoint holds the
// device's master values at its step bit for bit (downloaded by the step
// hook as the next step begins), and the snapshots' copies into
// page-locked memory run at the link's speed (at least 5 GB/s; PCIe 5 x16
// gives about 50). It logs the run's time split and, for comparison, the
// rate of a Download of the values into pageable memory.
func TestGPUCheckpointSnapshot(t *testing.T) {
	const steps, every, stepSleep = 9, 3, time.Second
	r := testseed.New(t)
	a, _ := testArenas(r, []paramSpec{{"layers.0.mlp.up_proj.weight", []int{8192, 8192}}, {"layers.0.mlp.down_proj.weight", []int{8192, 8192}}, {"norm.weight", []int{8192}}})
	out := t.TempDir()
	cfg := train.DefaultConfig()
	cfg.Out, cfg.Steps, cfg.SaveEvery, cfg.KeepCheckpoints, cfg.EvalEvery = out, steps, every, 0, 0
	cfg.WarmupSteps, cfg.Progress, cfg.Plot, cfg.TensorBoard = 0, "off", false, false
	ref := map[int][]float32{}
	var res *train.Result
	gputest.OnBackend(t, tensorcuda.NewBackend, func(d *gpu.Device, b *tensorcuda.Backend) error {
		a.Place(b, true)
		h := train.Hooks{Backend: b, Arena: a,
			Step: func(ctx context.Context, s train.StepInfo) (float64, map[string]float64, int, error) {
				if s.Step%every == 0 {
					v := make([]float32, a.Len())
					b.Download(a.Values, v)
					ref[s.Step] = v
				}
				b.Fill(a.Grad, 1e-3*float64(s.Step+1))
				time.Sleep(stepSleep)
				return 1, nil, 1, nil
			}}
		var err error
		if res, err = train.Run(context.Background(), cfg, h); err != nil {
			return err
		}
		v := make([]float32, a.Len())
		t0 := time.Now()
		b.Download(a.Values, v)
		pageable := time.Since(t0)
		ref[steps] = v
		t.Logf("Download of the values into pageable memory: %.1f GB/s", float64(4*a.Len())/1e9/pageable.Seconds())
		return nil
	})
	tm := res.Time
	t.Logf("split: wall %v, start %v, steps %v, eval %v, checkpoint stalls %v (copies %v of %.2f GB), final %v; background writes %v of %.2f GB",
		tm.Wall, tm.Start, tm.Steps, tm.Eval, tm.Checkpoint, tm.Snapshot, float64(tm.SnapshotBytes)/1e9, tm.Final, tm.Writing, float64(tm.WrittenBytes)/1e9)
	rate := float64(tm.SnapshotBytes) / 1e9 / tm.Snapshot.Seconds()
	t.Logf("snapshot copies into page-locked memory: %.1f GB/s", rate)
	if rate < 5 {
		t.Errorf("snapshot copies at %.1f GB/s, want at least 5 (page-locked memory over PCIe)", rate)
	}
	for s := every; s <= steps; s += every {
		f, err := safetensors.Open(filepath.Join(out, train.CheckpointName(s), train.ModelFile))
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range a.Params() {
			got, err := f.Float32(p.Name)
			if err != nil {
				t.Fatal(err)
			}
			want := ref[s][a.Offset(i) : a.Offset(i)+p.Numel()]
			if err := sameBits(got, want); err != nil {
				t.Fatalf("checkpoint %d, %s: %v", s, p.Name, err)
			}
		}
		f.Close()
	}
}

// sameBits returns an error naming the first element in which got and want
// differ in their bits.
func sameBits(got, want []float32) error {
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return fmt.Errorf("element %d is %g, want %g", i, got[i], want[i])
		}
	}
	return nil
}
