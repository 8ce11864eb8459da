package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"dflash/data/chat"
	"dflash/model"
	"dflash/model/dflash"
	"dflash/recipe/recipetest"
	"dflash/train"
)

// specFixture returns recipetest.Fixture's target and conversations and a random
// drafter for the target written to a directory.
func specFixture(t *testing.T, hidden int) (targetDir, drafterDir, dataPath string) {
	t.Helper()
	targetDir, dataPath = recipetest.Fixture(t)
	m, err := model.Load(targetDir)
	if err != nil {
		t.Fatal(err)
	}
	c := dflash.DrafterConfigFor(m, 1, nil, 4, 299)
	c.HiddenSize, c.Target.HiddenSize = hidden, hidden
	d := dflash.New[float32](c, rand.New(rand.NewPCG(1, 2)))
	drafterDir = filepath.Join(t.TempDir(), "drafter")
	if err := d.WriteDir(drafterDir, "F32"); err != nil {
		t.Fatal(err)
	}
	return targetDir, drafterDir, dataPath
}

func TestSpecCommand(t *testing.T) {
	targetDir, drafterDir, dataPath := specFixture(t, 32)
	out := filepath.Join(t.TempDir(), "gen.jsonl")
	var stdout bytes.Buffer
	o := specOptions{Target: targetDir, Drafter: drafterDir, Prompts: dataPath, Format: "auto", Device: "cpu",
		Out: out, MaxNew: 8, MaxPrompts: 3, JSON: true, Baseline: true, Workers: 1, Batch: 2}
	if err := specDecode(context.Background(), o, &stdout); err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	t.Logf("%s", stdout.String())
	if r["prompts"] != 3.0 || r["batch"] != 2.0 || r["greedy_matches"] != 3.0 || r["acceptance_length"].(float64) < 1 || r["speedup"].(float64) <= 0 ||
		len(r["acceptance_histogram"].([]any)) != 4 || len(r["acceptance_per_position"].([]any)) != 3 {
		t.Fatalf("report %v", r)
	}
	lines := strings.Split(strings.TrimSpace(readFile(t, out)), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d generation lines", len(lines))
	}
	var g map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &g); err != nil || g["line"] != 1.0 || !strings.HasSuffix(g["prompt"].(string), "<|im_start|>assistant\n") {
		t.Fatalf("generation %v (%v)", g, err)
	}
	// The table form, one prompt at a time.
	o.JSON, o.Out, o.Batch = false, "", 1
	stdout.Reset()
	if err := specDecode(context.Background(), o, &stdout); err != nil || !strings.Contains(stdout.String(), "speedup") {
		t.Fatalf("table: %v\n%s", err, stdout.String())
	}
}

func TestSpecBadInput(t *testing.T) {
	targetDir, drafterDir, dataPath := specFixture(t, 48)
	o := specOptions{Target: targetDir, Drafter: drafterDir, Prompts: dataPath, Format: "auto", Device: "cpu", MaxNew: 4, Batch: 1}
	for _, n := range []string{"0", "65"} {
		if _, err := parseSpec([]string{"--target", targetDir, "--drafter", drafterDir, "--prompts", dataPath, "--batch", n}); err == nil || !strings.Contains(err.Error(), "batch") {
			t.Fatalf("--batch %s: %v", n, err)
		}
	}
	err := specDecode(context.Background(), o, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "hidden_size 48, the target's is 32") {
		t.Fatalf("a drafter of another hidden size: %v", err)
	}
	// Without a GPU the error names the device; with one, the misfit drafter.
	if err := runSpec([]string{"--target", targetDir, "--drafter", drafterDir, "--prompts", dataPath, "--device", "cuda"}); err == nil || !strings.Contains(err.Error(), "--device cuda") {
		t.Fatalf("--device cuda: %v", err)
	}
	tok, tmpl, err := chat.LoadModel(targetDir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = readSpecPrompts(o, 30, tok, tmpl)
	if err == nil || !strings.Contains(err.Error(), "conv.jsonl:1: prompt of") || !strings.Contains(err.Error(), "conv.jsonl:2: prompt of") {
		t.Fatalf("prompts past a context limit of 30: %v", err)
	}
	o.Prompts = filepath.Join(t.TempDir(), "two.jsonl")
	two := `{"messages": [{"role": "user", "content": "hi"}]}` + "\n" +
		`{"messages": [{"role": "user", "content": "` + strings.Repeat("func main() { return } ", 20) + `"}]}` + "\n"
	if err := os.WriteFile(o.Prompts, []byte(two), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err = readSpecPrompts(o, 30, tok, tmpl); err == nil || !strings.HasPrefix(err.Error(), "1 prompt is longer than the target's context limit of 30 tokens") ||
		!strings.Contains(err.Error(), "two.jsonl:2: prompt of ") {
		t.Fatalf("one prompt past the limit: %v", err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTrainSpecEval checks --spec-eval-every: the eval records of the steps
// it names (and the last) carry the real acceptance length spec_tau beside
// the simulated tau, the acceptance at every block position and the
// decoding's tokens/s; the others do not. The spec evaluations change
// nothing of training: the same run without them has the same loss at
// every step, bit for bit.
func TestTrainSpecEval(t *testing.T) {
	targetDir, dataPath := recipetest.Fixture(t)
	run := func(specEvery string) []train.Record {
		out := filepath.Join(t.TempDir(), "run")
		err := runTrain([]string{"--target", targetDir, "--data", dataPath, "--out", out, "--progress", "off", "--plot=false",
			"--steps", "5", "--eval-every", "1", "--spec-eval-every", specEvery, "--spec-prompts", "2", "--spec-max-new-tokens", "6",
			"--drafter.block-size", "4", "--drafter.anchors", "6", "--data.batch-size", "2", "--data.max-len", "400", "--warmup-steps", "1"})
		if err != nil {
			t.Fatal(err)
		}
		recs, err := train.ReadMetrics(filepath.Join(out, "metrics.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	recs := run("2")
	var specSteps []int
	for _, r := range recs {
		if r.Kind != "eval" {
			continue
		}
		tau, ok := r.Values["spec_tau"]
		if !ok {
			continue
		}
		if tau < 1 || tau > 4 || r.Values["tau"] < 1 {
			t.Fatalf("step %d: spec_tau %v, tau %v", r.Step, tau, r.Values["tau"])
		}
		for _, k := range []string{"spec_pos_1", "spec_pos_2", "spec_pos_3", "spec_tokens_per_s"} {
			if v, ok := r.Values[k]; !ok || v < 0 || k != "spec_tokens_per_s" && v > 1 || k == "spec_tokens_per_s" && v == 0 {
				t.Fatalf("step %d: %s %v (present %v)", r.Step, k, v, ok)
			}
		}
		specSteps = append(specSteps, r.Step)
	}
	if !slices.Equal(specSteps, []int{2, 4, 5}) {
		t.Fatalf("spec_tau at steps %v, want [2 4 5]", specSteps)
	}
	losses := func(recs []train.Record) (l []float64) {
		for _, r := range recs {
			if r.Kind == "train" {
				l = append(l, r.Values["loss"])
			}
		}
		return l
	}
	with, without := losses(recs), losses(run("0"))
	if len(with) != 5 || !slices.Equal(with, without) {
		t.Fatalf("training losses with spec evaluations %v, without %v", with, without)
	}
}
