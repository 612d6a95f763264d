// Histogram of byte values into 256 bins: per-block counts in shared memory, then one atomic per bin.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define NBINS 256

__global__ void histogram(const unsigned char* data, int n, unsigned int* bins) {
    __shared__ unsigned int local[NBINS];
    for (int b = threadIdx.x; b < NBINS; b += blockDim.x) local[b] = 0;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&local[data[i]], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < NBINS; b += blockDim.x) {
        if (local[b] != 0) atomicAdd(&bins[b], local[b]);
    }
}

static void run(int n) {
    unsigned char* h = (unsigned char*)malloc(n);
    for (int i = 0; i < n; ++i) h[i] = (unsigned char)((i * 37 + i / 7) & 255);
    unsigned char* d;
    unsigned int* bins;
    cudaMalloc(&d, n);
    cudaMalloc(&bins, NBINS * sizeof(unsigned int));
    cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);
    cudaMemset(bins, 0, NBINS * sizeof(unsigned int));
    int block = 256;
    histogram<<<(n + block - 1) / block, block>>>(d, n, bins);
    unsigned int hb[NBINS];
    cudaMemcpy(hb, bins, sizeof(hb), cudaMemcpyDeviceToHost);
    printf("n=%d bins[0]=%u\n", n, hb[0]);
    cudaFree(d); cudaFree(bins); free(h);
}

int main() {
    run(3000);
    run(1 << 15);
    return 0;
}
