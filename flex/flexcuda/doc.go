// Package flexcuda is dflash's flex attention on NVIDIA GPUs: it generates
// forward and backward kernels from a flex mask program and score program,
// compiles them through the kernel cache (package jit), launches them on a
// gpu.Worker's device, and builds block masks on the GPU.
//
//	att, err := flexcuda.New(cache, flex.DFlashMask(16), nil, flexcuda.Config{HeadDim: 128, Group: 4})
//	bld, err := flexcuda.NewDFlashBuilder(cache, 16, 0, 0)
//	err = w.Run(func(d *gpu.Device) error {
//		args, _ := flexcuda.UploadArgs(d, flex.DFlashArgs(ctx, anchors, n, nil))
//		bm, _ := bld.Build(d, nil, dims, args, nil)           // every step, on the GPU
//		c := &flexcuda.Call{Dims: dims, Mask: bm, Args: args, Q: q, K: k, V: v, Out: o, LSE: lse}
//		if err := att.Forward(d, c); err != nil { return err }
//		return att.Backward(d, c)                             // with c.DOut, c.DQ, c.DK, c.DV
//	})
//
// # Specialisation
//
// A kernel depends on structure only (contract 3): head dimension, storage
// dtype, GQA group size, block sizes and the programs' structure (their
// printed CUDA C, hence their hashes). Lengths, batch, anchor counts,
// scalars and tensors are run-time arguments and never reach the source, so
// one Attention compiles two modules (forward, backward) once per GPU
// architecture and a Builder one, however the shapes vary.
//
// # Arguments of the programs
//
// flex prints each program as a __device__ function whose parameters are
// the program's named scalars and tensors. The generator wraps it in the
// templates' flex_mask / flex_score / flex_score_grad, reading those
// parameters from FlexArgs: 8-byte slots that the kernels take as separate
// parameters (tensor pointers first, then int scalars, tensor dimensions and
// float scalars packed two 32-bit words per slot, then, in the backward, the
// gradient pointers of the score program's float tensors). Args holds the
// values on the device by name; a missing, mistyped or out-of-range value is
// an error that names it, before any launch.
//
// # Kernel versions
//
// Config.FwdVariant and BwdVariant (or DFLASH_FLEX_FWD / DFLASH_FLEX_BWD)
// choose among the kernel versions docs/PERF.md measures. The default
// forward is v7 (kernels/flex_fwd_ws.cu): warp specialised, one producer
// warpgroup copying Q, K and V tiles with the tensor memory accelerator
// (TMA; the tensor maps are encoded per call, see cuda.EncodeTiled) into
// stages guarded by mbarriers, and two consumer warpgroups that take turns
// on the tensor cores. The default backward is v6 (kernels/flex_bwd_wg.cuh).
// Both use Hopper warpgroup MMA (wgmma) on 128-byte-swizzled shared-memory
// tiles, compiled for sm_90a; forward v6 (kernels/flex_fwd_wg.cu) is v7's
// predecessor without the producer. The v6 backward adds dQ with atomics
// (at head dim 256 two CTAs share each kv block, one per half of the head
// dimension); Config.Deterministic uses the mma.sync backward v4. Versions
// 3-5 are the mma.sync kernels (kernels/flex_fwd.cu, kernels/flex_bwd.cu)
// and run on any GPU from sm_80; on a GPU other than sm_90 the wgmma kernels
// refuse to load with an error naming variant 4.
//
// DFLASH_FLEX_DEFINES=NAME=v,... sets template switches for experiments:
// FLEX_WS_PP=0 (v7's consumers do not take turns), FLEX_BWD_TWO_PATHS=0 (the
// v6 backward evaluates the mask on full tiles too), FLEX_BWD_DQ_COLS=0
// (head dim 64: dQ split by kv rows). The source changes, so the kernel
// cache keeps the variants apart.
//
// # Limits
//
// Before a launch the kernel's threads are checked against the register file
// (registers per thread as compiled) and its dynamic shared memory against
// the device's opt-in limit; a launch that would break either returns an
// error naming the limit (contract 4: there is no dense fallback here).
package flexcuda
