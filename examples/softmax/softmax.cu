// Row softmax: y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)).
// One block per row; each thread strides over the row, then warp reductions
// (butterfly shuffles) and a small shared array combine the per-warp results.
#include <cuda_runtime.h>
#include <math.h>

#define FULL_MASK 0xffffffffu

__device__ float warp_reduce_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));
    }
    return v;
}

__device__ float warp_reduce_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(FULL_MASK, v, offset);
    }
    return v;
}

__global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ y,
                               int rows, int cols) {
    __shared__ float partial[32];
    const int row = blockIdx.x;
    const int tid = threadIdx.x;
    const int lane = tid % 32;
    const int warp = tid / 32;
    const int num_warps = blockDim.x / 32;
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;

    float m = -INFINITY;
    for (int c = tid; c < cols; c += blockDim.x) {
        m = fmaxf(m, xr[c]);
    }
    m = warp_reduce_max(m);
    if (lane == 0) partial[warp] = m;
    __syncthreads();
    m = (lane < num_warps) ? partial[lane] : -INFINITY;
    m = warp_reduce_max(m);
    __syncthreads();  // everyone has read partial[] before it is reused

    float s = 0.0f;
    for (int c = tid; c < cols; c += blockDim.x) {
        s += __expf(xr[c] - m);
    }
    s = warp_reduce_sum(s);
    if (lane == 0) partial[warp] = s;
    __syncthreads();
    s = (lane < num_warps) ? partial[lane] : 0.0f;
    s = warp_reduce_sum(s);

    const float inv = 1.0f / s;
    for (int c = tid; c < cols; c += blockDim.x) {
        yr[c] = __expf(xr[c] - m) * inv;
    }
}

void softmax(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    const int threads = 256;
    softmax_kernel<<<rows, threads, 0, stream>>>(x, y, rows, cols);
}
