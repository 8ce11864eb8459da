// elementwise.cu: small in-place kernels used to check that a captured CUDA
// graph replays the same work as plain launches.

// ew_affine: x[i] = a*x[i] + b
extern "C" __global__ void ew_affine(float* x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = a * x[i] + b;
}

// ew_square: x[i] = x[i]*x[i]
extern "C" __global__ void ew_square(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * x[i];
}

// ew_accumulate: y[i] += x[i]
extern "C" __global__ void ew_accumulate(float* __restrict__ y, const float* __restrict__ x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}
