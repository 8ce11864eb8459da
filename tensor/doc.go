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
// compute copy on CUDA); Arena.Fetch brings the masters back.
//
// A backend with StepMemory (CUDA) hands out a step's storage from an
// arena released at once (EndStep), with scopes inside a step
// (MarkStep/ReleaseStep) for passes without gradients.
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
