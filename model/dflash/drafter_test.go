package dflash

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"dflash/dtype"
	"dflash/internal/testseed"
	"dflash/safetensors"
	"dflash/tensor"
)

// randomSetup builds a random drafter, head and batch for testConfig.
func randomSetup[T tensor.Float](t *testing.T, seed uint64) (*Drafter[T], Head[T], *Batch, *Blocks) {
	t.Helper()
	return randomDrafter[T](rand.New(rand.NewPCG(seed, 4)), 21, []int{21, 17, 12}, 5)
}

// randomDrafter draws from rng a drafter for testConfig (weights scaled so
// that gradients are not tiny), a head, and a batch of len(seqLens) rows
// padded to S tokens with random hidden states and about 80% of positions
// labelled, and lays out up to anchors blocks per row.
func randomDrafter[T tensor.Float](rng *rand.Rand, S int, seqLens []int, anchors int) (*Drafter[T], Head[T], *Batch, *Blocks) {
	c := testConfig()
	d := New[T](c, rng)
	for _, p := range d.Params() { // larger than the 0.02 init so gradients are not tiny
		if len(p.Shape) == 2 {
			p.FillNormal(rng, 0, 1/math.Sqrt(float64(p.Shape[1])))
		} else {
			p.FillNormal(rng, 1, 0.2)
		}
	}
	head := Head[T]{Embed: tensor.New[T]("embed", c.VocabSize, c.HiddenSize), LMHead: tensor.New[T]("lm", c.VocabSize, c.HiddenSize)}
	head.Embed.FillNormal(rng, 0, 1)
	head.LMHead.FillNormal(rng, 0, 0.3)
	R := len(seqLens)
	b := &Batch{Rows: R, Len: S, IDs: make([]int32, R*S), LossMask: make([]uint8, R*S), SeqLen: seqLens}
	for r := 0; r < R; r++ {
		for i := 0; i < b.SeqLen[r]; i++ {
			b.IDs[r*S+i] = int32(rng.IntN(c.VocabSize - 1))
			b.LossMask[r*S+i] = uint8(min(1, rng.IntN(5)))
		}
	}
	for range c.TargetLayerIDs {
		h := make([]float32, R*S*c.HiddenSize)
		for i := range h {
			h[i] = float32(rng.NormFloat64())
		}
		b.Taps = append(b.Taps, tensor.FromData(fmt.Sprintf("tap%d", len(b.Taps)), h, R*S, c.HiddenSize))
	}
	return d, head, b, BuildBlocks(c, b, SampleBatchAnchors(rng, b, anchors))
}

// lossAndGrads runs d's training forward and backward pass from zeroed
// gradients on a new CPU backend of cpuWorkers goroutines and returns the
// loss and copies of the parameters' gradients.
func lossAndGrads[T tensor.Float](t *testing.T, cpuWorkers int, d *Drafter[T], head Head[T], b *Batch, bl *Blocks) (T, [][]T) {
	t.Helper()
	for _, p := range d.Params() {
		p.ZeroGrad()
	}
	tp := tensor.NewTape(tensor.NewCPU[T](cpuWorkers))
	out, err := d.Forward(tp, true, head, b, bl)
	if err != nil {
		t.Fatal(err)
	}
	tp.Backward(out.Loss)
	var gs [][]T
	for _, p := range d.Params() {
		gs = append(gs, append([]T(nil), p.Grad()...))
	}
	return out.Loss.Data()[0], gs
}

