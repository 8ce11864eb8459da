package dflash

import (
	"os"
	"path/filepath"
	"testing"

	"dflash/dtype"
	"dflash/safetensors"
	"dflash/tensor"
)

// TestWriteExportCheck writes, when DFLASH_EXPORT_CHECK_DIR is set, an
// exported drafter directory plus batch.safetensors (inputs and dflash's
// loss) for `python3 bench/drafter_ref.py --check-export DIR` on the GPU
// machine, which loads the export with the published parameter layout and
// recomputes the loss with the PyTorch reference.
func TestWriteExportCheck(t *testing.T) {
	dir := os.Getenv("DFLASH_EXPORT_CHECK_DIR")
	if dir == "" {
		t.Skip("set DFLASH_EXPORT_CHECK_DIR to write the export check")
	}
	d32, _, _, _ := randomSetup[float32](t, 77)
	if err := d32.WriteDir(dir, "F32"); err != nil {
		t.Fatal(err)
	}
	d, err := LoadDir[float64](dir) // the exported values, computed in float64
	if err != nil {
		t.Fatal(err)
	}
	_, head, b, bl := randomSetup[float64](t, 77)
	for _, w := range []*tensor.Of[float64]{head.Embed, head.LMHead} { // the batch file stores them as float32
		for i, v := range w.Data() {
			w.Data()[i] = float64(float32(v))
		}
	}
	out, err := d.Forward(tensor.NewInference[float64](newDenseCPU[float64]()), false, head, b, bl)
	if err != nil {
		t.Fatal(err)
	}
	f32 := dtype.Convert[float32, float64]
	k, H := len(b.Taps), d.Cfg.HiddenSize
	hid := make([]float32, 0, k*b.Rows*b.Len*H)
	for _, h := range b.Taps {
		hid = append(hid, h.Data()...)
	}
	ids, mask, lens := make([]float32, len(b.IDs)), make([]float32, len(b.IDs)), make([]float32, b.Rows)
	for i := range b.IDs {
		ids[i], mask[i] = float32(b.IDs[i]), float32(b.LossMask[i])
	}
	for i, n := range b.SeqLen {
		lens[i] = float32(n)
	}
	anchors, live := make([]float32, len(bl.Anchors)), make([]float32, len(bl.Anchors))
	for r := 0; r < bl.Rows; r++ {
		for j := 0; j < bl.N; j++ {
			anchors[r*bl.N+j] = float32(bl.Anchors[r*bl.N+j])
			if j < int(bl.NumValid[r]) {
				live[r*bl.N+j] = 1
			}
		}
	}
	ts := []safetensors.Tensor{
		{Name: "target.embed", Shape: head.Embed.Shape, DType: "F32", Data: f32(head.Embed.Data())},
		{Name: "target.lm_head", Shape: head.LMHead.Shape, DType: "F32", Data: f32(head.LMHead.Data())},
		{Name: "input.hidden", Shape: []int{k, b.Rows, b.Len, H}, DType: "F32", Data: hid},
		{Name: "input.ids", Shape: []int{b.Rows, b.Len}, DType: "F32", Data: ids},
		{Name: "input.loss_mask", Shape: []int{b.Rows, b.Len}, DType: "F32", Data: mask},
		{Name: "input.seq_len", Shape: []int{b.Rows}, DType: "F32", Data: lens},
		{Name: "input.anchors", Shape: []int{bl.Rows, bl.N}, DType: "F32", Data: anchors},
		{Name: "input.live", Shape: []int{bl.Rows, bl.N}, DType: "F32", Data: live},
	}
	// The loss goes as two float32 halves: hi + lo reproduces the float64 value to ~1e-14.
	hi := float32(out.Loss.Data()[0])
	lo := float32(out.Loss.Data()[0] - float64(hi))
	ts = append(ts, safetensors.Tensor{Name: "go.loss", Shape: []int{2}, DType: "F32", Data: []float32{hi, lo}})
	if err := safetensors.Write(filepath.Join(dir, "batch.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s: loss %.12f", dir, out.Loss.Data()[0])
}
