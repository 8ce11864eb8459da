package model

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"dflash/dtype"
	"dflash/safetensors"
	"dflash/tensor"
)

// loadSerial is the reference load: every weight read whole, one after
// another, with Dir.Weight (File.Float32Into's conversion) into a host
// arena, as LoadOn read them before its reads went parallel.
func loadSerial(t testing.TB, dir string) *Model {
	t.Helper()
	c, err := ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := build(c)
	if err != nil {
		t.Fatal(err)
	}
	w := openWeights(t, dir)
	for _, p := range m.Params() {
		if err := w.Weight(p.Name, p.Shape, p.Data()); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// openWeights opens the safetensors files of dir until t ends.
func openWeights(t testing.TB, dir string) *safetensors.Dir {
	t.Helper()
	w, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// saveSharded writes m as an HF directory of shards shards of dtype dt
// (parameters dealt round the shards in HF order) with an index.
func saveSharded(t testing.TB, m *Model, dir, dt string, shards int) {
	t.Helper()
	if err := m.Save(dir, dt); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, safetensors.SingleFile)); err != nil {
		t.Fatal(err)
	}
	parts := make([][]safetensors.Tensor, shards)
	wm := map[string]string{}
	for i, p := range m.Params() {
		parts[i%shards] = append(parts[i%shards], safetensors.Tensor{Name: p.Name, Shape: p.Shape, DType: dt, Data: p.Data()})
		wm[p.Name] = fmt.Sprintf("model-%05d-of-%05d.safetensors", i%shards+1, shards)
	}
	for s, ts := range parts {
		if err := safetensors.Write(filepath.Join(dir, fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)), ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
	}
	idx, _ := json.Marshal(map[string]any{"weight_map": wm})
	if err := os.WriteFile(filepath.Join(dir, safetensors.IndexFile), idx, 0o644); err != nil {
		t.Fatal(err)
	}
}

// loadFixtures are model directories of every dtype and layout: the
// checked-in bf16 (single and sharded) and f16 targets, and f32, f64 and
// bf16 sharded ones written here from a perturbed model (untied, with
// biases for Llama).
func loadFixtures(t *testing.T) map[string]string {
	dirs := map[string]string{
		"bf16":         filepath.Join("testdata", "qwen3-tiny"),
		"bf16-sharded": filepath.Join("testdata", "qwen3-tiny-sharded"),
		"f16":          filepath.Join("testdata", "llama-tiny"),
	}
	llama := tinyConfig(Llama, false)
	llama.AttentionBias, llama.MLPBias = true, true
	for _, c := range []struct {
		name, dt string
		cfg      Config
	}{{"f32-sharded", "F32", tinyConfig(Qwen3, false)}, {"bf16-sharded-untied", "BF16", llama}} {
		dir := t.TempDir()
		saveSharded(t, perturbed(t, c.cfg, 3, 4), dir, c.dt, 3)
		dirs[c.name] = dir
	}
	return dirs
}

// TestLoadParallelMatchesSerial: a model loaded by LoadWith (one reader or
// several, whole weights or pieces down to one element, out of HF order)
// holds the weights the serial reference reads, bit for bit, and reports
// every byte of them read.
func TestLoadParallelMatchesSerial(t *testing.T) {
	for name, dir := range loadFixtures(t) {
		t.Run(name, func(t *testing.T) {
			want := loadSerial(t, dir)
			var bytes int64
			w := openWeights(t, dir)
			for _, p := range want.Params() {
				info, _ := w.Info(p.Name)
				dt, _ := dtype.FromSafetensors(info.DType)
				bytes += int64(info.Numel() * dt.Size())
			}
			for _, o := range []LoadOptions{{Readers: 1}, {}, {Readers: 8, Piece: 30}, {Readers: 3, Piece: 1}} {
				got, st, err := LoadWith(dir, nil, o)
				if err != nil {
					t.Fatal(err)
				}
				readers := cmp.Or(o.Readers, DefaultReaders())
				if st.Bytes != bytes || st.Readers != readers {
					t.Errorf("%+v: read %d bytes with %d readers, want %d with %d", o, st.Bytes, st.Readers, bytes, readers)
				}
				checkSameParams(t, fmt.Sprintf("%+v", o), got, want)
			}
		})
	}
}

// checkSameParams fails t unless got and want have the same parameters,
// bit for bit.
func checkSameParams(t *testing.T, what string, got, want *Model) {
	t.Helper()
	pg, pw := got.Params(), want.Params()
	if len(pg) != len(pw) || (got.LMHead == got.Embed) != (want.LMHead == want.Embed) {
		t.Fatalf("%s: %d parameters (tied %v), want %d (tied %v)", what, len(pg), got.LMHead == got.Embed, len(pw), want.LMHead == want.Embed)
	}
	for i := range pg {
		if pg[i].Name != pw[i].Name {
			t.Fatalf("%s: parameter %d is %s, want %s", what, i, pg[i].Name, pw[i].Name)
		}
		for j, v := range pg[i].Data() {
			if w := pw[i].Data()[j]; math.Float32bits(v) != math.Float32bits(w) {
				t.Fatalf("%s: %s[%d] = %v, the serial load reads %v", what, pg[i].Name, j, v, w)
			}
		}
	}
}

// TestLoadCorruptShard: a shard cut short or with a broken header is an
// error naming the file and (for the cut) a tensor past the cut; a shard
// truncated once open fails its reads, and the error names the file and
// the first tensor in file order that the cut reaches, however many
// readers hit the end.
func TestLoadCorruptShard(t *testing.T) {
	mk := func(t *testing.T) (string, string) {
		dir := t.TempDir()
		saveSharded(t, perturbed(t, tinyConfig(Qwen3, false), 3, 4), dir, "F32", 3)
		return dir, filepath.Join(dir, "model-00002-of-00003.safetensors")
	}
	// past returns the tensors of shard whose data end beyond size.
	past := func(t *testing.T, dir, shard string, size int64) (names []string, first string) {
		w := openWeights(t, dir)
		firstAt := int64(math.MaxInt64)
		for _, n := range w.Names() {
			f, _ := w.File(n)
			info, _ := w.Info(n)
			rw, err := w.RawWeight(n, info.Shape)
			if err != nil || f.Path() != shard || rw.Offset()+rw.Size() <= size {
				continue
			}
			names = append(names, n)
			if rw.Offset() < firstAt {
				firstAt, first = rw.Offset(), n
			}
		}
		return names, first
	}
	t.Run("cut", func(t *testing.T) {
		dir, shard := mk(t)
		st, _ := os.Stat(shard)
		cut := st.Size() * 2 / 3
		names, _ := past(t, dir, shard, cut)
		os.Truncate(shard, cut)
		_, err := LoadOn(dir, nil)
		if err == nil || !strings.Contains(err.Error(), shard) || !strings.Contains(err.Error(), "truncated file?") || !containsAny(err.Error(), names) {
			t.Fatalf("error %v, want one naming %s and one of %v", err, shard, names)
		}
	})
	t.Run("header", func(t *testing.T) {
		dir, shard := mk(t)
		f, _ := os.OpenFile(shard, os.O_WRONLY, 0)
		f.WriteAt([]byte("{\"broken"), 8)
		f.Close()
		if _, err := LoadOn(dir, nil); err == nil || !strings.Contains(err.Error(), shard) || !strings.Contains(err.Error(), "header") {
			t.Fatalf("error %v, want one naming %s and its header", err, shard)
		}
	})
	t.Run("truncated while open", func(t *testing.T) {
		dir, shard := mk(t)
		c := tinyConfig(Qwen3, false)
		m, err := declare(&c)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := planPieces(m, openWeights(t, dir), DefaultPiece) // a piece per weight: the readers fail on distinct tensors
		if err != nil {
			t.Fatal(err)
		}
		st, _ := os.Stat(shard)
		cut := st.Size()/2 + 1
		names, first := past(t, dir, shard, cut)
		if len(names) < 2 {
			t.Fatalf("the cut at %d reaches %v: want several tensors", cut, names)
		}
		if err := os.Truncate(shard, cut); err != nil {
			t.Fatal(err)
		}
		writes := 0
		_, err = readPieces(ps, 8, func(piece, []byte) { writes++ })
		want := shard + `: tensor "` + first + `": data ends early`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want %q", err, want)
		}
		if writes >= len(ps) {
			t.Errorf("%d of %d pieces written after a failed read", writes, len(ps))
		}
	})
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, `"`+x+`"`) {
			return true
		}
	}
	return false
}

// TestLoadOnBackendPieces: on a backend that places its parameters, a
// weight larger than a piece arrives in pieces (more writes than
// parameters) and the model computes what the serially loaded one does.
func TestLoadOnBackendPieces(t *testing.T) {
	dir := filepath.Join("testdata", "qwen3-tiny-sharded")
	want := loadSerial(t, dir)
	pc := &placingCPU{CPU: tensor.NewCPU[float32](1)}
	got, _, err := LoadWith(dir, pc, LoadOptions{Readers: 4, Piece: 256})
	if err != nil {
		t.Fatal(err)
	}
	if pc.writes <= len(got.Params()) || got.Arena().Values != nil {
		t.Fatalf("%d writes for %d parameters, master values %v: want pieces, frozen", pc.writes, len(got.Params()), got.Arena().Values != nil)
	}
	checkSameParams(t, "pieces", got, want)
}
