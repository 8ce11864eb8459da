package train

import (
	"flag"
	"strings"
	"testing"
	"time"
)

// bound returns the defaults bound to a fresh flag set.
func bound(t *testing.T) (*Config, *flag.FlagSet, *Options) {
	t.Helper()
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.SetOutput(&strings.Builder{})
	return &cfg, fs, BindOptions(fs, &cfg)
}

func TestDecodeYAML(t *testing.T) {
	t.Run("values-and-defaults", func(t *testing.T) {
		cfg, _, o := bound(t)
		yaml := "steps: 300\nlr: 1.0e-3\nresume: true\n# a comment\nseed: 7\nmin-lr-ratio: 0.5\n"
		if err := o.DecodeYAML("ok.yaml", []byte(yaml)); err != nil {
			t.Fatal(err)
		}
		if cfg.Steps != 300 || cfg.LR != 1e-3 || !cfg.Resume || cfg.Seed != 7 || cfg.MinLRRatio != 0.5 {
			t.Fatalf("cfg %+v", cfg)
		}
		if d := DefaultConfig(); cfg.WarmupSteps != d.WarmupSteps || cfg.Beta2 != d.Beta2 {
			t.Fatal("absent keys lost their defaults")
		}
		if !o.Given("steps") || o.Given("beta2") || o.Source("steps") != "ok.yaml line 1: steps" {
			t.Fatalf("sources: steps %v %q, beta2 %v", o.Given("steps"), o.Source("steps"), o.Given("beta2"))
		}
	})
	errCases := []struct {
		name, body string
		want       []string
	}{
		{"unknown-key", "steps: 3\nlearning-rate: 0.1\n", []string{"bad.yaml line 2", "learning-rate", "unknown option"}},
		{"old-spelling", "warmup_steps: 3\n", []string{"line 1", "warmup_steps", "did you mean warmup-steps"}},
		{"wrong-type", "steps: many\n", []string{"bad.yaml line 1: steps", `"many" is not an integer`}},
		{"fraction-for-int", "lr: 0.1\nsave-every: 2.5\n", []string{"bad.yaml line 2: save-every", `"2.5" is not an integer`}},
		{"negative-uint", "seed: -1\n", []string{"line 1: seed", "not a non-negative integer"}},
		{"not-finite", "lr: Inf\n", []string{"line 1: lr", "not a finite number"}},
		{"too-large", "lr: 1e400\n", []string{"line 1: lr", "1e400 is out of range"}},
		{"null", "steps:\n", []string{"line 1: steps", "needs a value"}},
		{"list-for-scalar", "steps: [1, 2]\n", []string{"line 1: steps", "not a list"}},
		{"twice", "steps: 3\nlr: 0.1\nsteps: 4\n", []string{"line 3: steps", "given twice (first on line 1)"}},
		{"two-documents", "steps: 3\n---\nsteps: 4\n", []string{"bad.yaml", "more than one"}},
		{"not-a-mapping", "- steps\n", []string{"bad.yaml line 1", "mapping"}},
		{"two-errors", "steps: x\nlr: y\n", []string{"line 1: steps", "line 2: lr"}},
	}
	for _, c := range errCases {
		t.Run(c.name, func(t *testing.T) {
			_, _, o := bound(t)
			err := o.DecodeYAML("bad.yaml", []byte(c.body))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q lacks %q", err, w)
				}
			}
		})
	}
	t.Run("empty-file", func(t *testing.T) {
		cfg, _, o := bound(t)
		for _, body := range []string{"", "# only a comment\n", "~\n"} {
			if err := o.DecodeYAML("empty.yaml", []byte(body)); err != nil || *cfg != DefaultConfig() {
				t.Fatalf("%q: err %v, cfg changed %v", body, err, *cfg != DefaultConfig())
			}
		}
	})
}

