// Package ncclcheck checks NCCL collectives on dflash's GPU workers: that an
// all-reduce gives exactly the expected sum, how fast it runs, and that the
// kernel cache serves every worker from one compile. `dflash nccl check`
// drives it, in one process (one worker per GPU) or one rank per process.
//
// # Inputs whose sums are exact
//
// Rank r of n contributes, at element i,
//
//	v_r(i) = 1 + (i + 7r) mod p,   p = min(31, floor(256/n))
//
// so every value is a small positive integer and every partial sum is at
// most n*p <= 256: exactly representable in bf16 (8 significant bits) and
// fp32, whatever order NCCL adds in. The expected result is
// S(i) = sum over r of v_r(i), computed on the host in integers. Each rank
// checks every element of its result against S, after filling the result
// buffer with NaN (all bits set) first so that a collective that wrote
// nothing cannot pass. Since v_r(i) >= 1, a rank whose contribution is
// missing or counted twice changes every element.
//
// # Checksums
//
// Each (dtype, size) row carries the SHA-256 of the result bytes the rank
// read back; a run's checksum is the SHA-256 of its nranks and rows. Exact
// results give the same checksum in any run of the same shape, one process
// or one rank per process; ExpectedDigest computes a row's digest on the
// host alone.
//
// # Bandwidth
//
// Time per all-reduce is measured with CUDA events around Iters
// back-to-back out-of-place calls after Warmup calls; across ranks the
// slowest rank counts. algBw = bytes / time and, as NCCL's own tests
// report it, busBw = algBw * 2(n-1)/n, comparable across rank counts (it is
// 0 for one rank, where the all-reduce is a copy).
package ncclcheck
