// A small CUDA program with several kernels, written for ksearch's tests (not from any collection):
// an in-place AXPY, a shared-memory block sum, a 64-bin histogram with atomics on a buffer the host zeroed,
// a kernel never launched by main(), and one whose inline PTX cannot be ported.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define BLOCK 128
#define BINS 64

__global__ void axpy_inplace(int n, float a, const float* __restrict__ x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void block_sum(const float* in, float* partial, int n) {
    __shared__ float buf[BLOCK];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    buf[threadIdx.x] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = buf[0];
}

__global__ void histogram64(const unsigned char* data, unsigned int* bins, int n) {
    int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        atomicAdd(&bins[data[i] % BINS], 1u);
}

__global__ void scale_unused(float* v, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] *= s;
}

__global__ void lane_id_ptx(int* out) {
    int lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    out[threadIdx.x] = lane;
}

static int check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) { fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e)); exit(1); }
    return 0;
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    size_t fb = n * sizeof(float);
    float *hx = (float*)malloc(fb), *hy = (float*)malloc(fb);
    unsigned char* hd = (unsigned char*)malloc(n);
    for (int i = 0; i < n; ++i) { hx[i] = 0.001f * i; hy[i] = 1.0f - 0.0005f * i; hd[i] = (unsigned char)(i * 7 + 3); }
    float *dx, *dy, *dp;
    unsigned char* dd;
    unsigned int* db;
    int blocks = (n + BLOCK - 1) / BLOCK;
    check(cudaMalloc(&dx, fb), "x");
    check(cudaMalloc(&dy, fb), "y");
    check(cudaMalloc(&dp, blocks * sizeof(float)), "partial");
    check(cudaMalloc(&dd, n), "data");
    check(cudaMalloc(&db, BINS * sizeof(unsigned int)), "bins");
    cudaMemcpy(dx, hx, fb, cudaMemcpyHostToDevice);
    cudaMemcpy(dy, hy, fb, cudaMemcpyHostToDevice);
    cudaMemcpy(dd, hd, n, cudaMemcpyHostToDevice);
    cudaMemset(db, 0, BINS * sizeof(unsigned int));

    axpy_inplace<<<blocks, BLOCK>>>(n, 2.0f, dx, dy);
    block_sum<<<blocks, BLOCK>>>(dy, dp,
                                 n);
    histogram64<<<4, BLOCK>>>(dd, db, n);
    check(cudaGetLastError(), "launch");
    check(cudaDeviceSynchronize(), "sync");

    float* hp = (float*)malloc(blocks * sizeof(float));
    unsigned int hb[BINS];
    cudaMemcpy(hp, dp, blocks * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(hb, db, sizeof(hb), cudaMemcpyDeviceToHost);
    double total = 0;
    for (int b = 0; b < blocks; ++b) total += hp[b];
    unsigned int count = 0;
    for (int b = 0; b < BINS; ++b) count += hb[b];
    printf("sum %.3f count %u\n", total, count);
    cudaFree(dx); cudaFree(dy); cudaFree(dp); cudaFree(dd); cudaFree(db);
    free(hx); free(hy); free(hd); free(hp);
    return count == (unsigned int)n ? 0 : 1;
}
