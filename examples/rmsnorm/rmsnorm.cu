// RMSNorm: y[r, c] = x[r, c] * rsqrt(mean_c(x[r, :]^2) + eps) * w[c].
// One block per row; sum of squares reduced with shuffle-down inside each warp,
// then across warps through dynamic shared memory (one float per warp).
#include <cuda_runtime.h>

__device__ float warp_sum_down(float v) {
    for (int offset = warpSize / 2; offset > 0; offset /= 2) {
        v += __shfl_down_sync(0xffffffff, v, offset);
    }
    return v;  // lane 0 holds the warp's total
}

__global__ void rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                               float* __restrict__ y, int rows, int cols, float eps) {
    extern __shared__ float warp_sums[];
    const int row = blockIdx.x;
    const int tid = threadIdx.x;
    const int lane = tid % warpSize;
    const int warp = tid / warpSize;
    const int num_warps = (blockDim.x + warpSize - 1) / warpSize;

    float ss = 0.0f;
    for (int c = tid; c < cols; c += blockDim.x) {
        float v = x[row * cols + c];
        ss += v * v;
    }
    ss = warp_sum_down(ss);
    if (lane == 0) warp_sums[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        float t = (lane < num_warps) ? warp_sums[lane] : 0.0f;
        t = warp_sum_down(t);
        if (lane == 0) warp_sums[0] = rsqrtf(t / (float)cols + eps);
    }
    __syncthreads();
    const float scale = warp_sums[0];
    for (int c = tid; c < cols; c += blockDim.x) {
        y[row * cols + c] = __ldg(&x[row * cols + c]) * scale * w[c];
    }
}

void rmsnorm(const float* x, const float* w, float* y, int rows, int cols, float eps,
             cudaStream_t stream) {
    const int threads = 128;
    const size_t smem = (threads / 32) * sizeof(float);
    rmsnorm_kernel<<<rows, threads, smem, stream>>>(x, w, y, rows, cols, eps);
}
