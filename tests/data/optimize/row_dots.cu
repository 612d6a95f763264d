// Dot products of row pairs (written for ksearch's tests): each block takes rows in a grid-stride loop over the
// grid, its threads sum strided products into shared memory and a halving tree finishes the row. The program
// launches fewer blocks than rows, as programs sized for an older GPU do.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void row_dots(float* out, const float* a, const float* b, int rows, int cols) {
  __shared__ float acc[128];
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += a[r * cols + c] * b[r * cols + c];
    acc[threadIdx.x] = s;
    for (int half = blockDim.x / 2; half > 0; half >>= 1) {
      __syncthreads();
      if (threadIdx.x < half) acc[threadIdx.x] += acc[threadIdx.x + half];
    }
    __syncthreads();
    if (threadIdx.x == 0) out[r] = acc[0];
    __syncthreads();
  }
}

int main() {
  const int rows = 24, cols = 300;
  float *ha = new float[rows * cols], *hb = new float[rows * cols], ho[rows];
  for (int i = 0; i < rows * cols; i++) { ha[i] = (float)(i % 13) / 13.0f - 0.5f; hb[i] = (float)(i % 7) / 7.0f; }
  float *a, *b, *o;
  cudaMalloc(&a, sizeof(float) * rows * cols);
  cudaMalloc(&b, sizeof(float) * rows * cols);
  cudaMalloc(&o, sizeof(float) * rows);
  cudaMemcpy(a, ha, sizeof(float) * rows * cols, cudaMemcpyHostToDevice);
  cudaMemcpy(b, hb, sizeof(float) * rows * cols, cudaMemcpyHostToDevice);
  row_dots<<<4, 128>>>(o, a, b, rows, cols);
  cudaMemcpy(ho, o, sizeof(float) * rows, cudaMemcpyDeviceToHost);
  printf("row 0: %f\n", ho[0]);
  cudaFree(a); cudaFree(b); cudaFree(o);
  delete[] ha; delete[] hb;
  return 0;
}
