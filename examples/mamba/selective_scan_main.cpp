// A test program for selective_scan.cu (host code only: a .cpp, as in a project that builds kernels apart), as a user's project would have one: Mamba-130m-like sizes
// (dim 1536, 16 states), a short prompt. `ksearch optimize selective_scan.cu` runs it on the CPU to capture
// the kernel's launch (shapes, scalars and buffer contents), which becomes the task's workload.
#include <cuda_runtime.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#ifndef SEQLEN
#define SEQLEN 256
#endif
#ifndef DIM
#define DIM 1536
#endif
#define NSTATE 16

void selective_scan(const float* u, const float* delta, const float* A, const float* Bm,
                    const float* Cm, const float* Dskip, float* y, int batch, int seqlen, int dim,
                    cudaStream_t stream);

static float uniform(float lo, float hi) { return lo + (hi - lo) * (float)rand() / (float)RAND_MAX; }

int main() {
    const int batch = 1, seqlen = SEQLEN, dim = DIM;
    const size_t n_x = (size_t)batch * seqlen * dim, n_bc = (size_t)batch * seqlen * NSTATE;
    std::vector<float> u(n_x), delta(n_x), A((size_t)dim * NSTATE), B(n_bc), C(n_bc), D(dim), y(n_x);
    srand(7);
    for (auto& v : u) v = uniform(-1.f, 1.f);
    for (auto& v : delta) v = uniform(0.001f, 0.1f);           // softplus(dt) range
    for (int d = 0; d < dim; ++d)
        for (int n = 0; n < NSTATE; ++n) A[(size_t)d * NSTATE + n] = -(float)(n + 1);   // S4D-real init
    for (auto& v : B) v = uniform(-1.f, 1.f);
    for (auto& v : C) v = uniform(-1.f, 1.f);
    for (auto& v : D) v = 1.f;
    float *du, *ddelta, *dA, *dB, *dC, *dD, *dy;
    cudaMalloc(&du, n_x * 4); cudaMalloc(&ddelta, n_x * 4); cudaMalloc(&dA, A.size() * 4);
    cudaMalloc(&dB, n_bc * 4); cudaMalloc(&dC, n_bc * 4); cudaMalloc(&dD, dim * 4); cudaMalloc(&dy, n_x * 4);
    cudaMemcpy(du, u.data(), n_x * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(ddelta, delta.data(), n_x * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dA, A.data(), A.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B.data(), n_bc * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dC, C.data(), n_bc * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dD, D.data(), dim * 4, cudaMemcpyHostToDevice);
    selective_scan(du, ddelta, dA, dB, dC, dD, dy, batch, seqlen, dim, 0);
    cudaMemcpy(y.data(), dy, n_x * 4, cudaMemcpyDeviceToHost);
    double s = 0;
    for (float v : y) s += std::fabs(v);
    printf("selective_scan: batch %d seqlen %d dim %d, mean |y| = %.6f\n", batch, seqlen, dim, s / n_x);
    cudaFree(du); cudaFree(ddelta); cudaFree(dA); cudaFree(dB); cudaFree(dC); cudaFree(dD); cudaFree(dy);
    return 0;
}
