package safetensors

import (
	"path/filepath"
	"strings"
	"testing"

	"dflash/dtype"
)

// TestWeightInto: the four float dtypes read as Float32Into reads them (values
// rounded through the dtype); every other dtype is refused, naming the tensor and
// the file, in a file and in a directory.
func TestWeightInto(t *testing.T) {
	rng := newRNG(t)
	for dt := dtype.F64; dt.Valid(); dt++ {
		t.Run(dt.Safetensors(), func(t *testing.T) {
			shape := []int{3, 5}
			raw := make([]byte, 15*dt.Size())
			for i := range raw {
				raw[i] = byte(rng.IntN(64)) // small bytes: no NaN in any float format
			}
			dir := t.TempDir()
			path := filepath.Join(dir, SingleFile)
			if err := Write(path, []Tensor{{Name: "w", Shape: shape, DType: dt.Safetensors(), Raw: raw}}, nil); err != nil {
				t.Fatal(err)
			}
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			d, err := OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			want := make([]float32, 15)
			dtype.DecodeFloat32(dt, want, raw) // the reference conversion
			isWeight := dt == dtype.F32 || dt == dtype.BF16 || dt == dtype.F16 || dt == dtype.F64
			dirWeight := func(name string, dst []float32) error { return d.Weight(name, shape, dst) }
			for _, read := range []func(string, []float32) error{f.WeightInto, dirWeight} {
				got := make([]float32, 15)
				err := read("w", got)
				if !isWeight {
					if err == nil || !strings.Contains(err.Error(), path+`: tensor "w" has dtype `+dt.Safetensors()+"; a float weight is expected") {
						t.Fatalf("err %v", err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("[%d] = %v, want %v", i, got[i], want[i])
					}
				}
			}
			if err := d.Weight("absent", shape, make([]float32, 15)); err == nil || !strings.Contains(err.Error(), `"absent"`) {
				t.Fatalf("absent tensor: %v", err)
			}
		})
	}
}
