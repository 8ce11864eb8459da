package traincuda

import (
	"context"
	"fmt"
	"math"
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
