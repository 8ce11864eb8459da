package flexbench

import (
	"encoding/binary"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"

	"dflash/dtype"
	"dflash/flex"
	"dflash/safetensors"
)

// TestAttnDumpRoundTrip writes a dump and reads it back with the
// safetensors reader: half tensors keep their bits, floats their values,
// and the metadata carries the dims and the mask's parameters.
func TestAttnDumpRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for dt, name := range map[dtype.DType]string{dtype.BF16: "bf16", dtype.F16: "f16"} {
		o := Options{Device: "cuda", Mask: "dflash", Batch: 2, Heads: 4, KVHeads: 2, HeadDim: 64, Anchors: 3, BlockSize: 4, Context: 20,
			Seq: 1, Window: 1, DocLen: 1, Block: 128, Reps: 1, RepsFB: 1, BuildReps: 1, DType: dt}
		pc, err := o.problem(r)
		if err != nil {
			t.Fatal(err)
		}
		d := pc.dims
		nq, nk := d.Batch*d.HeadsQ*d.LenQ*d.HeadDim, d.Batch*d.HeadsKV*d.LenKV*d.HeadDim
		dump := &attnDump{dims: d, dtype: dt, halves: map[string][]uint16{}}
		for _, name := range []string{"q", "dout", "out", "dq", "k", "v", "dk", "dv"} {
			n := nq
			if name == "k" || name == "v" || name == "dk" || name == "dv" {
				n = nk
			}
			h := make([]uint16, n)
			for i := range h {
				h[i] = uint16(r.IntN(0x7c00)) // finite bf16 and fp16 bit patterns
			}
			dump.halves[name] = h
		}
		dump.meta, dump.floats, dump.shapes = o.dumpMeta(pc)
		lse := make([]float32, d.Batch*d.HeadsQ*d.LenQ)
		for i := range lse {
			lse[i] = float32(r.NormFloat64())
		}
		dump.floats["lse"], dump.shapes["lse"] = lse, []int{d.Batch, d.HeadsQ, d.LenQ}
		path := filepath.Join(t.TempDir(), "call.safetensors")
		if err := dump.write(path); err != nil {
			t.Fatal(err)
		}
		f, err := safetensors.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range dump.halves {
			raw, err := f.Bytes(name)
			if err != nil {
				t.Fatal(err)
			}
			if len(raw) != 2*len(want) {
				t.Fatalf("%s: %d bytes, want %d", name, len(raw), 2*len(want))
			}
			for i, w := range want {
				if got := binary.LittleEndian.Uint16(raw[2*i:]); got != w {
					t.Fatalf("%v %s[%d] = %#04x, want %#04x", dt, name, i, got, w)
				}
			}
		}
		for name, want := range map[string][]int32{"anchors": pc.anchors, "block_starts": pc.starts} {
			got, err := f.Float32(name)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
			}
			for i, a := range want {
				if got[i] != float32(a) {
					t.Fatalf("%s[%d] = %v, want %d", name, i, got[i], a)
				}
			}
		}
		got, _ := f.Float32("lse")
		for i := range lse {
			if got[i] != lse[i] {
				t.Fatalf("lse[%d] = %v, want %v", i, got[i], lse[i])
			}
		}
		m := f.Metadata()
		for k, v := range map[string]string{"mask": "dflash", "context": "20", "block_size": "4", "n_valid": "3",
			"len_q": strconv.Itoa(d.LenQ), "len_kv": strconv.Itoa(d.LenKV), "heads_kv": "2", "dtype": name} {
			if m[k] != v {
				t.Errorf("metadata %s = %q, want %q", k, m[k], v)
			}
		}
		f.Close()
	}
	// A tensor of the wrong length is refused before anything is written.
	bad := &attnDump{dims: flex.Dims{Batch: 1, HeadsQ: 1, HeadsKV: 1, LenQ: 2, LenKV: 2, HeadDim: 64}, halves: map[string][]uint16{"q": make([]uint16, 3)}}
	if err := bad.write(filepath.Join(t.TempDir(), "bad.safetensors")); err == nil {
		t.Fatal("a short tensor was written")
	}
}

// TestDumpMetaDocument checks the document mask's ids.
func TestDumpMetaDocument(t *testing.T) {
	o := Options{Device: "cuda", Mask: "document", Batch: 2, Heads: 1, KVHeads: 1, HeadDim: 64, Seq: 10, DocLen: 4, Window: 1,
		Anchors: 1, BlockSize: 1, Context: 1, Block: 128, Reps: 1, RepsFB: 1, BuildReps: 1}
	pc, err := o.problem(rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	meta, floats, shapes := o.dumpMeta(pc)
	want := []float32{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2}
	if meta["mask"] != "document" || len(floats["doc_ids"]) != len(want) || shapes["doc_ids"][1] != 10 {
		t.Fatalf("meta %v, ids %v, shape %v", meta, floats["doc_ids"], shapes["doc_ids"])
	}
	for i, w := range want {
		if floats["doc_ids"][i] != w {
			t.Fatalf("doc_ids = %v, want %v", floats["doc_ids"], want)
		}
	}
}
