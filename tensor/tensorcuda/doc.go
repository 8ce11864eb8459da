// Package tensorcuda launches the CUDA kernels of the tensor ops
// (tensor.Backend's op set: embedding gather and scatter-add, RMSNorm, RoPE,
// SwiGLU, axpy and scale, row broadcasts and sums, strided copies and
// transposes, softmax cross-entropy), the GEMMs (Gemm and GemmF32Out,
// through package gpu's cuBLASLt plans) and the fused AdamW step, on one
// gpu.Device. It is the kernel layer of the CUDA tensor backend; attention
// is flexcuda's.
//
//	ops, err := tensorcuda.New(cache, d, dtype.BF16) // on the worker thread
//	err = ops.RMSNorm(x, w, rows, dim, 1e-6, y, rstd)
//
// # Contract
//
// Launchers take device buffers (gpu.Buffer) and sizes. Every launch is
// queued on the device's default stream: no launcher copies between host and
// device or synchronises, so a step made of them runs without the host
// waiting (and can be captured in a CUDA graph). Buffer sizes are checked
// against the sizes given and a mismatch panics (a programmer error, like a
// shape mismatch in package tensor).
//
// Storage is bf16 or fp32 (the Ops' DType), chosen by a define in the
// kernel sources; arithmetic, accumulation and statistics are fp32. Buffers
// the docs call fp32 (RMSNorm's rstd, RoPE's tables, parameter gradients,
// the cross-entropy's scale and loss, the optimizer's state) are fp32 with
// either storage. Ids, targets and argmax are int32.
//
// Kernels are specialised on the storage dtype only (contract 3): every size
// is a run-time argument, so each kernel file compiles once per dtype and GPU
// architecture through the kernel cache (package jit). The sources are
// kernels/op_*.cu; each kernel's parameter list is declared once in
// kernels.go, and a launch whose arguments differ from it in name, kind or
// count panics, which the package's CPU tests check for every launcher.
//
// An Ops belongs to its device's worker thread, like the device itself.
//
// # Backend
//
// Backend is tensor.Backend[float32] on these
// kernels: the tape's ops run on the device with bf16 activations, fp32
// statistics, fp32 master weights and parameter gradients (Buf records each
// storage's dtype, and every op dispatches on them), attention through
// flexcuda, and tensor.Optimizer over a placed parameter arena: the fused
// AdamW (fp32 moments in parameter memory, the bf16 compute copy refreshed
// in the same pass) and the gradient's sum of squares.
//
//	b, err := tensorcuda.NewBackend(cache, d) // on the worker thread
//	err = b.Prepare(ctx, uses) // every kernel, before the first step
//	arena.Place(b, true)
//	arena.EnsureGrad()
//	st, err := b.NewAdamState(&arena, h, decay)
//	for each step {
//		tp := tensor.NewTape(b) // upload the step's inputs, then run ops:
//		tp.Backward(model.Loss(tp, inputs)) // no copy, no synchronisation
//		b.AdamWStep(&arena, st, lr)
//		b.ResetStep() // the step's storage is released; addresses repeat
//	}
//
// Storage allocated between two Resets must not be used after the next
// one; parameters live until Close.
//
// Kernels compile at first use unless Prepare, given the attention calls
// a run makes (model.Model.ForwardAttentions, and
// model/dflash.Drafter.StepAttentions), has compiled and loaded them and
// every op kernel before the first step: a kernel that cannot be compiled
// is then Prepare's error, naming it, with the NVRTC log (design contract
// 4), instead of a panic in a step. Compile, the compiling half of
// Prepare, may run on another goroutine while the worker loads the
// target, so that the Prepare after it only loads modules.
package tensorcuda