// TestLossChunkIndependent checks that the chunked head loss gives the same
// loss and gradients whatever the chunk size.
func TestLossChunkIndependent(t *testing.T) {
	seed := testseed.Seed(t)
	d, head, b, bl := randomSetup[float64](t, seed)
	d.LossChunk = 100000
	l0, g0 := lossAndGrads(t, 2, d, head, b, bl)
	for _, chunk := range []int{1, 3, 17} {
		d.LossChunk = chunk
		l, g := lossAndGrads(t, 2, d, head, b, bl)
		if math.Abs(l-l0) > 1e-12*l0 {
			t.Errorf("chunk %d: loss %v, whole %v", chunk, l, l0)
		}
		for i := range g {
			if e := relErr(g[i], g0[i]); e > 1e-12 {
				t.Errorf("chunk %d: %s gradient rel err %.2e", chunk, d.Params()[i].Name, e)
			}
		}
	}
}

// TestFiniteDifferences checks the full drafter's gradient against central
// differences in float64 on random coordinates.
func TestFiniteDifferences(t *testing.T) {
	seed := testseed.Seed(t)
	d, head, b, bl := randomSetup[float64](t, seed)
	_, g := lossAndGrads(t, 2, d, head, b, bl)
	rng := rand.New(rand.NewPCG(seed, 5))
	inf := tensor.NewInference[float64](tensor.NewCPU[float64](2))
	loss := func() float64 {
		out, err := d.Forward(inf, false, head, b, bl)
		if err != nil {
			t.Fatal(err)
		}
		return out.Loss.Data()[0]
	}
	for pi, p := range d.Params() {
		i := rng.IntN(p.Numel())
		old := p.Data()[i]
		const h = 1e-5
		p.Data()[i] = old + h
		lp := loss()
		p.Data()[i] = old - h
		lm := loss()
		p.Data()[i] = old
		fd := (lp - lm) / (2 * h)
		if math.Abs(fd-g[pi][i]) > 1e-6+1e-5*math.Abs(fd) {
			t.Errorf("%s[%d]: gradient %.9g, finite difference %.9g", p.Name, i, g[pi][i], fd)
		}
	}
}

func TestWriteLoadDir(t *testing.T) {
	seed := testseed.Seed(t)
	d, _, _, _ := randomSetup[float32](t, seed)
	dir := filepath.Join(t.TempDir(), "drafter")
	if err := d.WriteDir(dir, "F32"); err != nil {
		t.Fatal(err)
	}
	got, err := LoadDir[float32](dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range d.Params() {
		q := got.Params()[i]
		if q.Name != p.Name {
			t.Fatalf("param %d: %s vs %s", i, q.Name, p.Name)
		}
		for j := range p.Data() {
			if p.Data()[j] != q.Data()[j] {
				t.Fatalf("%s[%d]: %v after the round trip, %v before", p.Name, j, q.Data()[j], p.Data()[j])
			}
		}
	}
	// BF16 export rounds every value to bfloat16; rewriting over dir replaces it whole.
	if err := d.WriteDir(dir, "BF16"); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	info, _ := f.Info("fc.weight")
	v, _ := f.Float32("fc.weight")
	f.Close()
	if info.DType != "BF16" {
		t.Fatalf("dtype %s", info.DType)
	}
	for j, x := range d.FC.Data() {
		if want := dtype.BF16ToFloat32(dtype.Float32ToBF16(x)); v[j] != want {
			t.Fatalf("fc.weight[%d]: %v, want bf16(%v) = %v", j, v[j], x, want)
		}
	}
	cfg, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if !strings.Contains(string(cfg), `"torch_dtype": "bfloat16"`) {
		t.Fatalf("config.json does not say bfloat16:\n%s", cfg)
	}
	entries, _ := os.ReadDir(filepath.Dir(dir))
	if len(entries) != 1 {
		t.Fatalf("leftovers beside the export: %v", entries)
	}
	// A missing tensor is an error naming it.
	ts := []safetensors.Tensor{{Name: "fc.weight", Shape: d.FC.Shape, DType: "F32", Data: d.FC.Data()}}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir[float32](dir); err == nil || !strings.Contains(err.Error(), "hidden_norm.weight") {
		t.Fatalf("loading a directory without hidden_norm.weight: %v", err)
	}
}

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
