package flexcuda

import (
	"fmt"

	"dflash/cuda"
)

// tensorMaps describes c's Q, K and V to the Hopper forward's copy engine: each
// a [batch*heads][len][head dim] tensor copied in boxes of 64 columns (128
// bytes, swizzled as warpgroup MMA reads them) by a tile of rows; rows past
// the length arrive as zeros.
func (a *Attention) tensorMaps(st *attnDev, c *Call) error {
	dm, bn := c.Dims, a.spec.fwdBN()
	return a.encodeMaps("Hopper forward", st.tmaps[:], c, []mapSpec{{"Q", c.Q.Ptr, dm.HeadsQ, dm.LenQ, a.spec.BlockQ},
		{"K", c.K.Ptr, dm.HeadsKV, dm.LenKV, bn}, {"V", c.V.Ptr, dm.HeadsKV, dm.LenKV, bn}})
}

// mapSpec is one tensor of encodeMaps: name (for errors), pointer, heads,
// length and the rows of a box.
type mapSpec struct {
	name      string
	p         cuda.DevicePtr
	heads     int
	len, rows int
}

// encodeMaps encodes into maps (allocating the missing) each of ts as a
// [batch*heads][len][head dim] tensor copied in boxes of 64 columns (128
// bytes, swizzled as warpgroup MMA reads them) by ts[i].rows rows; rows past
// the length arrive as zeros. kernel names the user in errors.
func (a *Attention) encodeMaps(kernel string, maps []*cuda.TensorMap, c *Call, ts []mapSpec) error {
	dm, D := c.Dims, uint64(a.spec.HeadDim)
	dt := cuda.TensorMapType(a.spec.storage())
	for i, t := range ts {
		if maps[i] == nil {
			maps[i] = cuda.NewTensorMap()
		}
		err := cuda.EncodeTiled(maps[i], dt, t.p, []uint64{D, uint64(t.len), uint64(dm.Batch * t.heads)},
			[]uint64{D * 2, uint64(t.len) * D * 2}, []uint32{64, uint32(t.rows), 1}, cuda.Swizzle128B)
		if err != nil {
			return fmt.Errorf("flexcuda: %s: Call.%s: %w", kernel, t.name, err)
		}
	}
	return nil
}

// doutMap describes c's DOut to the copy engine for the Hopper backward's
// producer (Spec.bwdWS) as a 4-D tensor: [batch][heads][lenq][head dim]
// (coordinates column, row, head, batch), or with Dims.OutHeadsInner
// [batch][lenq][heads][head dim] (column, head, row, batch), in boxes of 64
// columns (128 bytes, swizzled as warpgroup MMA reads them) by a q tile of
// rows of one head: the shared-memory tile is the same in both layouts, and
// rows past lenq arrive as zeros.
func (a *Attention) doutMap(st *attnDev, c *Call) error {
	dm, D := c.Dims, uint64(a.spec.HeadDim)
	if st.btmaps[1] == nil {
		st.btmaps[1] = cuda.NewTensorMap()
	}
	H, L, rows := uint64(dm.HeadsQ), uint64(dm.LenQ), uint32(a.spec.bwdBM())
	dims := []uint64{D, L, H, uint64(dm.Batch)}
	strides := []uint64{D * 2, L * D * 2, H * L * D * 2} // bytes, of dims 1..3
	box := []uint32{64, rows, 1, 1}
	if dm.OutHeadsInner {
		dims = []uint64{D, H, L, uint64(dm.Batch)}
		strides = []uint64{D * 2, H * D * 2, L * H * D * 2}
		box = []uint32{64, 1, rows, 1}
	}
	err := cuda.EncodeTiled(st.btmaps[1], cuda.TensorMapType(a.spec.storage()), c.DOut.Ptr, dims, strides, box, cuda.Swizzle128B)
	if err != nil {
		return fmt.Errorf("flexcuda: Hopper backward: Call.DOut: %w", err)
	}
	return nil
}

// dqMap describes the workspace dQacc ([batch*heads_q][lenq][head dim]
// fp32) to the copy engine for the Hopper backward's dQ adds
// (Spec.bwdDQBulk): boxes of 32 columns (128 bytes, swizzled as
// flex_wg_off32 stores them) by a q tile of rows; rows past lenq are not
// written.
func (a *Attention) dqMap(st *attnDev, c *Call) error {
	dm, D := c.Dims, uint64(a.spec.HeadDim)
	if st.btmaps[2] == nil {
		st.btmaps[2] = cuda.NewTensorMap()
	}
	err := cuda.EncodeTiled(st.btmaps[2], cuda.TensorMapFloat32, st.dqacc.Ptr, []uint64{D, uint64(dm.LenQ), uint64(dm.Batch * dm.HeadsQ)},
		[]uint64{D * 4, uint64(dm.LenQ) * D * 4}, []uint32{32, uint32(a.spec.bwdBM()), 1}, cuda.Swizzle128B)
	if err != nil {
		return fmt.Errorf("flexcuda: Hopper backward: dQ accumulator: %w", err)
	}
	return nil
}
