package train

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadYAML(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	t.Run("values-and-defaults", func(t *testing.T) {
		cfg := DefaultConfig()
		p := write("ok.yaml", "steps: 300\nlr: 1.0e-3\nresume: true\n# a comment\nseed: 7\n")
		if err := LoadYAML(p, &cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.Steps != 300 || cfg.LR != 1e-3 || !cfg.Resume || cfg.Seed != 7 {
			t.Fatalf("cfg %+v", cfg)
		}
		if d := DefaultConfig(); cfg.WarmupSteps != d.WarmupSteps || cfg.Beta2 != d.Beta2 {
			t.Fatal("absent keys lost their defaults")
		}
	})
	errCases := []struct {
		name, body string
		want       []string
	}{
		{"unknown-key", "steps: 3\nlearning_rate: 0.1\n", []string{"bad.yaml", "line 2", "learning_rate"}},
		{"wrong-type", "steps: many\n", []string{"bad.yaml", "line 1", "many"}},
		{"two-documents", "steps: 3\n---\nsteps: 4\n", []string{"bad.yaml", "more than one"}},
	}
	for _, c := range errCases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			err := LoadYAML(write("bad.yaml", c.body), &cfg)
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
		cfg := DefaultConfig()
		if err := LoadYAML(write("empty.yaml", ""), &cfg); err != nil || cfg != DefaultConfig() {
			t.Fatalf("err %v, cfg changed %v", err, cfg != DefaultConfig())
		}
	})
}

func TestValidateNamesField(t *testing.T) {
	cases := []struct {
		field string
		edit  func(*Config)
	}{
		{"steps", func(c *Config) { c.Steps = 0 }},
		{"lr", func(c *Config) { c.LR = -1 }},
		{"min_lr_ratio", func(c *Config) { c.MinLRRatio = 2 }},
		{"beta2", func(c *Config) { c.Beta2 = 1 }},
		{"grad_accum", func(c *Config) { c.GradAccum = 0 }},
		{"progress", func(c *Config) { c.Progress = "fancy" }},
		{"out", func(c *Config) { c.Out = "" }},
	}
	for _, c := range cases {
		t.Run(c.field, func(t *testing.T) {
			cfg := DefaultConfig()
			c.edit(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.HasPrefix(err.Error(), "config: "+c.field+" = ") {
				t.Fatalf("err %v", err)
			}
		})
	}
	d := DefaultConfig()
	if err := d.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

// outer is a caller's configuration embedding the trainer's.
type outer struct {
	Train  Config        `yaml:"train"`
	Model  string        `yaml:"model_dir" help:"target model"`
	Taps   []int         `yaml:"taps"`
	Budget time.Duration `yaml:"budget"`
	Inline struct {
		BlockSize int `yaml:"block_size"`
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
	b := BindFlags(fs, &o)
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
	yaml := "train:\n  steps: 77\n  lr: 0.1\nmodel_dir: from-file\nblock_size: 10\n"
	if err := DecodeYAML("cfg.yaml", []byte(yaml), &o); err != nil {
		t.Fatal(err)
	}
	b.Apply()
	switch {
	case o.Train.Steps != 77: // file, no flag
		t.Errorf("steps %d", o.Train.Steps)
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
	// A bad flag value is an error naming the flag.
	fs2 := flag.NewFlagSet("x", flag.ContinueOnError)
	fs2.SetOutput(&strings.Builder{})
	c := DefaultConfig()
	BindFlags(fs2, &c)
	if err := fs2.Parse([]string{"-steps=lots"}); err == nil || !strings.Contains(err.Error(), "-steps") {
		t.Errorf("bad value: %v", err)
	}
	// An unknown config key in the nested struct names the key too.
	if err := DecodeYAML("cfg.yaml", []byte("train:\n  stepz: 3\n"), &o); err == nil || !strings.Contains(err.Error(), "stepz") || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("nested unknown key: %v", err)
	}
}
