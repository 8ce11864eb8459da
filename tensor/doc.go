// Package tensor provides dense row-major tensors, a reverse-mode autograd
// tape and the ops a transformer needs (embedding, linear, RMSNorm, RoPE,
// SwiGLU, flex attention, concatenation, chunked cross-entropy), each with
// its forward formula and gradient. MLP is the SwiGLU MLP as one op: gate
// and up as one weight (Span of adjacent parameters of an Arena), one GEMM
// each way for both, and the activation recomputed in the backward step
// instead of kept. LinearAdd and MLP take a residual that the last GEMM
// adds in its epilogue (Backend.GemmAdd), so a residual stream costs no
// add of its own.
//
// A tensor is a shape and Storage owned by a backend: host memory on the
// CPU backend (Host: pure Go, parallel over goroutines, float32 for
// training and float64 as the conformance reference), device memory on the
// CUDA backend (package tensor/tensorcuda: bf16 activations, fp32
// statistics, cuBLASLt GEMMs, flexcuda attention). Ops run on the Backend
// of their tape, chosen once when the Tape is made; the op code, its
// gradients and the models written on it never branch on the device. Data
// and Grad read host storage; Backend.Download reads any. Inputs of a step
// (ids, rotary tables, block masks, loss rows) are built on the backend
// before the step; inside it nothing is read back (the loss stays a
// backend scalar). Tensor is Of[float32], the training type; Of[float64]
// runs the same op code on the float64 CPU backend.
//
// A model's parameters are declared into an Arena: each is a view of one
// flat value buffer, and its gradient a view of one flat gradient buffer,
// so optimizers, all-reduces and checkpoints can treat the model as one
// buffer. Arena.Place moves it to a backend (fp32 masters and a bf16
// compute copy on CUDA); Arena.Fetch brings the masters back. A model
// loaded from its files is allocated on the backend at once (AllocOn) and
// written there piece by piece from the files' bytes (SetParamBytes,
// Backend.WriteParamBytes: a device that stores the file's dtype takes
// the bytes unconverted).
//
// Every backend implements the whole Backend contract: the kernels, and
// the memory methods (step memory, AllocOut and Storage.LikeOut, KeepStat,
// AllocParams), Replay and XentChunk, which the CPU implements trivially
// (its memory is the garbage collector's, Replay runs the region). The ops
// and the models call them without asking what the backend can do; only
// profiling, a tool rather than part of the contract, is optional
// (ProfilerOf).
//
// A step's storage (every Alloc, AllocOut, AllocStat, Upload, Ints, mask
// and Attention result, and Like of step storage) lives until the
// backend's ResetStep; parameters (AllocParams) and kept tables
// (KeepStat) outlive every step. One owner ends each step: the training
// session's step (dflash.Session.Step, which ends with ResetStep, as each
// of Session.Evaluate's batches does; dflash bench step ends the step it
// assembles itself likewise). Inside a step, memory is given back
// earlier in two ways, each expressed once:
//
//   - Scope(b, fn) runs a part of a step without gradients and releases
//     everything it allocated (MarkStep, ReleaseStep): the target's forward
//     pass runs each layer in one (model.Model.ForwardPrepared), copying
//     out what it keeps.
//   - A training tape with ReleaseGrads gives back each op output and
//     gradient once nothing will read it (FreeStep), a layer's dead values
//     at its end (BeginScope, EndScope: the drafter's layers).
//
// On the CPU neither releases anything and results are the same; on CUDA
// the step's storage is one arena whose addresses repeat step after step
// (so a replayed region's work matches its graph).
//
// The tape records one backward closure per op whose inputs need gradients;
// Tape.Backward(loss) runs them in reverse and accumulates into each input's
// Grad. Ops called on a tape made with NewInference record nothing. Each
// closure declares the tensors whose values it reads (Record's saves), so
// a training tape on step memory (ReleaseGrads) gives back every op output
// and gradient as soon as nothing will read it: dead values of a layer at
// its end (EndScope), the rest at Backward's start or after the last
// backward step that reads them; the gradient of an add's or a view's
// output is handed on, not copied, as the gradient of an input that has
// none yet.
//
// Layout conventions: a tensor is row-major; "rows" means the product of all
// but the last dimension. Linear weights use the HF layout [out, in].
// Attention tensors use flex's layout [batch, heads, len, headDim]
// (AttentionHeadsInner's output: [batch, len, heads, headDim]).
// Programmer errors (shape mismatches) panic with a message naming the op.
package tensor
