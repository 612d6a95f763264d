// y = a*x + y over n floats, one element per thread.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}

static void run(int n, float a) {
    float *hx = (float*)malloc(n * sizeof(float)), *hy = (float*)malloc(n * sizeof(float));
    for (int i = 0; i < n; ++i) { hx[i] = 0.5f * (i % 17) - 3.0f; hy[i] = 0.25f * (i % 5); }
    float *dx, *dy;
    cudaMalloc(&dx, n * sizeof(float));
    cudaMalloc(&dy, n * sizeof(float));
    cudaMemcpy(dx, hx, n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dy, hy, n * sizeof(float), cudaMemcpyHostToDevice);
    int block = 256;
    saxpy<<<(n + block - 1) / block, block>>>(n, a, dx, dy);
    cudaMemcpy(hy, dy, n * sizeof(float), cudaMemcpyDeviceToHost);
    printf("n=%d y[1]=%f\n", n, hy[1]);
    cudaFree(dx); cudaFree(dy); free(hx); free(hy);
}

int main() {
    run(1001, 2.0f);
    run(4096, -0.5f);
    run(1 << 16, 1.5f);
    return 0;
}
