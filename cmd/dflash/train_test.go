package main

import (
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"dflash/gpu"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/recipe"
	"dflash/recipe/recipetest"
	"dflash/rendezvous"
	"dflash/train"
)

var fixtureDir = flag.String("train-fixture", "", "TestWriteTrainFixture: write the GPU training fixture (target, conversations) under this directory")

// TestWriteTrainFixture writes, when -train-fixture is given, the fixture
// of the GPU training check (scripts/gpu-train.sh): recipetest.Fixture's
// conversations and tokenizer with a small Qwen3 target whose head
// dimension (64) the GPU attention kernels take.
func TestWriteTrainFixture(t *testing.T) {
	if *fixtureDir == "" {
		t.Skip("no -train-fixture directory")
	}
	target, data := recipetest.WriteFixture(t, *fixtureDir, model.Config{Arch: model.Qwen3, VocabSize: 300, HiddenSize: 128, IntermediateSize: 256,
		NumLayers: 4, NumHeads: 2, NumKVHeads: 1, HeadDim: 64, RMSNormEps: 1e-6, RopeTheta: 10000, MaxPositionEmbeddings: 1024}, 1<<20)
	t.Logf("wrote %s and %s", target, data)
}

func TestTrainCommand(t *testing.T) {
	targetDir, dataPath := recipetest.Fixture(t)
	// Resume is exact: 4 steps straight give the same drafter as 2 + resume + 2.
	out, _ := resumeExact(t, targetDir, dataPath, []string{"--data.batch-size", "2", "--eval-every", "2"}, nil, "")
	d, err := dflash.LoadDir[float32](filepath.Join(out, "drafter"))
	if err != nil {
		t.Fatal(err)
	}
	// One drafter layer taps the middle layer (L/2 = 2) of the 4-layer target.
	if d.Cfg.BlockSize != 4 || d.Cfg.NumLayers != 1 || len(d.Cfg.TargetLayerIDs) != 1 || d.Cfg.MaskTokenID != 299 {
		t.Fatalf("drafter config %+v", d.Cfg)
	}
	recs, err := train.ReadMetrics(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var evals, steps int
	for _, r := range recs {
		b, _ := json.Marshal(r)
		s := string(b)
		if strings.Contains(s, `"tau"`) && strings.Contains(s, `"acc_3"`) {
			evals++
		} else {
			steps++
		}
	}
	if evals < 2 || steps < 4 {
		t.Fatalf("metrics.jsonl: %d eval and %d step records:\n%v", evals, steps, recs)
	}
	// Unknown config keys are errors naming the key.
	cfgPath := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfgPath, []byte("steps: 3\ndrafter:\n  layerz: 2\n"), 0o644)
	err = runTrain([]string{"--target", targetDir, "--data", dataPath, "--out", filepath.Join(t.TempDir(), "x"), "--config", cfgPath})
	if err == nil || !strings.Contains(err.Error(), "layerz") {
		t.Fatalf("unknown key: %v", err)
	}
}

