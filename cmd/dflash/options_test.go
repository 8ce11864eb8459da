package main

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"dflash/demo"
	"dflash/recipe/recipetest"
)

// TestCommandsRejectBadOptions: every numeric option of spec, data prep and demo is
// checked when the flags are parsed, and the error names the flag as typed with its
// range; nothing is written.
func TestCommandsRejectBadOptions(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	spec := []string{"--target", "t", "--drafter", "d", "--prompts", "p.jsonl"}
	prep := []string{"--tokenizer", "t", "--data", "p.jsonl", "--out", out}
	parse := map[string]func([]string) error{
		"spec": func(a []string) error { _, err := parseSpec(append(spec, a...)); return err },
		"prep": func(a []string) error { _, _, err := parsePrep(append(prep, a...)); return err },
		"demo": func(a []string) error { _, _, err := parseDemo(append([]string{"--dir", out}, a...)); return err },
	}
	cases := []struct {
		cmd  string
		args []string
		want string
	}{
		{"spec", []string{"--temperature", "NaN"}, `"NaN" is not a finite number: must be a finite float >= 0`},
		{"spec", []string{"--temperature", "+Inf"}, `"+Inf" is not a finite number`},
		{"spec", []string{"--temperature=-0.5"}, "--temperature -0.5: must be a finite float >= 0"},
		{"spec", []string{"--top-k=-1"}, "--top-k -1: must be an int >= 0"},
		{"spec", []string{"--max-new-tokens", "0"}, "--max-new-tokens 0: must be an int >= 1"},
		{"spec", []string{"--max-prompts=-1"}, "--max-prompts -1: must be an int >= 0"},
		{"spec", []string{"--workers=-2"}, "--workers -2: must be an int >= 0"},
		{"spec", []string{"--seed=-1"}, `"-1" is not a non-negative integer`},
		{"spec", []string{"--format", "csv"}, "--format csv: must be one of auto, messages, sharegpt"},
		{"spec", []string{"--device", "tpu"}, "--device tpu: must be one of cpu"},
		{"spec", []string{"--device", "tpu"}, "--device tpu: must be one of cpu, cuda"},
		{"spec", []string{"--top-k", "1.5"}, `"1.5" is not an integer: must be an int >= 0`},
		{"spec", []string{"stray"}, `unexpected argument "stray"`},
		{"prep", []string{"--shard-tokens=-5"}, "--shard-tokens -5: must be an int >= 0"},
		{"prep", []string{"--workers=-1"}, "--workers -1: must be an int >= 0"},
		{"prep", []string{"--max-len=-1"}, "--max-len -1: must be an int >= 0"},
		{"prep", []string{"--block-size", "0"}, "--block-size 0: must be an int >= 1"},
		{"prep", []string{"--max-len", "20", "--block-size", "16"}, "--max-len 20, --block-size 16: "},
		{"prep", []string{"--format", "csv"}, "--format csv: must be one of auto, messages, sharegpt"},
		{"prep", []string{"--thinking=false", "--enable-thinking"}, "--thinking and --enable-thinking disagree"},
		{"prep", []string{"--truncate", "--drop-long"}, "exclude each other"},
		{"demo", []string{"--prompts", "0"}, "--prompts 0: must be an int >= 8"},
		{"demo", []string{"--draft-steps=-1"}, "--draft-steps -1: must be an int >= 1"},
		{"demo", []string{"--target-steps=-3"}, "--target-steps -3: must be an int >= 1"},
		{"demo", []string{"--quick", "--target-steps", "0"}, "--target-steps 0: must be an int >= 1"},
		{"demo", []string{"--workers=-1"}, "--workers -1: must be an int >= 0"},
		{"demo", []string{"--progress", "fancy"}, "--progress fancy: must be one of auto, bar, lines, off"},
	}
	for _, c := range cases {
		t.Run(c.cmd+strings.Join(c.args, ""), func(t *testing.T) {
			err := parse[c.cmd](c.args)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Fatalf("%s holds %s", dir, ents[0].Name())
			}
		})
	}
	// The older spelling --thinking still sets the option.
	o, files, err := parsePrep(append(prep, "--thinking=false", "more.jsonl"))
	if err != nil || o.EnableThinking || len(files) != 2 {
		t.Fatalf("--thinking=false: %+v %v %v", o, files, err)
	}
}

