// Package flexcuda is dflash's flex attention on NVIDIA GPUs: it generates
// forward and backward kernels from a flex mask program and score program,
// compiles them through the kernel cache (package jit), launches them on a
// gpu.Worker's device, and builds block masks on the GPU.
//
//	att, err := flexcuda.New(cache, flex.DFlashMask(16), nil, flexcuda.Config{HeadDim: 128, Group: 4})
//	bld, err := flexcuda.NewDFlashBuilder(cache, 16, 0, 0)
//	err = w.Run(func(d *gpu.Device) error {
//		args, _ := flexcuda.UploadArgs(d, flex.DFlashArgs(ctx, anchors, starts, n, nil))
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
// # Kernels
//
// Each direction has two kernels, chosen by Config.Fwd and Config.Bwd (or
// DFLASH_FLEX_FWD / DFLASH_FLEX_BWD = hopper or portable; by default Hopper,
// or Portable where Config.Arch names a GPU other than sm_90).
//
// Hopper (sm_90a; docs/PERF.md measures it): the forward
// kernels/flex_fwd_ws.cu is warp specialised, one producer warpgroup
// copying Q, K and V tiles with the tensor memory accelerator (TMA; the
// tensor maps are encoded per call, see cuda.EncodeTiled) into stages
// guarded by mbarriers, and two consumer warpgroups that take turns on the
// tensor cores; the backward kernels/flex_bwd_wg.cuh at head dims 64 and
// 128 has a producer warpgroup too and adds each dQ tile through shared
// memory with the copy engine, and at head dim 256 runs two CTAs per kv
// block, one per half of the head dimension (only one of them adds the
// score tensors' gradients), adding dQ with atomics. Both use
// warpgroup MMA (wgmma) on 128-byte-swizzled shared-memory tiles; on a GPU
// other than sm_90 they refuse to load with an error naming Portable.
//
// Portable (mma.sync, any GPU from sm_80): kernels/flex_fwd.cu and
// kernels/flex_bwd.cu. Config.Deterministic always uses the portable
// backward, with dQ from a separate q-parallel pass.
//
// Spec holds the choice; limits.go chooses every tile size and thread
// count from it, Spec.defines emits them as #defines in front of the
// templates (which #error without them), and the Resources functions size
// shared memory from the same values.
//
// These are the only choices: one production kernel per direction and
// choice. The variants they superseded (once tuning switches of a
// DFLASH_FLEX_DEFINES variable, now gone) are described, with their
// timings, in kernels/dev/README.md.
//
// # Checked mode
//
// Tensor indices of the programs are clamped into range. Config.Check (or
// DFLASH_FLEX_CHECK=1, which the CPU side reads too) prints
// the programs with flex.Checked instead: the first out-of-range read of a
// launch is recorded in the module's flex_check_word, and Forward and
// Backward read it back after the call and return it as a *flex.IndexError
// naming the tensor and the index. Reading it waits for the call: checked
// mode is for debugging.
//
// # Limits
//
// Before a launch the kernel's threads are checked against the register file
// (registers per thread as compiled) and its dynamic shared memory against
// the device's opt-in limit; a launch that would break either returns an
// error naming the limit (contract 4: there is no dense fallback here).
package flexcuda