// TestTrainBuckets: with --data.buckets, 2 steps + --resume + 2 steps give
// the drafter of 4 straight steps bit for bit, every step record carries
// pad_frac, and resuming without buckets is refused as another run.
func TestTrainBuckets(t *testing.T) {
	targetDir, dataPath := recipetest.Fixture(t)
	_, straight := resumeExact(t, targetDir, dataPath, []string{"--data.batch-size", "3", "--data.pack=false", "--data.buckets", "2", "--eval-every", "0"},
		[]string{"--data.buckets", "0"}, "data.buckets: checkpoint 2, now (not given)")
	recs, err := train.ReadMetrics(filepath.Join(straight, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	// Every step's batch is 3 rows of a bucket of the fixture's lengths
	// (at most 400 tokens: 256 or 512): its padded positions, step tokens /
	// (1 - pad_frac), are 3 x 256 or 3 x 512.
	steps, prev := 0, 0.0
	for _, r := range recs {
		if r.Kind != "train" {
			continue
		}
		steps++
		pf, ok := r.Values["pad_frac"]
		if !ok {
			t.Fatalf("step record without pad_frac: %+v", r)
		}
		tok := r.Values["tokens"] - prev
		prev = r.Values["tokens"]
		padded := tok / (1 - pf)
		if math.Abs(padded-768) > 1e-6 && math.Abs(padded-1536) > 1e-6 {
			t.Fatalf("step %d: %v tokens, pad_frac %v: %v positions, want 768 or 1536", r.Step, tok, pf, padded)
		}
		// The step's samples, its tokens times samples/s over tokens/s, are
		// 1 to 3 whole rows (a bucket's last batch has empty pad rows); the
		// MFU is its FLOP rate over the CPU's peak.
		v := r.Values
		samples := tok * v["samples_per_s"] / v["tokens_per_s"]
		if n := math.Round(samples); math.Abs(samples-n) > 1e-6 || n < 1 || n > 3 {
			t.Fatalf("step %d: %v samples (samples/s %v, tokens/s %v)", r.Step, samples, v["samples_per_s"], v["tokens_per_s"])
		}
		if peak, _ := recipe.MFUPeak(0, nil, 0); !(v["tflops"] > 0) || math.Abs(v["mfu"]-v["tflops"]/peak) > 1e-12*v["mfu"] {
			t.Fatalf("step %d: tflops %v, mfu %v", r.Step, v["tflops"], v["mfu"])
		}
	}
	if evs, _ := filepath.Glob(filepath.Join(straight, train.EventFiles)); len(evs) != 1 {
		t.Fatalf("event files %v, want 1", evs)
	}
	if steps != 4 {
		t.Fatalf("%d step records, want 4: %v", steps, recs)
	}
}

// TestTrainPacked: with packed rows (the default), 2 steps + --resume + 2
// steps give the drafter of 4 straight steps bit for bit, every step is
// one shape (rows of 512 tokens: its tokens / (1 - pad_frac) are 3 x 512)
// and holds more samples than rows, and resuming unpacked is refused as
// another run.
func TestTrainPacked(t *testing.T) {
	targetDir, dataPath := recipetest.Fixture(t)
	_, straight := resumeExact(t, targetDir, dataPath, []string{"--data.batch-size", "3", "--data.pack-len", "512", "--eval-every", "2"},
		[]string{"--data.pack=false"}, "data.pack-len: checkpoint 512, now (not given)")
	recs, err := train.ReadMetrics(filepath.Join(straight, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	steps, more, prev := 0, 0, 0.0
	for _, r := range recs {
		if r.Kind != "train" {
			continue
		}
		steps++
		v := r.Values
		tok := v["tokens"] - prev
		prev = v["tokens"]
		if padded := tok / (1 - v["pad_frac"]); math.Abs(padded-1536) > 1e-6 {
			t.Fatalf("step %d: %v tokens, pad_frac %v: %v positions, want 3 x 512", r.Step, tok, v["pad_frac"], padded)
		}
		if samples := math.Round(tok * v["samples_per_s"] / v["tokens_per_s"]); samples > 3 {
			more++
		}
	}
	if steps != 4 || more == 0 {
		t.Fatalf("%d step records (want 4), %d of them with more samples than rows (want some)", steps, more)
	}
}

// TestTrainOnPreparedData trains from a `dflash data prep` directory.
func TestTrainOnPreparedData(t *testing.T) {
	targetDir, dataPath := recipetest.Fixture(t)
	prep := filepath.Join(t.TempDir(), "prep")
	if err := dataPrep([]string{"--tokenizer", targetDir, "--data", dataPath, "--out", prep, "--block-size", "4", "--max-len", "400"}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "run")
	if err := runTrain([]string{"--target", targetDir, "--data", prep, "--out", out, "--progress", "off", "--plot=false",
		"--steps", "2", "--drafter.block-size", "4", "--drafter.anchors", "4", "--data.batch-size", "2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := dflash.LoadDir[float32](filepath.Join(out, "drafter")); err != nil {
		t.Fatal(err)
	}
}

// TestTrainRejectsBadOptions: every bad value, from a flag or the config file, is an
// error naming the option as the user gave it and its range, before anything is
// loaded or written (the target and data paths do not even exist).
func TestTrainRejectsBadOptions(t *testing.T) {
	cases := []struct {
		name string
		args []string
		yaml string
		want string
	}{
		{"batch-zero", []string{"--data.batch-size", "0"}, "", "--data.batch-size 0: must be an int >= 1"},
		{"batch-negative", []string{"--data.batch-size=-2"}, "", "--data.batch-size -2: must be an int >= 1"},
		{"buckets-negative", []string{"--data.buckets=-1"}, "", "--data.buckets -1: must be an int >= 0"},
		{"yaml-buckets", nil, "data:\n  buckets: -3\n", "c.yaml line 2: data.buckets -3: must be an int >= 0"},
		{"layers-zero", []string{"--drafter.layers", "0"}, "", "--drafter.layers 0: must be an int >= 1"},
		{"eval-fraction-one", []string{"--data.eval-fraction", "1"}, "", "--data.eval-fraction 1: must be a finite float in [0, 1)"},
		{"eval-fraction-negative", []string{"--data.eval-fraction=-0.1"}, "", "in [0, 1)"},
		{"workers-negative", []string{"--workers=-3"}, "", "--workers -3: must be an int >= 0"},
		{"block-size-one", []string{"--drafter.block-size", "1"}, "", "--drafter.block-size 1: must be an int >= 2"},
		{"anchors-zero", []string{"--drafter.anchors", "0"}, "", "--drafter.anchors 0: must be an int >= 1"},
		{"lr-zero", []string{"--lr", "0"}, "", "--lr 0: must be a finite float > 0"},
		{"steps-zero", []string{"--steps", "0"}, "", "--steps 0: must be an int >= 1"},
		{"mask-id", []string{"--drafter.mask-token-id=-2"}, "", "--drafter.mask-token-id -2: must be an int >= -1"},
		{"taps-negative", []string{"--drafter.taps", "1,-1"}, "", "--drafter.taps 1,-1: must be a comma-separated list of ints, each >= 0"},
		{"export-dtype", []string{"--drafter.export", "F16"}, "", "--drafter.export F16: must be one of F32, BF16"},
		{"format", []string{"--data.format", "csv"}, "", "--data.format csv: must be one of auto, messages, sharegpt"},
		{"flag-fraction-int", []string{"--data.batch-size", "2.5"}, "", `invalid value "2.5" for flag -data.batch-size: "2.5" is not an integer`},
		{"yaml-fraction-int", nil, "data:\n  batch-size: 2.5\n", `c.yaml line 2: data.batch-size: "2.5" is not an integer`},
		{"yaml-range", nil, "drafter:\n  layers: 0\n", "c.yaml line 2: drafter.layers 0: must be an int >= 1"},
		{"yaml-dotted-range", nil, "data.eval-fraction: 1.5\n", "c.yaml line 1: data.eval-fraction 1.5: must be a finite float in [0, 1)"},
		{"yaml-old-spelling", nil, "drafter:\n  mask_token_id: 3\n", "c.yaml line 2: drafter.mask_token_id: unknown option (did you mean drafter.mask-token-id?"},
		{"flag-beats-file", []string{"--data.batch-size", "0"}, "data:\n  batch-size: 3\n", "--data.batch-size 0: must be"},
		{"missing-target", []string{"--target", ""}, "", "--target and --data are required"},
		{"rank-below", []string{"--rank=-2"}, "", "--rank -2: must be an int >= -1"},
		{"rank-past-world", []string{"--rank", "2", "--world-size", "2", "--rendezvous", "h:1"}, "", "--rank 2 is outside the world of 2 ranks (--world-size): want 0..1"},
		{"world-without-address", []string{"--world-size", "2"}, "", "--world-size 2: a job of several ranks needs the rendezvous address"},
		{"yaml-rendezvous", nil, "world-size: 2\nrendezvous: nohost\n", `c.yaml line 2: rendezvous "nohost": want host:port`},
	}
	clearLaunchEnv(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			args := []string{"--target", filepath.Join(dir, "no-target"), "--data", filepath.Join(dir, "no-data"), "--out", out}
			if c.yaml != "" {
				p := filepath.Join(dir, "c.yaml")
				if err := os.WriteFile(p, []byte(c.yaml), 0o644); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", p)
			}
			err := runTrain(append(args, c.args...))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Fatalf("%s was created", out)
			}
		})
	}
}

// TestTrainResumeChecks: --resume refuses an output directory with nothing to resume
// and a checkpoint of another run, naming the differing fields; --resume-anyway
// continues.
func TestTrainResumeChecks(t *testing.T) {
	targetDir, dataPath := recipetest.Fixture(t)
	out := filepath.Join(t.TempDir(), "run")
	common := []string{"--target", targetDir, "--data", dataPath, "--out", out, "--progress", "off", "--plot=false",
		"--drafter.block-size", "4", "--drafter.anchors", "4", "--data.batch-size", "2", "--data.max-len", "300", "--steps", "4"}
	err := runTrain(append([]string{"--resume"}, common...))
	if err == nil || !strings.Contains(err.Error(), "--resume: nothing to resume from") {
		t.Fatalf("resume of nothing: %v", err)
	}
	if err := runTrain(append([]string{"--stop-at", "2"}, common...)); err != nil {
		t.Fatal(err)
	}
	err = runTrain(append(common, "--resume", "--drafter.block-size", "8", "--data.max-len", "200"))
	for _, want := range []string{"belongs to another run", "drafter.block-size: checkpoint 4, now 8", "--resume-anyway"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("err %v lacks %q", err, want)
		}
	}
	other := filepath.Join(t.TempDir(), "other.jsonl")
	raw, _ := os.ReadFile(dataPath)
	lines := strings.SplitAfter(string(raw), "\n")
	os.WriteFile(other, []byte(strings.Join(lines[:len(lines)-3], "")), 0o644)
	args := append(common, "--resume")
	args[3] = other
	if err := runTrain(args); err == nil || !strings.Contains(err.Error(), "data: checkpoint sha256:") {
		t.Fatalf("other data: %v", err)
	}
	if err := runTrain(append(common, "--resume", "--drafter.block-size", "8", "--resume-anyway")); err != nil {
		t.Fatalf("resume-anyway: %v", err)
	}
}

// TestTrainCUDAMissing: on a machine without a GPU (or its libraries),
// --device cuda fails before the first step with an error that names what
// is missing and where it looked, and writes no checkpoint.
func TestTrainCUDAMissing(t *testing.T) {
	if _, err := gpu.Count(); err == nil {
		t.Skip("a GPU is present (scripts/gpu-train.sh runs the CUDA training)")
	}
	targetDir, dataPath := recipetest.Fixture(t)
	out := filepath.Join(t.TempDir(), "run")
	err := runTrain([]string{"--target", targetDir, "--data", dataPath, "--out", out, "--progress", "off", "--plot=false",
		"--steps", "2", "--drafter.block-size", "4", "--drafter.anchors", "4", "--data.batch-size", "2", "--device", "cuda"})
	if err == nil || !strings.HasPrefix(err.Error(), "--device cuda: ") || !strings.Contains(err.Error(), "searched") {
		t.Fatalf("--device cuda without a GPU: %v", err)
	}
	if ms, _ := filepath.Glob(filepath.Join(out, "checkpoint-*")); len(ms) > 0 {
		t.Fatalf("checkpoints written: %v", ms)
	}
	t.Log(err)
}

// clearLaunchEnv unsets the torchrun variables for the test.
func clearLaunchEnv(t *testing.T) {
	for _, k := range []string{rendezvous.EnvRank, rendezvous.EnvWorldSize, rendezvous.EnvLocalRank, rendezvous.EnvMasterAddr, rendezvous.EnvMasterPort} {
		t.Setenv(k, "")
	}
}

// TestTrainRanksRefused: what several ranks cannot do is refused before
// anything is loaded, naming the flag or variable: a job of several ranks
// (from the flags or torchrun's environment) on the CPU, --gpus without
// --device cuda, --gpus in a job of several processes, and length buckets
// with several ranks.
func TestTrainRanksRefused(t *testing.T) {
	clearLaunchEnv(t)
	dir := t.TempDir()
	args := []string{"--target", filepath.Join(dir, "no-target"), "--data", filepath.Join(dir, "no-data"), "--out", filepath.Join(dir, "out")}
	multi := []string{"--world-size", "2", "--rank", "1", "--rendezvous", "localhost:29500"}
	for _, c := range []struct {
		name  string
		extra []string
		want  string
	}{
		{"cpu world", multi, "world size 2 with --device cpu: a job of several ranks trains on GPUs (--device cuda, NCCL)"},
		{"cpu gpus", []string{"--gpus", "0,1"}, `--gpus "0,1" needs --device cuda`},
		{"bad gpus", []string{"--device", "cuda", "--gpus", "0,zero"}, `--gpus "0,zero": "zero" is not a GPU ordinal (0, 1, ...; or all)`},
		{"gpus and processes", append([]string{"--device", "cuda", "--gpus", "0,1"}, multi...),
			"--gpus [0 1] with a world of 2 processes: each process drives one GPU, its local rank (LOCAL_RANK, else the rank); leave --gpus out"},
		{"buckets", []string{"--device", "cuda", "--gpus", "0,1", "--data.pack=false", "--data.buckets", "3"},
			"--data.buckets 3 with 2 ranks: not yet (the bucket sampler is not sharded across ranks); set it to 0"},
		{"buckets packed", []string{"--device", "cuda", "--gpus", "0,1", "--data.buckets", "3"},
			"--data.buckets 3: length buckets are for batches of a conversation a row; with packed rows (the default) every batch has one shape already: add --data.pack=false to use buckets"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := runTrain(append(slices.Clone(args), c.extra...)); err == nil || err.Error() != c.want {
				t.Fatalf("err %v\nwant %s", err, c.want)
			}
		})
	}
	t.Setenv(rendezvous.EnvWorldSize, "4")
	t.Setenv(rendezvous.EnvRank, "3")
	t.Setenv(rendezvous.EnvMasterAddr, "node0")
	t.Setenv(rendezvous.EnvMasterPort, "29500")
	if err := runTrain(args); err == nil || !strings.Contains(err.Error(), "world size 4 with --device cpu") {
		t.Fatalf("WORLD_SIZE=4: %v", err)
	}
	if err := runTrain(append(args, "--world-size", "1", "--rank", "0")); err == nil || strings.Contains(err.Error(), "world size") {
		t.Fatalf("flags --world-size 1 over WORLD_SIZE=4: %v (want the missing target)", err)
	}
}