// TestHelpShowsRanges: --help of every command and subcommand goes to stdout with
// exit status 0, and every numeric flag it lists shows its range.
func TestHelpShowsRanges(t *testing.T) {
	help := func(args ...string) string {
		cmd := dflashCommand(t, append(args, "--help")...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if code := exitCode(t, cmd); code != 0 || stderr.Len() > 0 || stdout.Len() == 0 {
			t.Fatalf("%v --help: exit %d, stdout %d bytes, stderr %q", args, code, stdout.Len(), stderr.String())
		}
		return stdout.String()
	}
	flagLine := regexp.MustCompile(`^  -(\S+) (int|uint|float|duration|ints|floats)$`)
	ranged := regexp.MustCompile(`\((int|uint|float|duration|ints|floats) (>=|>|<=|<|in) `)
	var checked []string
	for _, name := range slices.Sorted(maps.Keys(commands)) {
		paths := [][]string{{name}}
		if top := help(name); strings.Contains(top, "Subcommands:") {
			paths = nil
			for _, l := range strings.Split(top[strings.Index(top, "Subcommands:"):], "\n")[1:] {
				if f := strings.Fields(l); len(f) > 0 {
					paths = append(paths, []string{name, f[0]})
				}
			}
		}
		for _, p := range paths {
			lines := strings.Split(help(p...), "\n")
			for i, l := range lines {
				if m := flagLine.FindStringSubmatch(l); m != nil && (i+1 == len(lines) || !ranged.MatchString(lines[i+1])) {
					t.Errorf("dflash %s --help: -%s, a number, shows no range", strings.Join(p, " "), m[1])
				}
			}
			checked = append(checked, strings.Join(p, " "))
		}
	}
	for _, want := range []string{"bench attention", "bench step", "data prep", "data show", "data stats", "demo", "nccl check", "spec", "train"} {
		if !slices.Contains(checked, want) {
			t.Errorf("dflash %s --help was not checked (checked: %q)", want, checked)
		}
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"spec"}, []string{"-temperature float", "(0: greedy) (float >= 0)", "(int >= 1) (default 256)", "-top-k int"}},
		{[]string{"data", "prep"}, []string{"-shard-tokens int", "(int >= 0)", "-block-size int", "(int >= 1) (default 16)"}},
		{[]string{"demo"}, []string{"-prompts int", "(int >= 8) (default 224)", "-draft-steps int", "unless those flags are given"}},
		{[]string{"data", "stats"}, []string{"-edge int", "(int >= 1) (default 128)"}},
	} {
		out := help(c.args...)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Fatalf("%v lacks %q:\n%s", c.args, w, out)
			}
		}
	}
}

// TestDemoQuickKeepsExplicitValues: --quick chooses the small sizes, but a flag the
// user gives wins over them.
func TestDemoQuickKeepsExplicitValues(t *testing.T) {
	def := demo.Defaults()
	d, _, err := parseDemo([]string{"--quick"})
	if err != nil || d.TargetSteps != 30 || d.DraftSteps != 30 || d.Prompts != 24 || d.Vocab != 512 {
		t.Fatalf("--quick: %+v %v", d, err)
	}
	d, _, err = parseDemo([]string{"--quick", "--prompts", "40", "--draft-steps", "7", "--seed", "9"})
	if err != nil || d.Prompts != 40 || d.DraftSteps != 7 || d.TargetSteps != 30 || d.Seed != 9 || d.Vocab != 512 {
		t.Fatalf("--quick with explicit values: %+v %v", d, err)
	}
	d, _, err = parseDemo([]string{"--target-steps", "5"})
	if err != nil || d.TargetSteps != 5 || d.DraftSteps != def.DraftSteps || d.Prompts != def.Prompts || d.Vocab != def.Vocab {
		t.Fatalf("--target-steps 5: %+v %v", d, err)
	}
	// --device cuda starts from the GPU sizes; a flag given still wins.
	gpu := demo.GPUDefaults()
	d, _, err = parseDemo([]string{"--device", "cuda", "--gpu", "1", "--prompts", "100", "--corpus", "src"})
	if err != nil || d.Device != "cuda" || d.GPU != 1 || d.Prompts != 100 || d.TargetSteps != gpu.TargetSteps || d.TargetHeadDim != gpu.TargetHeadDim ||
		d.GenBatch != gpu.GenBatch || d.CorpusDir != "src" {
		t.Fatalf("--device cuda --gpu 1 --prompts 100: %+v %v", d, err)
	}
	d, _, err = parseDemo([]string{"--device", "cuda", "--quick"})
	if err != nil || d.Device != "cuda" || d.TargetSteps != 30 || d.TargetHeadDim != gpu.TargetHeadDim || d.TargetHidden%d.TargetHeadDim != 0 {
		t.Fatalf("--device cuda --quick: %+v %v", d, err)
	}
}

