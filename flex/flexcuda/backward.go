package flexcuda

import (
	"context"
	"fmt"

	"dflash/cuda"
	"dflash/gpu"
	"dflash/internal/ceil"
)

// Backward computes DQ, DK and DV (and the score tensors' gradients) from
// DOut and the Out and LSE of Forward, with P = exp(score(s) - LSE):
//
//	DV_j = Σ_i P_ij DOut_i
//	dS_ij = P_ij (DOut_i·v_j - DOut_i·Out_i) score'(s_ij)
//	DQ_i = scale Σ_j dS_ij k_j,  DK_j = scale Σ_i dS_ij q_i
//
// summing DK and DV over each kv head's query heads without copying K or V.
// DQ is accumulated in float32 with atomics (not bitwise deterministic);
// so are DK and DV with GQA (one CTA per query head).
// With Config.Deterministic no atomics are used for DQ, DK and DV: two
// calls on equal inputs give equal bits.
func (a *Attention) Backward(d *gpu.Device, c *Call) error {
	a.check(c, true)
	st, err := a.device(context.Background(), d, true)
	if err != nil {
		return err
	}
	dm, m, D := c.Dims, c.Mask, a.spec.HeadDim
	rows := dm.Batch * dm.HeadsQ * dm.LenQ
	if err := grow(d, &st.dlt, int64(rows)*4); err != nil {
		return err
	}
	det := a.spec.Deterministic
	if !det {
		if err := grow(d, &st.dqacc, int64(rows)*int64(D)*4); err != nil {
			return err
		}
	}
	split := a.spec.bwdSplit()
	kvElems := dm.Batch * dm.HeadsKV * dm.LenKV * D
	dkPtr, dvPtr := c.DK.Ptr, c.DV.Ptr
	if split {
		for _, b := range []*gpu.Buffer{&st.dkacc, &st.dvacc} {
			if det { // one fp32 slice per query head of the group, each element written once
				if err := grow(d, b, int64(a.spec.Group)*int64(kvElems)*4); err != nil {
					return err
				}
				continue
			}
			if err := grow(d, b, int64(kvElems)*4); err != nil {
				return err
			}
			if err := d.Memset(*b, 0, c.Stream); err != nil {
				return fmt.Errorf("flexcuda: zero dK/dV workspace: %w", err)
			}
		}
		dkPtr, dvPtr = st.dkacc.Ptr, st.dvacc.Ptr
	}
	n := a.layout.slots(true)
	if err := a.layout.pack(st.slots[:n], c.Args, true, c.TensorGrads); err != nil {
		return err
	}
	for _, name := range a.layout.grads {
		if err := d.Memset(c.TensorGrads[name], 0, c.Stream); err != nil {
			return fmt.Errorf("flexcuda: zero gradient of %q: %w", name, err)
		}
	}
	rpb := a.spec.preRows()
	var dqacc cuda.DevicePtr // the pre pass zeroes the atomic path's accumulator
	if !det {
		dqacc = st.dqacc.Ptr
	}
	args := st.args.Reset().Ptr(c.Out.Ptr).Ptr(c.DOut.Ptr).Ptr(st.dlt.Ptr).Ptr(dqacc).I64(int64(rows)).
		I32(int32(dm.HeadsQ)).I32(int32(dm.LenQ)).I32(outHeadsInner(dm))
	if err := st.pre.launch(d, c.Stream, cuda.Dim(uint32(ceil.Div(rows, rpb)), 1, 1), 0, args); err != nil {
		return err
	}
	args = st.args.Reset().Ptr(c.Q.Ptr).Ptr(c.K.Ptr).Ptr(c.V.Ptr).Ptr(c.DOut.Ptr).Ptr(c.LSE.Ptr).Ptr(st.dlt.Ptr).
		Ptr(dkPtr).Ptr(dvPtr).Ptr(dqacc).
		Ptr(m.QNum.Ptr).Ptr(m.QIdx.Ptr).Ptr(m.FullQNum.Ptr).Ptr(m.FullQIdx.Ptr)
	a.shape(args, c)
	if a.spec.bwdWS() { // the producer warpgroup's copies of Q and dO tiles
		bm := a.spec.bwdBM()
		if err := a.encodeMaps("Hopper backward", st.btmaps[:1], c, []mapSpec{{"Q", c.Q.Ptr, dm.HeadsQ, dm.LenQ, bm}}); err != nil {
			return err
		}
		if err := a.doutMap(st, c); err != nil {
			return err
		}
		args.TensorMap(st.btmaps[0]).TensorMap(st.btmaps[1])
	}
	if a.spec.bwdDQBulk() { // the consumers' dQ adds by the copy engine
		if err := a.dqMap(st, c); err != nil {
			return err
		}
		args.TensorMap(st.btmaps[2])
	}
	slotArgs(args, st.slots[:n])
	// kv block 0 (the heaviest under causal-like masks) of every head first
	grid := cuda.Dim(uint32(dm.HeadsKV), uint32(m.NumKVBlocks), uint32(dm.Batch))
	if split {
		grid.X = uint32(dm.HeadsQ)
	}
	if a.spec.bwdHalf() {
		grid.X *= 2 // two CTAs per kv block, one per half of the head dim
	}
	if err := st.dkdv.launchSmem(d, c.Stream, grid, BwdResources(a.spec, m.NumQBlocks).SharedMem, args); err != nil {
		return err
	}
	if split {
		f := st.conv
		if det {
			f = st.gsum
		}
		for _, p := range [][2]gpu.Buffer{{st.dkacc, c.DK}, {st.dvacc, c.DV}} {
			args = st.args.Reset().Ptr(p[0].Ptr).Ptr(p[1].Ptr).I64(int64(kvElems))
			if err := f.launch(d, c.Stream, cuda.Dim(uint32(ceil.Div(kvElems, 512)), 1, 1), 0, args); err != nil {
				return err
			}
		}
	}
	if det {
		if err := a.backwardDQ(d, st, c); err != nil {
			return err
		}
		return a.checked(d, st.bwdWord, c.Stream)
	}
	total := rows * D
	args = st.args.Reset().Ptr(st.dqacc.Ptr).Ptr(c.DQ.Ptr).I64(int64(total))
	if err := st.conv.launch(d, c.Stream, cuda.Dim(uint32(ceil.Div(total, 512)), 1, 1), 0, args); err != nil {
		return err
	}
	return a.checked(d, st.bwdWord, c.Stream)
}

// backwardDQ queues the deterministic backward's dQ pass: one CTA per (q
// block, query head, batch) over the kv-side lists, heaviest q blocks first.
func (a *Attention) backwardDQ(d *gpu.Device, st *attnDev, c *Call) error {
	m, dm := c.Mask, c.Dims
	n := a.layout.slots(true)
	args := st.args.Reset().Ptr(c.Q.Ptr).Ptr(c.K.Ptr).Ptr(c.V.Ptr).Ptr(c.DOut.Ptr).Ptr(c.LSE.Ptr).Ptr(st.dlt.Ptr).
		Ptr(c.DQ.Ptr).Ptr(m.KVNum.Ptr).Ptr(m.KVIdx.Ptr).Ptr(m.FullKVNum.Ptr).Ptr(m.FullKVIdx.Ptr)
	slotArgs(a.shape(args, c), st.slots[:n])
	grid := cuda.Dim(uint32(dm.HeadsQ*dm.Batch), uint32(m.NumQBlocks), 1)
	return st.dq.launchSmem(d, c.Stream, grid, DQResources(a.spec, m.NumKVBlocks).SharedMem, args)
}
