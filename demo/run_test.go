package demo

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"dflash/model"
	"dflash/model/dflash"
)

// TestRunTiny runs the whole demo pipeline at toy sizes: every stage must
// work, the result must be consistent, and the drafter must learn the
// target's (degenerate, hence easy) responses.
func TestRunTiny(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("the demo pipeline takes minutes under the race detector")
	}
	dir := t.TempDir()
	o := Options{Dir: dir, Seed: 3, CorpusBytes: 120 << 10, Vocab: 400, TargetHidden: 32, TargetLayers: 3,
		TargetSteps: 20, TargetBatch: 8, MaxSeq: 96, Prompts: 24, GenTokens: 24, DraftSteps: 40,
		DraftBatch: 4, Anchors: 8, Progress: "off"}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.Conversations < 8 || res.GeneratedTokens == 0 || res.Vocab != 400 {
		t.Fatalf("conversations %d, generated %d, vocab %d", res.Conversations, res.GeneratedTokens, res.Vocab)
	}
	if res.AcceptanceBefore < 1 || res.AcceptanceAfter > float64(res.BlockSize) {
		t.Fatalf("acceptance %v → %v outside [1, %d]", res.AcceptanceBefore, res.AcceptanceAfter, res.BlockSize)
	}
	if !(res.LossAfter < res.LossBefore) || !(res.AcceptanceAfter > res.AcceptanceBefore) {
		t.Fatalf("the drafter learned nothing: loss %v → %v, acceptance %v → %v", res.LossBefore, res.LossAfter, res.AcceptanceBefore, res.AcceptanceAfter)
	}
	// Real decoding of the held-out prompts: lossless, and an acceptance
	// length in [1, B].
	if sp := res.Spec; sp == nil || sp.Prompts == 0 || sp.GreedyMatches != sp.Prompts || sp.AcceptanceLength < 1 || sp.AcceptanceLength > float64(res.BlockSize) || sp.Speedup <= 0 {
		t.Fatalf("speculative decoding %+v", res.Spec)
	}
	// Real decoding visits the anchors of the walk a → a + τ(a): its
	// acceptance length is the walk's (up to the responses' ends).
	if real, walk := res.Spec.AcceptanceLength, res.AcceptanceWalk; math.Abs(real-walk) > 0.1*walk {
		t.Fatalf("real acceptance length %v, walk over simulated per-anchor values %v", real, walk)
	}
	for _, f := range []string{"target/tokenizer.json", "target/tokenizer_config.json", "target/config.json", "target/model.safetensors", "drafter/config.json", "drafter/model.safetensors", "drafter-train/metrics.jsonl"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	// heldout.jsonl holds the user message of every prompt the spec stage decoded.
	held, err := os.ReadFile(filepath.Join(dir, HeldOutFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(held), "\n"); n != res.Spec.Prompts || !strings.HasPrefix(string(held), `{"messages":[{"role":"user","content":`) {
		t.Fatalf("%s: %d lines for %d decoded prompts, starting %.60q", HeldOutFile, n, res.Spec.Prompts, held)
	}
	d, err := dflash.LoadDir[float32](filepath.Join(dir, "drafter"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Cfg.BlockSize != res.BlockSize || d.Cfg.VocabSize != res.Vocab {
		t.Fatalf("exported drafter config %+v", d.Cfg)
	}
}

// TestGPUDefaultsOnCPU checks the GPU demo's configuration (GPUDefaults) on
// the CPU backend with a tiny step count: its target fits the CUDA
// attention kernels (head dim 64 or 128, GQA), and every stage wires up at
// its sizes (the batched generation of GenBatch included): the target and
// the drafter of its shape in DIR/target and DIR/drafter, DIR/heldout.jsonl
// with the decoded prompts, decoding lossless.
func TestGPUDefaultsOnCPU(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("a target of 27M parameters on the CPU takes a while under the race detector")
	}
	g := GPUDefaults()
	if hd := g.TargetHeadDim; hd != 64 && hd != 128 || g.TargetHidden%hd != 0 || g.Device != "cuda" || g.GenBatch == 0 {
		t.Fatalf("GPUDefaults %+v: head dim %d of hidden %d", g, g.TargetHeadDim, g.TargetHidden)
	}
	dir := t.TempDir()
	o := g
	o.Device, o.Dir, o.Progress, o.CorpusBytes = "cpu", dir, "off", 200<<10
	o.TargetSteps, o.TargetBatch, o.Prompts, o.GenTokens, o.GenBatch = 2, 4, 12, 4, 16
	o.DraftSteps, o.DraftBatch, o.SpecPrompts = 2, 4, 2
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := model.ReadConfig(filepath.Join(dir, "target", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	heads := g.TargetHidden / g.TargetHeadDim
	if tc.HeadDim != g.TargetHeadDim || tc.NumHeads != heads || tc.NumKVHeads != heads/2 || tc.NumLayers != g.TargetLayers || tc.HiddenSize != g.TargetHidden {
		t.Fatalf("target config %+v", tc)
	}
	d, err := dflash.LoadDir[float32](filepath.Join(dir, "drafter"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Cfg.BlockSize != g.BlockSize || d.Cfg.NumLayers != g.DraftLayers || d.Cfg.HeadDim != g.TargetHeadDim || d.Cfg.HiddenSize != g.TargetHidden {
		t.Fatalf("drafter config %+v", d.Cfg)
	}
	if sp := res.Spec; sp == nil || sp.Prompts < 1 || sp.Prompts > o.SpecPrompts || sp.GreedyMatches != sp.Prompts || sp.BlockSize != g.BlockSize {
		t.Fatalf("speculative decoding %+v", res.Spec)
	}
	held, err := os.ReadFile(filepath.Join(dir, HeldOutFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(held), "\n"); n != res.Spec.Prompts {
		t.Fatalf("%s: %d lines for %d decoded prompts", HeldOutFile, n, res.Spec.Prompts)
	}
	if res.Device != "" || res.Conversations < 8 {
		t.Fatalf("device %q, %d conversations", res.Device, res.Conversations)
	}
}

// TestRunTargetDTypeRefused: an FP8 target needs a device, and a dtype
// other than bf16 or fp8 is named; both before any stage runs.
func TestRunTargetDTypeRefused(t *testing.T) {
	for dt, want := range map[string]string{"fp8": "runs on cuda", "fp16": `"fp16": bf16 or fp8`} {
		_, err := Run(context.Background(), Options{Device: "cpu", TargetDType: dt, Progress: "off"})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("target dtype %s on the CPU: error %v, want one containing %q", dt, err, want)
		}
	}
}
