"""Whole kernels of the kinds the search writes, run on the CPU simulator and checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from ksearch_engine.sim import SimError, run_cuda_source, run_mlx_kernel

rng = np.random.default_rng(1)

METAL_SOFTMAX = """
    // one threadgroup per row; simdgroup reductions, then across simdgroups through threadgroup memory
    threadgroup float partial[32];
    uint row = threadgroup_position_in_grid.x;
    uint lid = thread_position_in_threadgroup.x;
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    uint nsg = (threads_per_threadgroup.x + 31) / 32;
    const device T* xr = x + row * N;

    float m = -INFINITY;
    for (uint c = lid; c < N; c += threads_per_threadgroup.x) m = max(m, float(xr[c]));
    m = simd_max(m);
    if (lane == 0) partial[sg] = m;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    m = lane < nsg ? partial[lane] : -INFINITY;
    m = simd_max(m);
    threadgroup_barrier(mem_flags::mem_threadgroup);

    float s = 0.0f;
    for (uint c = lid; c < N; c += threads_per_threadgroup.x) s += fast::exp(float(xr[c]) - m);
    s = simd_sum(s);
    if (lane == 0) partial[sg] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    s = lane < nsg ? partial[lane] : 0.0f;
    s = simd_sum(s);

    for (uint c = lid; c < N; c += threads_per_threadgroup.x)
        out[row * N + c] = static_cast<T>(fast::exp(float(xr[c]) - m) / s);
"""


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-6), ("float16", 2e-3)])
def test_metal_softmax_rows(dtype, tol):
    rows, n = 6, 1000
    x = (rng.standard_normal((rows, n)) * 3).astype(dtype)
    (out,) = run_mlx_kernel("metal", "softmax", ["x"], ["out"], METAL_SOFTMAX, "", [x],
                            [("T", dtype), ("N", n)], (rows * 256, 1, 1), (256, 1, 1), [x.shape], [dtype])
    xf = x.astype(np.float64)
    e = np.exp(xf - xf.max(1, keepdims=True))
    np.testing.assert_allclose(out.astype(np.float64), e / e.sum(1, keepdims=True), atol=tol, rtol=tol * 10)


CUDA_RMSNORM = """
    namespace cg = cooperative_groups;
    auto block = cg::this_thread_block();
    auto warp = cg::tiled_partition<32>(block);
    __shared__ float warp_sums[32];
    int row = blockIdx.x;
    float acc = 0.f;
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float v = static_cast<float>(x[row * D + c]);
        acc += v * v;
    }
    acc = cg::reduce(warp, acc, cg::plus<float>());
    if (warp.thread_rank() == 0) warp_sums[warp.meta_group_rank()] = acc;
    block.sync();
    if (warp.meta_group_rank() == 0) {
        float t = warp.thread_rank() < warp.meta_group_size() ? warp_sums[warp.thread_rank()] : 0.f;
        t = cg::reduce(warp, t, cg::plus<float>());
        if (warp.thread_rank() == 0) warp_sums[0] = rsqrtf(t / D + 1e-5f);
    }
    block.sync();
    float scale = warp_sums[0];
    for (int c = threadIdx.x; c < D; c += blockDim.x)
        out[row * D + c] = static_cast<T>(static_cast<float>(x[row * D + c]) * scale * static_cast<float>(w[c]));
"""


def test_cuda_rmsnorm_bfloat16_with_cooperative_groups():
    rows, d = 4, 768
    x = rng.standard_normal((rows, d)).astype(np.float32)
    w = rng.standard_normal(d).astype(np.float32)
    (out,) = run_mlx_kernel("cuda", "rms", ["x", "w"], ["out"], CUDA_RMSNORM, "", [x, w],
                            [("T", "bfloat16"), ("D", d)], (rows * 128, 1, 1), (128, 1, 1), [x.shape],
                            ["bfloat16"], input_dtypes=["bfloat16", "bfloat16"])
    xb = _bf16(x)
    wb = _bf16(w)
    expect = xb / np.sqrt((xb.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-5) * wb
    np.testing.assert_allclose(out, expect, rtol=2e-2, atol=2e-2)


def _bf16(a):
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


METAL_SCAN = """
    // inclusive prefix sum of one row per threadgroup, 4 elements per thread
    threadgroup float sg_totals[32];
    uint row = threadgroup_position_in_grid.y;
    uint lid = thread_index_in_threadgroup;
    uint lane = thread_index_in_simdgroup, sg = simdgroup_index_in_threadgroup;
    float4 v = ((const device float4*)(x + row * N))[lid];
    v.y += v.x; v.z += v.y; v.w += v.z;
    float before = simd_prefix_exclusive_sum(v.w);
    if (lane == 31) sg_totals[sg] = before + v.w;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
        float t = lane < simdgroups_per_threadgroup ? sg_totals[lane] : 0.0f;
        sg_totals[lane] = simd_prefix_exclusive_sum(t);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    v += before + sg_totals[sg];
    ((device float4*)(out + row * N))[lid] = v;
"""


def test_metal_blocked_scan():
    rows, n = 3, 1024
    x = rng.random((rows, n)).astype(np.float32)
    (out,) = run_mlx_kernel("metal", "scan", ["x"], ["out"], METAL_SCAN, "", [x], [("N", n)],
                            (n // 4, rows, 1), (n // 4, 1, 1), [x.shape], ["float32"])
    np.testing.assert_allclose(out, np.cumsum(x, 1), rtol=1e-4)


CUDA_MATMUL_FILE = r"""
#include <cuda_runtime.h>
#include <cstdio>
#define TILE 16

__global__ void matmul(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[threadIdx.y][threadIdx.x] = (row < M && k0 + threadIdx.x < K) ? A[row * K + k0 + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (col < N && k0 + threadIdx.y < K) ? B[(k0 + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

int main() {
    int M = 50, N = 40, K = 70;
    float *A, *B, *C;
    cudaMalloc(&A, M * K * sizeof(float));
    cudaMalloc(&B, K * N * sizeof(float));
    cudaMalloc(&C, M * N * sizeof(float));
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    matmul<<<grid, block>>>(A, B, C, M, N, K);
    cudaDeviceSynchronize();
    return 0;
}
"""


def test_cuda_tiled_matmul_file():
    m, n, k = 50, 40, 70
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    out = run_cuda_source(CUDA_MATMUL_FILE, "matmul", grid=(3, 4, 1), block=(16, 16, 1),
                          args={"A": a, "B": b, "C": np.zeros((m, n), np.float32), "M": m, "N": n, "K": k})
    np.testing.assert_allclose(out["C"], a @ b, rtol=1e-4, atol=1e-4)


def test_tiled_matmul_missing_second_barrier_is_caught():
    bad = CUDA_MATMUL_FILE.replace(
        "acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];\n        __syncthreads();",
        "acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];")
    assert bad != CUDA_MATMUL_FILE
    m, n, k = 50, 40, 70
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    with pytest.raises(SimError) as e:
        run_cuda_source(bad, "matmul", grid=(3, 4, 1), block=(16, 16, 1),
                        args={"A": a, "B": b, "C": np.zeros((m, n), np.float32), "M": m, "N": n, "K": k})
    assert e.value.kind == "race"
