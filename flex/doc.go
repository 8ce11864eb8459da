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
//	j := flex.Q().Div(flex.Const(16))                 // q's draft block, q // 16
//	anchors := flex.IntTensorParam("anchors", 2)
//	m := flex.NewMask("ctx", flex.KV().Lt(anchors.At(flex.B(), j)))
//
// Integer and float constants are structural: they are baked into generated
// kernels and change the program's Hash. Named scalars (IntScalar,
// FloatScalar) and tensors (IntTensorParam, FloatTensorParam) are run-time
// values passed in Args; they never change the hash, so one compiled kernel
// serves every step. Int expressions are int64 on the CPU and int on CUDA:
// programs keep values within int32.
//
// # Operators
//
// Ints: Add, Sub, Mul, Div and Mod (Python's and PyTorch's // and %: Div
// rounds toward negative infinity, Mod has the sign of the divisor, so
// -7 // 2 == -4, -7 % 2 == 1, 7 % -2 == -1), TruncDiv and TruncMod (C's /
// and %, rounding toward zero), Neg, Abs, Min, Max, Clamp, BitAnd, BitOr,
// BitXor, Shl, Shr (arithmetic), Float. Division and remainder by 0 give 0;
// shift counts are clamped into [0, 63] (CUDA: [0, 31], the same while
// values stay within int32). Floats: Add, Sub, Mul, Div, Neg, Abs, Min,
// Max, Exp, Tanh, Log, Sqrt, Pow, Sigmoid, Floor, Ceil, Int (truncating
// like PyTorch's .int(), saturating to int32, NaN to 0). Float domain edges
// are IEEE's and C's on every evaluator: log 0 = -Inf, log and sqrt of a
// negative are NaN, pow of a negative base and a non-integer exponent is
// NaN, min and max ignore a NaN operand. Comparisons give Bools (And, Or,
// Not); Select, SelectF and SelectB choose. Each operator's
// derivative is in its doc comment; Floor, Ceil and Int pass no gradient.
//
// Tensor indices are clamped into range: a read of t[i] with i < 0 reads
// t[0], with i >= dim reads t[dim-1], so reads never fail and cost no
// check. Setting DFLASH_FLEX_CHECK=1 (or Args.Check) turns on a checked
// mode in which an out-of-range read is reported as an *IndexError naming
// the program, the tensor, the index and the shape. CUDA C printed with the
// Checked option records the first one in a device word that
// CheckWordError decodes. On the CPU:
//
//   - A mask program's reads are checked where the mask is bound: in the
//     checked mode NewBlockMask evaluates the mask at every pair and returns
//     the *IndexError as its error, before any attention runs. Callers
//     already handle that error (model/dflash returns it), so a bad index
//     in mask data reaches the user as an error value.
//   - A score program's reads happen inside Forward and Backward, which
//     panic with the *IndexError. This is deliberate: out-of-range score
//     data is a programmer error of the same class as a shape mismatch or a
//     missing parameter, which Forward and Backward also panic on. Their
//     callers, tensor.AttentionBackend and the tape's Attention op (whose
//     backward runs inside a recorded closure), have no error results, and
//     threading one through tensor and model for a debugging mode would
//     change every op's signature. Nothing recovers the panic; the checked
//     mode is for finding such a bug in tests and debug runs.
//
// # From PyTorch
//
// The masks and scores of the PyTorch attention gym, as flex expressions
// (b, h, q_idx, kv_idx are B(), H(), Q(), KV(); TestPyTorchIdioms checks
// each row against a brute-force evaluation of the PyTorch expression):
//
//	causal          q_idx >= kv_idx                          Q().Ge(KV())  (Causal)
//	sliding window  (q_idx >= kv_idx) & (q_idx - kv_idx <= W) Q().Ge(KV()).And(Q().Sub(KV()).Le(Const(W)))
//	prefix LM       (kv_idx <= q_idx) | (kv_idx < prefix[b]) KV().Le(Q()).Or(KV().Lt(prefix.At(B())))  (PrefixLM)
//	document        doc[b, q_idx] == doc[b, kv_idx]          doc.At(B(), Q()).Eq(doc.At(B(), KV()))  (Document)
//	ALiBi           score + slopes[h] * (kv_idx - q_idx)     Score().Add(slopes.At(H()).Mul(KV().Sub(Q()).Float()))  (ALiBi)
//	softcap         c * tanh(score / c), c a tensor/float    c.Mul(Score().Div(c).Tanh())  (SoftcapScalar)
//	tanh softcap    C * torch.tanh(score / C), C a constant  F(C).Mul(Score().Div(F(C)).Tanh())  (Softcap)
//	relative bias   score + (q_idx - kv_idx)                 Score().Add(Q().Sub(KV()).Float())
//	learned bias    score + bias[h, clamp(q-kv, -M, M) + M]  (RelativeBias)
//	dilated window  d = abs(q_idx - kv_idx);                 d := Q().Sub(KV()).Abs()
//	                (d <= W) & (d % D == 0)                  d.Le(Const(W)).And(d.Mod(Const(D)).Eq(Const(0)))
//	strided         (q_idx >= kv_idx) &                      Q().Ge(KV()).And(Q().Sub(KV()).Mod(Const(S)).Eq(Const(0))
//	                (((q_idx - kv_idx) % S == 0) |             .Or(Q().Div(Const(S)).Eq(KV().Div(Const(S)))))
//	                 (q_idx // S == kv_idx // S))
//	chunk offset    ((q_idx - kv_idx) // S).abs() <= 1       Q().Sub(KV()).Div(Const(S)).Abs().Le(Const(1))
//
// Div and Mod are PyTorch's // and %, so the last row (a negative
// difference divided) ports as written; TruncDiv is torch.div(...,
// rounding_mode="trunc").
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
// keys its rows may see. float32 tiles use the AVX2/FMA kernels of package
// internal/avx2 (Go assembly, no cgo) where the CPU has them, unless DFLASH_NOASM is on; float64 and
// other CPUs use the portable Go kernels. Both passes are deterministic:
// Backward adds the kv-block tasks' dq tiles and score tensor gradients in
// a fixed order (the task order, which does not depend on GOMAXPROCS), so
// repeated runs give bit-identical results on any number of threads.
package flex
