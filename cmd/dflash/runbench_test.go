package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"dflash/data"
	"dflash/data/chat"
	"dflash/data/tokenizer"
	"dflash/internal/tfevents"
	"dflash/model"
	"dflash/recipe/stepbench"
	"dflash/safetensors"
	"dflash/train"
)

// The scripts of the whole-run benchmark (scripts/gpu-run-bench.sh) that
// run without torch, checked against dflash's own readers.

var benchDir = filepath.Join("..", "..", "bench")

// python runs bench/SCRIPT with args and returns its stdout, skipping the
// test when there is no python3.
func python(t *testing.T, script string, args ...string) []byte {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on PATH")
	}
	cmd := exec.Command(py, append([]string{filepath.Join(benchDir, script)}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", script, args, err, stderr.String())
	}
	return out
}

// qwen3Tokenizer returns the Qwen3 tokenizer directory of testdata-cache,
// skipping the test without it.
func qwen3Tokenizer(t *testing.T) string {
	dir := filepath.Join("..", "..", "testdata-cache", "tokenizers", "qwen3")
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Skip("no testdata-cache/tokenizers/qwen3 (bash scripts/fetch-testdata.sh)")
	}
	return dir
}

// TestRandomQwen3Script: bench/random_qwen3.py's config.json parses to
// stepbench's shape for every target name, and a directory it writes (the
// torch-free writer, tiny shape) is one that model.Load, the tokenizer and
// the chat template load: every tensor named and shaped as the model
// declares it, none extra, norms ones and weights of standard deviation 0.02.
func TestRandomQwen3Script(t *testing.T) {
	for _, name := range stepbench.TargetNames() {
		got, err := model.ParseConfig(python(t, "random_qwen3.py", "--config", name, "--print-config"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.BOSTokenID == nil || *got.BOSTokenID != 151643 || !slices.Equal(got.EOSTokenIDs, []int{151645}) {
			t.Fatalf("%s: bos %v eos %v, want 151643 and [151645] as the Qwen3 repositories", name, got.BOSTokenID, got.EOSTokenIDs)
		}
		got.BOSTokenID, got.EOSTokenIDs = nil, nil // stepbench's shapes have none
		want, _ := stepbench.Target(name)
		if !reflect.DeepEqual(*got, want) {
			t.Fatalf("%s: config.json gives\n%+v\nstepbench has\n%+v", name, *got, want)
		}
	}

	tok := qwen3Tokenizer(t)
	dir := filepath.Join(t.TempDir(), "tiny")
	python(t, "random_qwen3.py", dir, "--config", "tiny", "--writer", "stdlib", "--shards", "2", "--tokenizer", tok, "--seed", "3")
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config
	if c.VocabSize != 151936 || c.HiddenSize != 64 || c.NumLayers != 2 || c.HeadDim != 16 || c.TieWordEmbeddings || m.LMHead == m.Embed {
		t.Fatalf("config %+v", c)
	}
	raw, err := os.ReadFile(filepath.Join(dir, safetensors.IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	shards := map[string]bool{}
	for _, f := range idx.WeightMap {
		shards[f] = true
	}
	if len(shards) != 2 || !shards["model-00001-of-00002.safetensors"] || !shards["model-00002-of-00002.safetensors"] {
		t.Fatalf("shards %v", shards)
	}
	var names []string
	for _, p := range m.Params() {
		names = append(names, p.Name)
		d := p.Data()
		if strings.HasSuffix(p.Name, "norm.weight") {
			if slices.ContainsFunc(d, func(v float32) bool { return v != 1 }) {
				t.Fatalf("%s: a norm weight is not 1", p.Name)
			}
			continue
		}
		var s, s2 float64
		for _, v := range d {
			s += float64(v)
			s2 += float64(v) * float64(v)
		}
		n := float64(len(d))
		mean, std := s/n, math.Sqrt(s2/n-(s/n)*(s/n))
		if math.Abs(mean) > 0.003 || math.Abs(std-0.02) > 0.002 {
			t.Fatalf("%s: mean %.4g std %.4g, want about 0 and 0.02", p.Name, mean, std)
		}
	}
	slices.Sort(names)
	var indexed []string
	for n := range idx.WeightMap {
		indexed = append(indexed, n)
	}
	slices.Sort(indexed)
	if !slices.Equal(names, indexed) {
		t.Fatalf("index names %v\nmodel parameters %v", indexed, names)
	}
	tk, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chat.Load(dir, tk); err != nil {
		t.Fatal(err)
	}
}

// TestMakeChatsScript: bench/make_chats.py's conversations are, by the real
// Qwen3 tokenizer and chat template (data.Prep), exactly as long as the
// script says, with the intended median, 90th percentile, cap and supervised
// share, 1 to 4 turns each, and the same file for the same seed.
func TestMakeChatsScript(t *testing.T) {
	tok := qwen3Tokenizer(t)
	dir := t.TempDir()
	path, lensPath := filepath.Join(dir, "chats.jsonl"), filepath.Join(dir, "lengths.txt")
	python(t, "make_chats.py", path, "--n", "2500", "--seed", "3", "--lengths", lensPath)
	python(t, "make_chats.py", filepath.Join(dir, "same.jsonl"), "--n", "2500", "--seed", "3")
	python(t, "make_chats.py", filepath.Join(dir, "other.jsonl"), "--n", "2500", "--seed", "4")
	a, _ := os.ReadFile(path)
	same, _ := os.ReadFile(filepath.Join(dir, "same.jsonl"))
	other, _ := os.ReadFile(filepath.Join(dir, "other.jsonl"))
	if string(a) != string(same) || string(a) == string(other) {
		t.Fatalf("same seed equal: %v, other seed different: %v", string(a) == string(same), string(a) != string(other))
	}
	var intended []int
	raw, _ := os.ReadFile(lensPath)
	for _, f := range strings.Fields(string(raw)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		intended = append(intended, n)
	}

	prep := filepath.Join(dir, "prep")
	sum, err := data.Prep(context.Background(), data.PrepConfig{Options: data.DefaultOptions(), TokenizerDir: tok, Files: []string{path}, Out: prep})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Kept != 2500 || sum.Truncated != 0 || len(sum.Dropped) != 0 {
		t.Fatalf("prep kept %d, truncated %d, dropped %v", sum.Kept, sum.Truncated, sum.Dropped)
	}
	d, err := data.Open(prep)
	if err != nil {
		t.Fatal(err)
	}
	got := d.Lengths()
	d.Close()
	slices.Sort(got)
	slices.Sort(intended)
	if !slices.Equal(got, intended) {
		for i := range got {
			if got[i] != intended[i] {
				t.Fatalf("sorted lengths differ first at %d: prep %d, the script %d", i, got[i], intended[i])
			}
		}
		t.Fatalf("%d lengths from prep, %d from the script", len(got), len(intended))
	}
	med, p90 := got[len(got)/2], got[int(0.9*float64(len(got)))]
	share := float64(sum.Supervised) / float64(sum.Tokens)
	if math.Abs(float64(med)/763-1) > 0.02 || math.Abs(float64(p90)/1918-1) > 0.02 || got[len(got)-1] != 3072 || share < 0.65 || share > 0.75 {
		t.Fatalf("median %d (want 763), p90 %d (want 1918), max %d (want 3072), supervised %.3f (want 0.65-0.75)", med, p90, got[len(got)-1], share)
	}
	sc := bufio.NewScanner(strings.NewReader(string(a)))
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		var conv struct {
			Messages []struct{ Role, Content string }
		}
		if err := json.Unmarshal(sc.Bytes(), &conv); err != nil {
			t.Fatalf("line %d: %v", line, err)
		}
		if n := len(conv.Messages); n < 2 || n > 8 || n%2 != 0 {
			t.Fatalf("line %d: %d messages, want 1 to 4 user/assistant pairs", line, n)
		}
		for i, msg := range conv.Messages {
			if want := []string{"user", "assistant"}[i%2]; msg.Role != want || msg.Content == "" {
				t.Fatalf("line %d message %d: role %q (want %s), %d bytes", line, i, msg.Role, want, len(msg.Content))
			}
		}
	}
}

// TestRunReportScript: bench/run_report.py splits a run's time as its
// records and the event file's wall clock (written by internal/tfevents)
// give it, from the cumulative time_*_s and samples fields when the records
// carry them and from the step and eval records when they do not, and
// forms the ratios with the peer.
func TestRunReportScript(t *testing.T) {
	out := t.TempDir()
	const began = 1.8e9 // Unix seconds of train.Run's start
	// Four steps ending at t = 12, 14, 24 and 26 s, of 2 s by their tokens and tokens_per_s (1.9 s by
	// the packed run's time_steps_s); an eval of 3 s and a checkpoint of 5 s after step 2; after step 4
	// an eval of 3 s; the process started 5 s before train.Run and ended at 40 s.
	type rec struct {
		step int
		time float64
		eval bool
	}
	recs := []rec{{1, 12, false}, {2, 14, false}, {2, 17, true}, {3, 24, false}, {4, 26, false}, {4, 29, true}}
	write := func(name string, fields bool) {
		dir := filepath.Join(out, name)
		w, err := tfevents.Create(dir, time.Unix(int64(began), 0))
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(dir, "metrics.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			v := map[string]float64{"loss": 5}
			if !r.eval {
				v = map[string]float64{"tokens": float64(1000 * r.step), "tokens_per_s": 500, "samples_per_s": 2, "pad_frac": 0.1 * float64(r.step)}
				if fields { // 5 samples and 1.9 s a step: not what the fallback would derive
					v["samples"], v["time_steps_s"], v["time_wall_s"] = float64(5*r.step), 1.9*float64(r.step), r.time-10.1
					v["time_eval_s"], v["time_ckpt_s"] = 0, 0
					if r.step > 2 {
						v["time_eval_s"], v["time_ckpt_s"] = 3, 5
					}
				}
			}
			kind := map[bool]string{false: "train", true: "eval"}[r.eval]
			line, _ := train.Record{Kind: kind, Step: r.step, Time: r.time, Values: v}.MarshalJSON()
			f.Write(append(line, '\n'))
			if err := w.Scalars(int64(r.step), time.Unix(0, int64((began+r.time)*1e9)), v); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
		w.Close()
		os.WriteFile(filepath.Join(dir, "times.json"), fmt.Appendf(nil, `{"start": %.3f, "end": %.3f, "rc": 0}`, began-5, began+40), 0o644)
	}
	write("packed", true)
	write("buckets", false)
	os.MkdirAll(filepath.Join(out, "peer"), 0o755)
	os.WriteFile(filepath.Join(out, "peer", "peer.json"), []byte(`{"mode": "shipped", "batch": 4, "samples_per_s": 0.5, "grid": []}`), 0o644)

	var res struct {
		Runs map[string]struct {
			Samples            float64
			SamplesPerSWall    float64             `json:"samples_per_s_wall"`
			SamplesPerSSteps   float64             `json:"samples_per_s_steps"`
			SamplesPerSProcess float64             `json:"samples_per_s_process"`
			PadFracMean        float64             `json:"pad_frac_mean"`
			Split              map[string]*float64 `json:"split_s"`
		}
		Ratios map[string]float64
	}
	if err := json.Unmarshal(python(t, "run_report.py", out, "--json"), &res); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name                        string
		samples, start, wall, steps float64
		checkpoint                  *float64
		other                       float64
	}{
		// Without the fields: 4 samples (2/s for 2 s) a step, the eval from its record, the
		// checkpoint inside "other".
		{name: "buckets", samples: 16, start: 15, wall: 16, steps: 8, other: 5},
		{name: "packed", samples: 20, start: 15.1, wall: 15.9, steps: 7.6, checkpoint: ptr(5), other: 15.9 - 7.6 - 3 - 5},
	} {
		r, ok := res.Runs[c.name]
		if !ok {
			t.Fatalf("no run %s in %+v", c.name, res)
		}
		want := map[string]*float64{"start_to_first_step": &c.start, "steps": &c.steps, "eval": ptr(3), "checkpoint": c.checkpoint,
			"other_between_steps": &c.other, "final_eval": ptr(3), "final_checkpoint_export": ptr(11), "total": ptr(45)}
		for k, w := range want {
			g := r.Split[k]
			if (g == nil) != (w == nil) || g != nil && math.Abs(*g-*w) > 1e-3 {
				t.Errorf("%s: split %s = %v, want %v", c.name, k, deref(g), deref(w))
			}
		}
		if math.Abs(r.Samples-c.samples) > 1e-9 || math.Abs(r.SamplesPerSWall-c.samples/c.wall) > 1e-9 ||
			math.Abs(r.SamplesPerSSteps-c.samples/c.steps) > 1e-9 || math.Abs(r.SamplesPerSProcess-c.samples/45) > 1e-6 ||
			math.Abs(r.PadFracMean-0.25) > 1e-9 {
			t.Errorf("%s: %+v", c.name, r)
		}
	}
	for k, w := range map[string]float64{"packed/buckets wall": 20 / 15.9, "packed/peer wall": 20 / 15.9 / 0.5,
		"buckets/peer steps-only": 2 / 0.5, "buckets wall/steps-only": 0.5} {
		if g, ok := res.Ratios[k]; !ok || math.Abs(g-w) > 1e-9 {
			t.Errorf("ratio %s = %v (present %v), want %v", k, g, ok, w)
		}
	}
	text := string(python(t, "run_report.py", out))
	if !strings.Contains(text, "checkpoint stall n/a") || !strings.Contains(text, "checkpoint stall 5.0") {
		t.Errorf("the table does not say n/a for the bucketed run's checkpoint stall and 5.0 for the packed one's:\n%s", text)
	}
}

func ptr(v float64) *float64 { return &v }

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
