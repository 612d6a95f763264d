// A block-wise maximum and sum (written for ksearch's tests): each block reduces its slice in shared memory
// with the classic halving tree; the host program launches both kernels at two block sizes.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void block_max(const float* x, float* out, int n) {
  __shared__ float best[256];
  int t = threadIdx.x;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  best[t] = i < n ? x[i] : -1e30f;
  __syncthreads();
  for (unsigned int half = blockDim.x / 2; half > 0; half >>= 1) {
    if (t < half) best[t] = fmaxf(best[t], best[t + half]);
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = best[0];
}

__global__ void block_sum(const float* x, float* out, int n) {
  extern __shared__ float part[];
  unsigned int tid = threadIdx.x;
  unsigned int i = blockIdx.x * blockDim.x * 2 + threadIdx.x;
  float v = 0.0f;
  if (i < n) v = x[i];
  if (i + blockDim.x < n) v += x[i + blockDim.x];
  part[tid] = v;
  __syncthreads();
  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) {
      part[tid] += part[tid + s];
    }
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = part[0];
}

int main() {
  const int n = 5000;
  float* h = new float[n];
  for (int i = 0; i < n; i++) h[i] = (float)((i * 37) % 101) / 7.0f - 3.0f;
  float *dx, *dm, *ds;
  cudaMalloc(&dx, n * sizeof(float));
  cudaMalloc(&dm, 64 * sizeof(float));
  cudaMalloc(&ds, 64 * sizeof(float));
  cudaMemcpy(dx, h, n * sizeof(float), cudaMemcpyHostToDevice);
  for (int threads = 128; threads <= 256; threads *= 2) {
    int blocks = (n + threads - 1) / threads;
    block_max<<<blocks, threads>>>(dx, dm, n);
    block_sum<<<(n + 2 * threads - 1) / (2 * threads), threads, threads * sizeof(float)>>>(dx, ds, n);
  }
  float r[64];
  cudaMemcpy(r, dm, sizeof(r), cudaMemcpyDeviceToHost);
  printf("max of block 0: %f\n", r[0]);
  return 0;
}
