// GELU activation, tanh approximation (elementwise).
//   gelu(x) = 0.5 * x * (1 + tanh( sqrt(2/pi) * (x + 0.044715 * x^3) ))
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu_tanh(float x) {
    const float k_sqrt_2_over_pi = 0.7978845608028654f;
    const float k_cubic = 0.044715f;
    float inner = k_sqrt_2_over_pi * (x + k_cubic * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
}

__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = gelu_tanh(x[i]);
    }
}

void gelu(const float* x, float* y, int n, cudaStream_t stream) {
    const int threads = 256;
    const int blocks = (n + threads - 1) / threads;
    gelu_kernel<<<blocks, threads, 0, stream>>>(x, y, n);
}