// TestValidateRanges checks values just inside and just outside each range, from
// the flag and from the file, and that the error names the option as given.
func TestValidateRanges(t *testing.T) {
	cases := []struct {
		name, bad, good, why string
	}{
		{"steps", "0", "1", "an int >= 1"},
		{"lr", "0", "1e-9", "a finite float > 0"},
		{"min-lr-ratio", "1.0001", "1", "in [0, 1]"},
		{"min-lr-ratio", "-0.1", "0", "in [0, 1]"},
		{"warmup-steps", "-1", "0", ">= 0"},
		{"beta1", "1", "0.999", "in [0, 1)"},
		{"beta2", "-0.5", "0", "in [0, 1)"},
		{"eps", "-1e-8", "1e-12", "> 0"},
		{"grad-clip", "-1", "0", ">= 0"},
		{"grad-accum", "0", "1", ">= 1"},
		{"eval-every", "-5", "0", ">= 0"},
		{"save-every", "-1", "0", ">= 0"},
		{"keep-checkpoints", "-2", "0", ">= 0"},
		{"stop-at", "-1", "3", ">= 0"},
		{"log-every", "-1", "10", ">= 0"},
		{"progress", "fancy", "lines", "one of auto, bar, lines, off"},
	}
	for _, c := range cases {
		t.Run(c.name+"="+c.bad, func(t *testing.T) {
			_, fs, o := bound(t)
			if err := fs.Parse([]string{"--" + c.name + "=" + c.bad}); err != nil {
				t.Fatal(err)
			}
			o.Apply()
			err := o.Validate()
			want := "--" + c.name + " " + c.bad + ": must be "
			if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("flag: err %v, want prefix %q and %q", err, want, c.why)
			}
			_, _, o = bound(t)
			if err := o.DecodeYAML("c.yaml", []byte("seed: 3\n"+c.name+": "+c.bad+"\n")); err != nil {
				t.Fatal(err)
			}
			err = o.Validate()
			if want := "c.yaml line 2: " + c.name + " " + c.bad + ": must be "; err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("yaml: err %v, want prefix %q", err, want)
			}
			_, fs, o = bound(t)
			if err := fs.Parse([]string{"--" + c.name, c.good}); err != nil {
				t.Fatal(err)
			}
			o.Apply()
			if err := o.Validate(); err != nil {
				t.Fatalf("%s %s rejected: %v", c.name, c.good, err)
			}
		})
	}
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	cfg.GradAccum = 0
	if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), "config: grad-accum = 0: must be") {
		t.Fatalf("Config.Validate: %v", err)
	}
}

