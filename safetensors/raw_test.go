package safetensors

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"dflash/dtype"
)

// TestRawWeight: RawWeight checks a weight as Weight does (the same errors
// for a missing tensor, another shape and an integer dtype); its pieces,
// read by several goroutines at once, put together are the tensor's bytes
// (Bytes), and in a sharded directory each weight names its own shard; a
// range outside the weight and a shard truncated after opening are errors
// naming the file and the tensor.
func TestRawWeight(t *testing.T) {
	rng := newRNG(t)
	mk := func(name string, shape []int, dt string) Tensor {
		return Tensor{Name: name, Shape: shape, DType: dt, Data: randData(rng, Info{Shape: shape}.Numel())}
	}
	dir := t.TempDir()
	a := []Tensor{mk("embed", []int{37, 9}, "BF16"), mk("norm", []int{9}, "F32"), {Name: "ids", Shape: []int{6}, DType: "I32", Raw: make([]byte, 24)}}
	b := []Tensor{mk("head", []int{37, 9}, "F16"), mk("proj", []int{5, 9}, "F64")}
	writeSharded(t, dir, map[string][]Tensor{"a.safetensors": a, "b.safetensors": b}, nil)
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, c := range []struct {
		ts   Tensor
		file string
	}{{a[0], "a.safetensors"}, {a[1], "a.safetensors"}, {b[0], "b.safetensors"}, {b[1], "b.safetensors"}} {
		w, err := d.RawWeight(c.ts.Name, c.ts.Shape)
		if err != nil {
			t.Fatal(err)
		}
		want, err := d.Bytes(c.ts.Name)
		if err != nil {
			t.Fatal(err)
		}
		dt, _ := dtype.FromSafetensors(c.ts.DType)
		if w.DType != dt || w.File() != filepath.Join(dir, c.file) || w.Size() != int64(len(want)) {
			t.Fatalf("%s: dtype %v file %s size %d, want %v %s %d", c.ts.Name, w.DType, w.File(), w.Size(), dt, c.file, len(want))
		}
		got := make([]byte, w.Size())
		const piece = 7 // not a multiple of any element size: pieces are bytes
		var wg sync.WaitGroup
		errs := make([]error, (len(got)+piece-1)/piece)
		for i := range errs {
			wg.Go(func() {
				lo := i * piece
				errs[i] = w.ReadAt(got[lo:min(len(got), lo+piece)], int64(lo))
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: the pieces read differ from the tensor's bytes", c.ts.Name)
		}
		if err := w.ReadAt(make([]byte, 2), w.Size()-1); err == nil || !strings.Contains(err.Error(), w.File()+`: tensor "`+c.ts.Name+`": bytes [`) {
			t.Errorf("%s: a read past the end: %v", c.ts.Name, err)
		}
	}
	for _, c := range []struct {
		name  string
		shape []int
		want  string
	}{
		{"absent", []int{1}, dir + `: tensor "absent" is missing`},
		{"embed", []int{9, 37}, dir + `: tensor "embed" has shape [37 9], config.json implies [9 37]`},
		{"ids", []int{6}, filepath.Join(dir, "a.safetensors") + `: tensor "ids" has dtype I32; a float weight is expected`},
	} {
		_, err := d.RawWeight(c.name, c.shape)
		werr := d.Weight(c.name, c.shape, make([]float32, 400))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || werr == nil || werr.Error() != err.Error() {
			t.Errorf("RawWeight(%q, %v): %v, want %q... as Weight says (%v)", c.name, c.shape, err, c.want, werr)
		}
	}
	// Truncated while open: shard b is cut in the middle of proj.
	w, err := d.RawWeight("proj", []int{5, 9})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(w.File(), w.Offset()+w.Size()/2); err != nil {
		t.Fatal(err)
	}
	err = w.ReadAt(make([]byte, w.Size()), 0)
	if err == nil || !strings.Contains(err.Error(), w.File()+`: tensor "proj": data ends early`) {
		t.Fatalf("a truncated shard: %v", err)
	}
}