// resumeExact trains the drafter of target on data for 2 of 4 steps with
// flags (past those every such run shares), checks that a --resume adding
// refused is refused with an error containing refusal (where refused is
// given), resumes to step 4, trains 4 steps straight in another directory
// and fails t unless the two drafters are the same bit for bit. It returns
// the two runs' output directories.
func resumeExact(t *testing.T, target, data string, flags, refused []string, refusal string) (out, straight string) {
	t.Helper()
	out, straight = filepath.Join(t.TempDir(), "run"), filepath.Join(t.TempDir(), "straight")
	run := func(dir string, extra ...string) error {
		return runTrain(slices.Concat([]string{"--target", target, "--data", data, "--out", dir, "--steps", "4", "--progress", "off", "--plot=false",
			"--drafter.block-size", "4", "--drafter.anchors", "6", "--data.max-len", "400", "--save-every", "2", "--warmup-steps", "1",
			"--drafter.export", "F32"}, flags, extra))
	}
	if err := run(out, "--stop-at", "2"); err != nil {
		t.Fatal(err)
	}
	if refused != nil {
		if err := run(out, append([]string{"--resume"}, refused...)...); err == nil || !strings.Contains(err.Error(), refusal) {
			t.Fatalf("resume with %v: %v", refused, err)
		}
	}
	if err := run(out, "--resume"); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if err := run(straight); err != nil {
		t.Fatal(err)
	}
	d, err := dflash.LoadDir[float32](filepath.Join(out, "drafter"))
	if err != nil {
		t.Fatal(err)
	}
	sameDrafter(t, d, filepath.Join(straight, "drafter"))
	return out, straight
}

// sameDrafter fails t unless the drafter exported in dir holds d's values
// bit for bit (a resumed run against the same run straight through).
func sameDrafter(t *testing.T, d *dflash.Drafter[float32], dir string) {
	t.Helper()
	d2, err := dflash.LoadDir[float32](dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range d.Params() {
		for j, v := range p.Data() {
			if w := d2.Params()[i].Data()[j]; math.Float32bits(v) != math.Float32bits(w) {
				t.Fatalf("%s[%d]: %v after resume, %v straight (bit-identical required)", p.Name, j, v, w)
			}
		}
	}
}