// TestRange compares parsed ranges with the inequalities they spell.
func TestRange(t *testing.T) {
	cases := []struct {
		spec, text string
		in         func(x float64) bool
	}{
		{">=1", ">= 1", func(x float64) bool { return x >= 1 }},
		{">0", "> 0", func(x float64) bool { return x > 0 }},
		{"<=2.5", "<= 2.5", func(x float64) bool { return x <= 2.5 }},
		{"<-1", "< -1", func(x float64) bool { return x < -1 }},
		{"[0,1)", "in [0, 1)", func(x float64) bool { return x >= 0 && x < 1 }},
		{"(0,1]", "in (0, 1]", func(x float64) bool { return x > 0 && x <= 1 }},
		{"[-1, 1]", "in [-1, 1]", func(x float64) bool { return x >= -1 && x <= 1 }},
	}
	probes := []float64{-3, -1.0000001, -1, -0.5, 0, 1e-300, 0.5, 0.9999999, 1, 1.0000001, 2.5, 3}
	for _, c := range cases {
		r, err := parseRange(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		if r.String() != c.text {
			t.Errorf("%s prints as %q, want %q", c.spec, r, c.text)
		}
		for _, x := range probes {
			if r.contains(x) != c.in(x) {
				t.Errorf("%s contains %g: %v", c.spec, x, r.contains(x))
			}
		}
	}
	for _, bad := range []string{"", "1", ">=x", "[0;1)", "[0,1"} {
		if _, err := parseRange(bad); err == nil {
			t.Errorf("range %q accepted", bad)
		}
	}
}

// TestHelpShowsTypeAndDefault: --help names each flag's type, range and default.
func TestHelpShowsTypeAndDefault(t *testing.T) {
	_, fs, _ := bound(t)
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	help := b.String()
	for _, want := range []string{
		"-steps int\n", "optimizer steps in the whole run (int >= 1) (default 1000)",
		"-beta2 float\n", "(float in [0, 1)) (default 0.95)",
		"-progress string\n", "(string: one of auto, bar, lines, off) (default auto)",
		"-seed uint\n", "-plot\n", "(default true)",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, " value\n") {
		t.Errorf("a flag still shows the type as value:\n%s", help)
	}
}

// outer is a caller's configuration embedding the trainer's.
type outer struct {
	Train  Config        `yaml:"train"`
	Model  string        `yaml:"model-dir" help:"target model"`
	Taps   []int         `yaml:"taps" range:">=0"`
	Budget time.Duration `yaml:"budget" range:">=0"`
	Inline struct {
		BlockSize int `yaml:"block-size" range:">=2"`
	} `yaml:",inline"`
}

// TestFlagsOverrideFile: defaults < YAML file < flags the user set; flags not given do
// not clobber the file's values.
func TestFlagsOverrideFile(t *testing.T) {
	var o outer
	o.Train = DefaultConfig()
	o.Model, o.Taps, o.Inline.BlockSize = "default-model", []int{1, 2}, 16
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.SetOutput(&strings.Builder{})
	b := BindOptions(fs, &o)
	for _, name := range []string{"train.steps", "train.min-lr-ratio", "train.resume", "model-dir", "taps", "budget", "block-size"} {
		if fs.Lookup(name) == nil {
			t.Fatalf("flag %s not registered", name)
		}
	}
	if got := fs.Lookup("train.steps").DefValue; got != "1000" {
		t.Errorf("default shown as %q", got)
	}
	if err := fs.Parse([]string{"-train.lr=0.5", "-train.resume", "-taps", "3,5,7", "-budget=90s", "-block-size", "8"}); err != nil {
		t.Fatal(err)
	}
	yaml := "train:\n  steps: 77\n  lr: 0.1\nmodel-dir: from-file\nblock-size: 10\ntrain.warmup-steps: 9\ntaps: [4, 5]\n"
	if err := b.DecodeYAML("cfg.yaml", []byte(yaml)); err != nil {
		t.Fatal(err)
	}
	b.Apply()
	switch {
	case o.Train.Steps != 77: // file, no flag
		t.Errorf("steps %d", o.Train.Steps)
	case o.Train.WarmupSteps != 9: // dotted key
		t.Errorf("warmup %d", o.Train.WarmupSteps)
	case o.Train.LR != 0.5: // flag beats file
		t.Errorf("lr %g", o.Train.LR)
	case !o.Train.Resume:
		t.Error("bare bool flag not applied")
	case o.Model != "from-file":
		t.Errorf("model %q", o.Model)
	case len(o.Taps) != 3 || o.Taps[2] != 7:
		t.Errorf("taps %v", o.Taps)
	case o.Budget != 90*time.Second:
		t.Errorf("budget %v", o.Budget)
	case o.Inline.BlockSize != 8:
		t.Errorf("block size %d", o.Inline.BlockSize)
	case o.Train.Beta1 != 0.9:
		t.Errorf("untouched default changed: %g", o.Train.Beta1)
	}
	// A range applies to each element of a list, from the file too.
	if err := b.DecodeYAML("cfg.yaml", []byte("taps: [4, -5]\n")); err != nil {
		t.Fatal(err)
	}
	b.fs = flag.NewFlagSet("none", flag.ContinueOnError) // no flags given: the file's taps stay
	if err := b.Validate(); err == nil || !strings.Contains(err.Error(), "cfg.yaml line 1: taps 4,-5: must be a comma-separated list of ints, each >= 0") {
		t.Errorf("list range: %v", err)
	}
	// A bad flag value is an error naming the flag.
	_, fs2, _ := bound(t)
	if err := fs2.Parse([]string{"-steps=2.5"}); err == nil || !strings.Contains(err.Error(), "-steps") || !strings.Contains(err.Error(), "not an integer") {
		t.Errorf("bad value: %v", err)
	}
	// An unknown config key in the nested struct names the key too.
	if err := b.DecodeYAML("cfg.yaml", []byte("train:\n  stepz: 3\n")); err == nil || !strings.Contains(err.Error(), "train.stepz") || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("nested unknown key: %v", err)
	}
	if err := b.DecodeYAML("cfg.yaml", []byte("train: 3\n")); err == nil || !strings.Contains(err.Error(), "group of options") {
		t.Errorf("group given a scalar: %v", err)
	}
}

func TestBindRefusesUncheckedNumbers(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "n has no range tag") {
			t.Fatalf("recovered %v", r)
		}
	}()
	var c struct {
		N int `yaml:"n"`
	}
	BindOptions(nil, &c)
}
