// attn_fwd_f32.cu: a plain fp32 attention forward pass with online softmax,
//
//   O[b,i,:] = sum_j softmax_j(scale * Q[b,i,:].K[b,j,:]) V[b,j,:]   (j <= i when causal)
//
// for Q [BH, Sq, D], K and V [BH, Sk, D], O [BH, Sq, D], all contiguous.
// One thread owns one query row; K/V tiles of TILE_N rows are staged in
// shared memory by the whole block. It is the reference-shaped kernel used
// to time the kernel cache (a template with loops, shared memory and an
// online softmax, like the generated attention kernels), not a fast kernel.
// Grid: (ceil(Sq/BLOCK_M), BH); block: BLOCK_M threads.

#define BLOCK_M 64
#define TILE_N 32

template <int D>
__device__ void attn_fwd(const float* __restrict__ q, const float* __restrict__ k,
                         const float* __restrict__ v, float* __restrict__ o,
                         int sq, int sk, float scale, int causal) {
    __shared__ float ks[TILE_N][D];
    __shared__ float vs[TILE_N][D];
    const int bh = blockIdx.y;
    const int row = blockIdx.x * BLOCK_M + threadIdx.x;
    const bool active = row < sq;
    const float* qb = q + (size_t)bh * sq * D;
    const float* kb = k + (size_t)bh * sk * D;
    const float* vb = v + (size_t)bh * sk * D;

    float qr[D];
    float acc[D];
#pragma unroll
    for (int d = 0; d < D; d++) {
        qr[d] = active ? qb[(size_t)row * D + d] * scale : 0.0f;
        acc[d] = 0.0f;
    }
    float m = __int_as_float(0xff800000);  // -inf
    float l = 0.0f;

    int kv_end = sk;
    if (causal) {
        int last = min(sq, (int)(blockIdx.x + 1) * BLOCK_M) - 1;
        kv_end = min(sk, last + 1);
    }
    for (int n0 = 0; n0 < kv_end; n0 += TILE_N) {
        for (int t = threadIdx.x; t < TILE_N * D; t += BLOCK_M) {
            int r = t / D, c = t % D;
            int j = n0 + r;
            ks[r][c] = j < sk ? kb[(size_t)j * D + c] : 0.0f;
            vs[r][c] = j < sk ? vb[(size_t)j * D + c] : 0.0f;
        }
        __syncthreads();
        if (active) {
            for (int r = 0; r < TILE_N; r++) {
                int j = n0 + r;
                if (j >= sk || (causal && j > row)) break;
                float s = 0.0f;
#pragma unroll
                for (int d = 0; d < D; d++) s += qr[d] * ks[r][d];
                float mn = fmaxf(m, s);
                float corr = __expf(m - mn);
                float p = __expf(s - mn);
                l = l * corr + p;
#pragma unroll
                for (int d = 0; d < D; d++) acc[d] = acc[d] * corr + p * vs[r][d];
                m = mn;
            }
        }
        __syncthreads();
    }
    if (active) {
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        float* ob = o + (size_t)bh * sq * D + (size_t)row * D;
#pragma unroll
        for (int d = 0; d < D; d++) ob[d] = acc[d] * inv;
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK_M)
attn_fwd_f32_d64(const float* q, const float* k, const float* v, float* o, int sq, int sk, float scale, int causal) {
    attn_fwd<64>(q, k, v, o, sq, sk, scale, causal);
}

extern "C" __global__ void __launch_bounds__(BLOCK_M)
attn_fwd_f32_d128(const float* q, const float* k, const float* v, float* o, int sq, int sk, float scale, int causal) {
    attn_fwd<128>(q, k, v, o, sq, sk, scale, causal);
}
