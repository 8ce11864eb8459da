package dflash

import (
	"path/filepath"
	"strings"
	"testing"

	"dflash/internal/testseed"
	"dflash/safetensors"
)

// TestLoadDirRefusesIntegerTensors: a drafter tensor stored with an integer dtype is
// an error naming the tensor and the file (it was converted by value, silently).
func TestLoadDirRefusesIntegerTensors(t *testing.T) {
	seed := testseed.Seed(t)
	d, _, _, _ := randomSetup[float32](t, seed)
	for _, name := range []string{"fc.weight", d.Params()[len(d.Params())-1].Name} {
		dir := filepath.Join(t.TempDir(), "drafter")
		if err := d.WriteDir(dir, "F32"); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, safetensors.SingleFile)
		var ts []safetensors.Tensor
		for _, p := range d.Params() {
			tn := safetensors.Tensor{Name: p.Name, Shape: p.Shape, Data: p.Data()}
			if p.Name == name { // the same number of bytes, labelled I32
				tn = safetensors.Tensor{Name: p.Name, Shape: p.Shape, DType: "I32", Raw: make([]byte, 4*len(p.Data()))}
			}
			ts = append(ts, tn)
		}
		if err := safetensors.Write(path, ts, nil); err != nil {
			t.Fatal(err)
		}
		_, err := LoadDir[float32](dir)
		if want := path + `: tensor "` + name + `" has dtype I32; a float weight is expected`; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("err %v, want %q", err, want)
		}
	}
}
