// Package tensor provides dense row-major tensors, a reverse-mode autograd
// tape and the ops a transformer needs (embedding, linear, RMSNorm, RoPE,
// SwiGLU, flex attention, concatenation, chunked cross-entropy), each with
// its forward formula and gradient.
//
// Ops run on a Backend chosen once, when a Tape is made. Today the only
// backend is the CPU one (pure Go, parallel over goroutines, float32 for
// training and float64 as the conformance reference); tensors live in host
// memory. The CUDA backend is not a Backend yet: its kernel layer is
// package tensor/tensorcuda (the ops on device buffers), with GEMMs from
// package gpu (cuBLASLt) and attention from flex/flexcuda. Tensor is
// Of[float32], the training type; Of[float64] runs the same op code on the
// float64 CPU backend.
//
// A model's parameters are declared into an Arena: each is a view of one
// flat value buffer, and its gradient a view of one flat gradient buffer,
// so optimizers, all-reduces and checkpoints can treat the model as one
// buffer.
//
// The tape records one backward closure per op whose inputs need gradients;
// Tape.Backward(loss) runs them in reverse and accumulates into each input's
// Grad. Ops called on a tape made with NewInference record nothing.
//
// Layout conventions: a tensor is row-major; "rows" means the product of all
// but the last dimension. Linear weights use the HF layout [out, in].
// Attention tensors use flex's layout [batch, heads, len, headDim].
// Programmer errors (shape mismatches) panic with a message naming the op.
package tensor
