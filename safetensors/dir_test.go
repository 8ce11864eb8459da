package safetensors

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeSharded writes tensors into shards and an index that maps each to its shard.
func writeSharded(t *testing.T, dir string, shards map[string][]Tensor, extraIndex map[string]string) {
	t.Helper()
	wm := map[string]string{}
	for file, ts := range shards {
		if err := Write(filepath.Join(dir, file), ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		for _, tt := range ts {
			wm[tt.Name] = file
		}
	}
	for k, v := range extraIndex {
		wm[k] = v
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 123}, "weight_map": wm})
	if err := os.WriteFile(filepath.Join(dir, IndexFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestOpenDir(t *testing.T) {
	rng := newRNG(t)
	mk := func(name string, shape []int, dt string) Tensor {
		return Tensor{Name: name, Shape: shape, DType: dt, Data: randData(rng, Info{Shape: shape}.Numel())}
	}
	shardA := []Tensor{mk("model.embed_tokens.weight", []int{11, 4}, "BF16"), mk("model.norm.weight", []int{4}, "F32")}
	shardB := []Tensor{mk("lm_head.weight", []int{11, 4}, "F16")}
	all := append(append([]Tensor{}, shardA...), shardB...)

	t.Run("sharded", func(t *testing.T) {
		dir := t.TempDir()
		writeSharded(t, dir, map[string][]Tensor{
			"model-00001-of-00002.safetensors": shardA,
			"model-00002-of-00002.safetensors": shardB,
		}, nil)
		d, err := OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		want := []string{"lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"}
		if !reflect.DeepEqual(d.Names(), want) {
			t.Fatalf("names %v, want %v", d.Names(), want)
		}
		for _, tt := range all {
			info, ok := d.Info(tt.Name)
			if !ok || info.DType != tt.DType || !reflect.DeepEqual(info.Shape, tt.Shape) {
				t.Errorf("%s: info %+v", tt.Name, info)
			}
			got, err := d.Float32(tt.Name)
			if err != nil || sameBits(got, expected(tt)) >= 0 {
				t.Errorf("%s: values differ (%v)", tt.Name, err)
			}
		}
		if d.Metadata()["format"] != "pt" {
			t.Errorf("metadata %v", d.Metadata())
		}
		if _, err := d.Float32("nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("missing tensor: %v", err)
		}
	})
	t.Run("single", func(t *testing.T) {
		dir := t.TempDir()
		if err := Write(filepath.Join(dir, SingleFile), all, nil); err != nil {
			t.Fatal(err)
		}
		d, err := OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if len(d.Names()) != 3 {
			t.Fatalf("names %v", d.Names())
		}
		got, _ := d.Float32("lm_head.weight")
		if sameBits(got, expected(shardB[0])) >= 0 {
			t.Fatal("values differ")
		}
	})
	errCases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string
	}{
		{"empty-dir", func(t *testing.T, dir string) {}, []string{"no " + IndexFile + " and no " + SingleFile}},
		{"index-names-absent-tensor", func(t *testing.T, dir string) {
			writeSharded(t, dir, map[string][]Tensor{"s1.safetensors": shardA}, map[string]string{"ghost.weight": "s1.safetensors"})
		}, []string{"s1.safetensors", `tensor "ghost.weight"`, "absent from the shard"}},
		{"missing-shard", func(t *testing.T, dir string) {
			writeSharded(t, dir, map[string][]Tensor{"s1.safetensors": shardA}, map[string]string{"x": "s2.safetensors"})
		}, []string{"s2.safetensors", "shard listed in"}},
		{"corrupt-shard", func(t *testing.T, dir string) {
			writeSharded(t, dir, map[string][]Tensor{"s1.safetensors": shardA}, nil)
			os.WriteFile(filepath.Join(dir, "s1.safetensors"), []byte("garbage!garbage"), 0o644)
		}, []string{"s1.safetensors"}},
		{"escaping-shard-name", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"weight_map":{"a":"../x.safetensors"}}`), 0o644)
		}, []string{IndexFile, "plain name"}},
		{"bad-index-json", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"weight_map":`), 0o644)
		}, []string{IndexFile}},
		{"empty-weight-map", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"metadata":{}}`), 0o644)
		}, []string{IndexFile, "weight_map"}},
	}
	for _, c := range errCases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.setup(t, dir)
			d, err := OpenDir(dir)
			if err == nil {
				d.Close()
				t.Fatal("OpenDir succeeded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestWeight: Dir.Weight reads a float weight of the expected shape exactly
// as Float32 does, and refuses a missing tensor, another shape and an
// integer tensor, naming the tensor (and the file for the dtype).
func TestWeight(t *testing.T) {
	rng := newRNG(t)
	w := Tensor{Name: "w", Shape: []int{3, 5}, DType: "BF16", Data: randData(rng, 15)}
	raw := make([]byte, 4*6)
	n := Tensor{Name: "ids", Shape: []int{6}, DType: "I32", Raw: raw}
	dir := t.TempDir()
	if err := Write(filepath.Join(dir, SingleFile), []Tensor{w, n}, nil); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got := make([]float32, 15)
	if err := d.Weight("w", []int{3, 5}, got); err != nil || sameBits(got, expected(w)) >= 0 {
		t.Fatalf("Weight: %v, values %v want %v", err, got, expected(w))
	}
	for _, c := range []struct {
		name  string
		shape []int
		want  string
	}{
		{"absent", []int{1}, dir + `: tensor "absent" is missing`},
		{"w", []int{5, 3}, dir + `: tensor "w" has shape [3 5], config.json implies [5 3]`},
		{"ids", []int{6}, filepath.Join(dir, SingleFile) + `: tensor "ids" has dtype I32; a float weight is expected`},
	} {
		err := d.Weight(c.name, c.shape, make([]float32, 15))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("Weight(%q, %v): %v, want %q...", c.name, c.shape, err, c.want)
		}
	}
}
