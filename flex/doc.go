// Package flex is dflash's programmable block-sparse attention: mask and
// score programs written in a small typed expression language, block masks
// built from them without dense masks, CPU forward and backward kernels, and
// CUDA C generation for the GPU backend.
//
// # Programs
//
// A mask program maps (b, h, q, kv) to bool: whether query q of batch element
// b and query head h may attend to key kv. A score program maps (score, b, h,
// q, kv) to a new score, applied to score = q·k·scale before the softmax.
// Both are built from Go calls:
//
//	j := flex.Q().Div(flex.Const(16))                 // q's draft block
//	anchors := flex.IntTensorParam("anchors", 2)
//	m := flex.NewMask("ctx", flex.KV().Lt(anchors.At(flex.B(), j)))
//
// Integer and float constants are structural: they are baked into generated
// kernels and change the program's Hash. Named scalars (IntScalar,
// FloatScalar) and tensors (IntTensorParam, FloatTensorParam) are run-time
// values passed in Args; they never change the hash, so one compiled kernel
// serves every step. Tensor indices are clamped into range. Integer division
// and remainder truncate toward zero (x/0 and x%0 are 0). Int expressions are
// int64 on the CPU and int on CUDA: programs keep values within int32.
//
// Every program (1) evaluates on the CPU, compiled once into closures that
// work on runs of kv positions, (2) prints itself as a CUDA C __device__
// function (CUDA, CUDABackward), and (3) has a canonical structural hash.
//
// # Block masks
//
// NewBlockMask classifies each (batch, head, q block, kv block) as empty,
// partial or full, soundly, in O(blocks) memory: interval evaluation of the
// program over the block's q and kv ranges, with range minima and maxima of
// the tensors it reads, then per-element evaluation of the blocks intervals
// cannot decide. Forward and Backward skip empty blocks, skip the mask in
// full blocks and evaluate it per element in partial ones.
//
// # CPU kernels
//
// Forward and Backward work on 128x128 (by default) tiles, parallel over
// (batch, kv head, q block) in the forward pass and (batch, kv head, kv
// block) in the backward pass, with at most GOMAXPROCS goroutines. The
// query heads of a kv head are processed together, so K/V tiles and the
// evaluated masks of partial blocks are shared between them. Inside a
// partial block, each group of four query rows computes only the span of
// keys its rows may see. float32 tiles use AVX2/FMA kernels (Go assembly,
// no cgo) where the CPU has them, unless DFLASH_NOASM is set; float64 and
// other CPUs use the portable Go kernels. Both passes are deterministic:
// Backward adds the kv-block tasks' dq tiles and score tensor gradients in
// a fixed order (the task order, which does not depend on GOMAXPROCS), so
// repeated runs give bit-identical results on any number of threads.
package flex