// TestBadValueExits: a value that once reached a panic (spec --temperature NaN) or
// was accepted is one line on stderr and exit status 2 (a usage error), from the
// real process.
func TestBadValueExits(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"spec", "--target", "t", "--drafter", "d", "--prompts", "p", "--temperature", "NaN"},
			"dflash spec: invalid value \"NaN\" for flag -temperature: \"NaN\" is not a finite number: must be a finite float >= 0 (see dflash spec --help)\n"},
		{[]string{"data", "prep", "--tokenizer", "t", "--data", "p", "--out", "o", "--shard-tokens=-5"},
			"dflash data prep: --shard-tokens -5: must be an int >= 0\n"},
		{[]string{"demo", "--draft-steps=-1"}, "dflash demo: --draft-steps -1: must be an int >= 1\n"},
		{[]string{"data", "stats", "--edge", "-1", "dir"}, "dflash data stats: --edge -1: must be an int >= 1\n"},
		{[]string{"data", "show", "--tokenizer", "t", "-n", "-5", "dir"}, "dflash data show: --n -5: must be an int >= 1\n"},
		{[]string{"bench", "step", "--seq-len", "x"},
			"dflash bench step: invalid value \"x\" for flag -seq-len: \"x\" is not an integer: must be an int >= 2 (see dflash bench step --help)\n"},
		{[]string{"bench", "attention", "--reps=-3"}, "dflash bench attention: --reps -3: must be an int >= 0\n"},
		{[]string{"nccl", "check", "--timeout", "0s"}, "dflash nccl check: --timeout 0s: must be a duration > 0\n"},
	} {
		cmd := dflashCommand(t, c.args...)
		cmd.Dir = t.TempDir()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if code := exitCode(t, cmd); code != 2 || stderr.String() != c.want {
			t.Fatalf("%v: exit %d, stderr %q; want 2, %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// TestDataPrepSignals: data prep stopped by SIGINT or SIGTERM exits 128+signal with
// a message naming the signal, and leaves neither the output nor a partial directory.
func TestDataPrepSignals(t *testing.T) {
	targetDir, dataPath := recipetest.Fixture(t)
	// An input large enough that prep is still reading when the signal comes.
	one := readFile(t, dataPath)
	big := filepath.Join(t.TempDir(), "big.jsonl")
	if err := os.WriteFile(big, []byte(strings.Repeat(one, max(1, (20<<20)/len(one)))), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sig  syscall.Signal
		name string
		code int
	}{{syscall.SIGTERM, "SIGTERM", 143}, {syscall.SIGINT, "SIGINT", 130}} {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			out := filepath.Join(parent, "data")
			cmd := dflashCommand(t, "data", "prep", "--tokenizer", targetDir, "--data", big, "--out", out, "--workers", "1")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// The partial directory appears once Prep runs, after the handler is installed.
			deadline := time.Now().Add(time.Minute)
			for !hasPartial(parent) {
				if time.Now().After(deadline) {
					t.Fatal("no partial directory after a minute")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			code := exitCode(t, cmd)
			want := "dflash data prep: interrupted by " + c.name + ": nothing written (" + out + " is as it was before)\n"
			if code != c.code || !strings.HasSuffix(stderr.String(), want) {
				t.Fatalf("exit %d, stderr %q; want %d, %q", code, stderr.String(), c.code, want)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) || hasPartial(parent) {
				t.Fatalf("output or partial directory left behind (%v)", err)
			}
		})
	}
}

func hasPartial(dir string) bool {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".partial-") {
			return true
		}
	}
	return false
}
