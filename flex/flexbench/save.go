package flexbench

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"dflash/dtype"
	"dflash/flex"
	"dflash/safetensors"
)

// attnDump is one attention call's inputs and results on the host, written
// by `bench attention --device cuda --save FILE` for bench/flex_peer.py
// --check, which runs PyTorch's flex_attention on the same inputs and
// compares. Half-precision tensors are raw bf16/f16 bits.
type attnDump struct {
	dims   flex.Dims
	dtype  dtype.DType          // of the halves: bf16 or f16
	meta   map[string]string    // the mask and its parameters
	halves map[string][]uint16  // q, k, v, dout, out, dq, dk, dv
	floats map[string][]float32 // lse; the mask's tensors (anchors, block_starts, doc_ids) as exact small integers
	shapes map[string][]int     // shapes of the floats
}

// write stores d at path (atomically) as safetensors: halves as their raw
// bits in the storage dtype, floats as F32, meta and the dims as string
// metadata.
func (d *attnDump) write(path string) error {
	dm := d.dims
	qs := []int{dm.Batch, dm.HeadsQ, dm.LenQ, dm.HeadDim}
	ks := []int{dm.Batch, dm.HeadsKV, dm.LenKV, dm.HeadDim}
	shape := map[string][]int{"q": qs, "dout": qs, "out": qs, "dq": qs, "k": ks, "v": ks, "dk": ks, "dv": ks}
	var ts []safetensors.Tensor
	for name, h := range d.halves {
		s, ok := shape[name]
		if !ok {
			return fmt.Errorf("bench --save: unknown tensor %q", name)
		}
		if n := s[0] * s[1] * s[2] * s[3]; len(h) != n {
			return fmt.Errorf("bench --save: tensor %s has %d values, dims %+v need %d", name, len(h), dm, n)
		}
		raw := make([]byte, 0, 2*len(h)) // the bits as they are, little-endian
		for _, x := range h {
			raw = binary.LittleEndian.AppendUint16(raw, x)
		}
		ts = append(ts, safetensors.Tensor{Name: name, Shape: s, DType: d.dtype.Safetensors(), Raw: raw})
	}
	for name, f := range d.floats {
		ts = append(ts, safetensors.Tensor{Name: name, Shape: d.shapes[name], Data: f})
	}
	meta := map[string]string{"batch": strconv.Itoa(dm.Batch), "heads_q": strconv.Itoa(dm.HeadsQ),
		"heads_kv": strconv.Itoa(dm.HeadsKV), "len_q": strconv.Itoa(dm.LenQ), "len_kv": strconv.Itoa(dm.LenKV),
		"head_dim": strconv.Itoa(dm.HeadDim), "dtype": d.dtype.String()}
	for k, v := range d.meta {
		meta[k] = v
	}
	return safetensors.Write(path, ts, meta)
}

// dumpMeta returns the mask description bench/flex_peer.py rebuilds the
// mask from, and the mask's tensors.
func (o Options) dumpMeta(pc *attnCase) (map[string]string, map[string][]float32, map[string][]int) {
	meta := map[string]string{"mask": o.Mask}
	floats, shapes := map[string][]float32{}, map[string][]int{}
	d := pc.dims
	switch o.Mask {
	case "window":
		meta["window"] = strconv.Itoa(o.Window)
	case "document":
		floats["doc_ids"], shapes["doc_ids"] = exactFloats(pc.docIDs), []int{d.Batch, d.LenQ}
	case "dflash":
		meta["context"], meta["block_size"] = strconv.Itoa(o.Context), strconv.Itoa(o.BlockSize)
		meta["n_valid"] = strconv.Itoa(o.Anchors)
		floats["anchors"], shapes["anchors"] = exactFloats(pc.anchors), []int{d.Batch, o.Anchors}
		floats["block_starts"], shapes["block_starts"] = exactFloats(pc.starts), []int{d.Batch, o.Anchors}
	}
	return meta, floats, shapes
}

// exactFloats converts small integers (below 2^24, so exactly) to float32,
// the dtypes the safetensors writer has.
func exactFloats(x []int32) []float32 {
	f := make([]float32, len(x))
	for i, v := range x {
		f[i] = float32(v)
	}
	return f
}
