// Package quant quantizes matrices to OCP FP8 E4M3 with float32 scales and
// holds the CPU reference of the FP8 GEMM the CUDA backend runs through
// cuBLASLt.
//
// A row-major rows x cols matrix X is stored as codes Q and scales s with
// X[i][j] ≈ s_i · e4m3(Q[i][j]). RowScales gives one scale per row,
// s_i = amax_j |X[i][j]| / 448 (a row of zeros gets 1), so each row's
// largest magnitude maps to the format's largest value: per output channel
// for a weight stored out x in, per token for activations stored
// tokens x in. TensorScale gives one scale for the whole matrix.
//
// Rounding: E4M3 keeps 3 mantissa bits, so a normal value rounds with a
// relative error of at most u = 2^-4; below 2^-6 (subnormal) the error is at
// most 2^-10 absolute, in units of the scale. Quantizing x therefore errs
// by at most e(x) = u'·|x| + 2^-10·s (ElementBound; u' is u plus the float32
// rounding of x/s), and a dot product of K quantized terms errs by at most
// Σ_p e(x_p)|w_p| + e(w_p)|x_p| + e(x_p)e(w_p) (ProductBound): about
// 2u·Σ|x_p w_p|, a worst case that random rounding errors, of mixed sign,
// stay far below (their sum grows as √K, not K): ProductSigma bounds their
// standard deviation, and GPU and CPU tests hold errors to 6 of it.
package quant
