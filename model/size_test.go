package model

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestParamCount checks ParamCount against the parameters build allocates,
// for every optional part (tied head, biases, QK-norm).
func TestParamCount(t *testing.T) {
	for _, c := range partConfigs() {
		m, err := New(c, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := c.ParamCount(), float64(m.NumParams()); got != want {
			t.Errorf("%s tied=%v bias=%v/%v: ParamCount %g, model has %g", c.Arch, c.TieWordEmbeddings, c.AttentionBias, c.MLPBias, got, want)
		}
	}
}

// TestAbsurdSizes checks that a config.json whose weights cannot fit is
// refused before anything is allocated, with the bytes needed and the
// memory available (here a fixed 8 GiB, so the test does not depend on the
// host).
func TestAbsurdSizes(t *testing.T) {
	saved := availableMemory
	availableMemory = func() (uint64, bool) { return 8 << 30, true }
	defer func() { availableMemory = saved }()
	unknown := tinyConfig(Qwen3, false)
	unknown.VocabSize = 1_000_000_000_000_000
	availableMemory = func() (uint64, bool) { return 0, false } // no /proc/meminfo
	if err := unknown.Validate(); err == nil || !strings.Contains(err.Error(), "6.4e+16 parameters (227.4 PiB as float32) cannot be allocated") {
		t.Fatalf("without MemAvailable: %v", err)
	}
	availableMemory = func() (uint64, bool) { return 8 << 30, true }
	base := tinyConfig(Qwen3, false)
	m, err := New(base, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, field string
		value       int
		want        string
	}{
		{"vocabulary 10^12", "vocab_size", 1_000_000_000_000, "the weights need 232.8 TiB as float32 (6.4e+13 parameters), more than the 8.0 GiB available"},
		{"hidden 10^7", "hidden_size", 10_000_000, "more than the 8.0 GiB available"},
		{"width 3x10^6 fits", "intermediate_size", 3_000_000, ""}, // 2.3 GB: no error
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := m.Save(dir, "F32"); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "config.json")
			raw, _ := os.ReadFile(path)
			old := map[string]int{"vocab_size": base.VocabSize, "hidden_size": base.HiddenSize, "intermediate_size": base.IntermediateSize}[c.field]
			edited := strings.Replace(string(raw), `"`+c.field+`": `+strconv.Itoa(old), `"`+c.field+`": `+strconv.Itoa(c.value), 1)
			if edited == string(raw) {
				t.Fatalf("%s not found in config.json", c.field)
			}
			os.WriteFile(path, []byte(edited), 0o644)
			cfg, err := ReadConfig(path)
			if err != nil {
				t.Fatal(err)
			}
			err = checkMemory(cfg)
			if c.want == "" {
				if err != nil {
					t.Fatalf("a config that fits refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("checkMemory: %v, want %q", err, c.want)
			}
			if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Load: %v, want %q naming %s", err, c.want, path)
			}
		})
	}
}

// TestSizesBeyondInt64 checks that a config.json whose shapes multiply past
// any allocation (here past int64: hidden_size 4e9 by a 4e9 head_dim) is
// refused when read, naming the fields, whatever memory the host has.
func TestSizesBeyondInt64(t *testing.T) {
	c := tinyConfig(Qwen3, false)
	m, err := New(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := m.Save(dir, "F32"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.json")
	raw, _ := os.ReadFile(path)
	edited := strings.Replace(string(raw), `"hidden_size": `+strconv.Itoa(c.HiddenSize), `"hidden_size": 4000000000`, 1)
	edited = strings.Replace(edited, `"head_dim": `+strconv.Itoa(c.HeadDim), `"head_dim": 4e9`, 1)
	if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = ReadConfig(path)
	for _, want := range []string{path, "hidden_size 4000000000", "head_dim 4000000000", "parameters", "cannot be allocated (at most 2^46)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadConfig: %v, want %q", err, want)
		}
	}
}
