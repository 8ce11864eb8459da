// saxpy.cu: y = a*x + y. The smallest kernel that exercises the whole path:
// NVRTC compile, module load, argument passing, launch.
extern "C" __global__ void saxpy(float a, const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}
