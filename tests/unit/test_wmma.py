"""Tensor cores through nvcuda::wmma (mma.h): the simulator runs the warp-collective fragment API (ksim_wmma.h), the
CUDA-backend port keeps it (with <mma.h> in its header), and the Metal port maps it onto simdgroup_matrix 8x8 tiles
(translate/wmma.py). Every kernel here is checked three ways: the original in the simulator against numpy, then
both ports against the original (check_port: each port's launch() in the simulator)."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from ksearch_engine.sim import SimError, run_cuda_source
from ksearch_engine.source import find_kernels
from ksearch_engine.translate import translate_kernel
from ksearch_engine.translate.check import check_port

if shutil.which("g++") is None and shutil.which("c++") is None:
    pytest.skip("the CPU simulator needs a C++ compiler", allow_module_level=True)

rng = np.random.default_rng(7)

# one warp per 16x16 tile of C; A (MxK) and B (KxN) row-major in global memory
GEMM = """
#include <mma.h>
using namespace nvcuda;

__global__ void wgemm(const half* A, const half* B, float* C, int M, int N, int K) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) / warpSize;
    int tn = warp % (N / 16), tm = warp / (N / 16);
    if (tm * 16 >= M) return;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(a, A + tm * 16 * K + k, K);
        wmma::load_matrix_sync(b, B + k * N + tn * 16, N);
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + tm * 16 * N + tn * 16, acc, N, wmma::mem_row_major);
}
"""

# D = relu(alpha * A B + beta * C) with the epilogue done on the fragments' elements; C read column-major
EPILOGUE = """
#include <mma.h>
namespace wm = nvcuda::wmma;

__global__ void gemm_bias_relu(const __half* A, const __half* B, const float* Ccol, float* D,
                               int M, int N, int K, float alpha, float beta) {
    int tm = blockIdx.y, tn = blockIdx.x;
    wm::fragment<wm::matrix_a, 16, 16, 16, __half, wm::row_major> a;
    wm::fragment<wm::matrix_b, 16, 16, 16, __half, wm::row_major> b;
    wm::fragment<wm::accumulator, 16, 16, 16, float> acc, c;
    wm::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wm::load_matrix_sync(a, A + tm * 16 * K + k, K);
        wm::load_matrix_sync(b, B + k * N + tn * 16, N);
        wm::mma_sync(acc, a, b, acc);
    }
    wm::load_matrix_sync(c, Ccol + tn * 16 * M + tm * 16, M, wm::mem_col_major);
    for (int i = 0; i < acc.num_elements; i++) {
        float v = alpha * acc.x[i] + beta * c.x[i];
        acc.x[i] = v > 0.0f ? v : 0.0f;
    }
    wm::store_matrix_sync(D + tm * 16 * N + tn * 16, acc, N, wm::mem_row_major);
}
"""

# a 64x64 block of C per block of 8 warps (2x4 tiles), A and B staged in shared memory; B is stored
# column-major (B^T row-major, as a weight matrix), so its fragments are col_major; half accumulators
SHARED_COLB = """
#include <mma.h>
using namespace nvcuda;
#define TILE 64
#define KSTEP 32
#define PAD 8

__global__ void gemm_colb(const half* A, const half* Bt, half* C, int M, int N, int K) {
    __shared__ half As[TILE][KSTEP + PAD];
    __shared__ half Bs[TILE][KSTEP + PAD];   // Bs[n][k]: column n of B
    int warp = threadIdx.x / 32;
    int wr = warp / 2, wc = warp % 2;          // each warp: one row of tiles, two columns
    int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
    wmma::fragment<wmma::accumulator, 16, 16, 16, half> acc[2];
    for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[j], __float2half(0.0f));
    for (int k0 = 0; k0 < K; k0 += KSTEP) {
        for (int i = threadIdx.x; i < TILE * KSTEP; i += blockDim.x) {
            int r = i / KSTEP, kk = i % KSTEP;
            As[r][kk] = A[(row0 + r) * K + k0 + kk];
            Bs[r][kk] = Bt[(col0 + r) * K + k0 + kk];
        }
        __syncthreads();
        for (int kk = 0; kk < KSTEP; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> b;
            wmma::load_matrix_sync(a, &As[wr * 16][kk], KSTEP + PAD);
            for (int j = 0; j < 2; j++) {
                wmma::load_matrix_sync(b, &Bs[(wc * 2 + j) * 16][kk], KSTEP + PAD);
                wmma::mma_sync(acc[j], a, b, acc[j]);
            }
        }
        __syncthreads();
    }
    for (int j = 0; j < 2; j++)
        wmma::store_matrix_sync(C + (row0 + wr * 16) * N + col0 + (wc * 2 + j) * 16, acc[j], N, wmma::mem_row_major);
}
"""

# bfloat16 inputs, float accumulators, a 32x8x16 shape, A read col_major
BF16 = """
#include <mma.h>
#include <cuda_bf16.h>
using namespace nvcuda;

__global__ void bf16_gemm(const __nv_bfloat16* Acol, const __nv_bfloat16* B, float* C, int M, int N, int K) {
    int tm = blockIdx.y, tn = blockIdx.x;
    wmma::fragment<wmma::matrix_a, 32, 8, 16, __nv_bfloat16, wmma::col_major> a;
    wmma::fragment<wmma::matrix_b, 32, 8, 16, __nv_bfloat16, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 32, 8, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(a, Acol + k * M + tm * 32, M);
        wmma::load_matrix_sync(b, B + k * N + tn * 8, N);
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + tm * 32 * N + tn * 8, acc, N, wmma::mem_row_major);
}
"""

# tf32: 16x16x8 fragments of floats, rounded with __float_to_tf32 on their elements
TF32 = """
#include <mma.h>
using namespace nvcuda;

__global__ void tf32_gemm(const float* A, const float* B, float* C, int M, int N, int K) {
    int tm = blockIdx.y, tn = blockIdx.x;
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 8) {
        wmma::load_matrix_sync(a, A + tm * 16 * K + k, K);
        wmma::load_matrix_sync(b, B + k * N + tn * 16, N);
        for (int i = 0; i < a.num_elements; i++) a.x[i] = wmma::__float_to_tf32(a.x[i]);
        for (int i = 0; i < b.num_elements; i++) b.x[i] = wmma::__float_to_tf32(b.x[i]);
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + tm * 16 * N + tn * 16, acc, N, wmma::mem_row_major);
}
"""


def _tf32(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def _check_ports(src: str, kernel: str, args: dict, grid, block):
    parsed = find_kernels(src, "t.cu")
    tr = translate_kernel(parsed, kernel, "t.cu")
    errors = [i for i in tr.report if i.severity == "error" and i.scope == "kernel"]
    assert not errors, errors
    res = check_port(tr.module_text, src, kernel, {"args": args, "grid": grid, "block": block, "shared_mem": 0,
                                                   "template_args": []}, filename="t.cu")
    assert res.original_error is None, res.original_error
    assert res.dialects == {"metal": "passed", "cuda": "passed"}, res.message
    return tr


def _f32(x):
    return x.astype(np.float32)


def test_wmma_gemm_runs_in_the_simulator_and_both_ports_verify():
    M = N = K = 32
    A = rng.standard_normal(M * K).astype(np.float16)
    B = rng.standard_normal(K * N).astype(np.float16)
    args = {"A": A, "B": B, "C": np.zeros(M * N, np.float32), "M": M, "N": N, "K": K}
    out = run_cuda_source(GEMM, "wgemm", grid=(1, 1, 1), block=(128, 1, 1), args=args)
    ref = _f32(A).reshape(M, K) @ _f32(B).reshape(K, N)
    np.testing.assert_allclose(out["C"].reshape(M, N), ref, rtol=1e-5, atol=1e-4)
    tr = _check_ports(GEMM, "wgemm", args, (1, 1, 1), (128, 1, 1))
    # the CUDA-backend port keeps wmma: NVRTC needs <mma.h> and the namespace in its header
    assert "#include <mma.h>" in tr.cuda_header and "using namespace nvcuda;" in tr.cuda_header
    assert "wmma::mma_sync" in tr.cuda_source
    # the Metal port runs on simdgroup matrices; `fragment` (a Metal keyword) is renamed
    assert "simdgroup_multiply_accumulate" in tr.header and "simdgroup_load" in tr.header
    assert "wmma::fragment_<" in tr.metal_source and "wmma::fragment<" not in tr.metal_source
    assert [p["name"] for p in tr.params if p["written"]] == ["C"]    # store_matrix_sync writes C


def test_elementwise_epilogue_over_fragment_elements_and_col_major_accumulator_load():
    M, N, K = 32, 48, 32
    A = rng.standard_normal(M * K).astype(np.float16)
    B = rng.standard_normal(K * N).astype(np.float16)
    Cm = rng.standard_normal((M, N)).astype(np.float32)
    args = {"A": A, "B": B, "Ccol": np.ascontiguousarray(Cm.T).reshape(-1), "D": np.zeros(M * N, np.float32),
            "M": M, "N": N, "K": K, "alpha": 0.5, "beta": -2.0}
    grid, block = (N // 16, M // 16, 1), (32, 1, 1)
    out = run_cuda_source(EPILOGUE, "gemm_bias_relu", grid=grid, block=block, args=args)
    ref = np.maximum(0.5 * (_f32(A).reshape(M, K) @ _f32(B).reshape(K, N)) - 2.0 * Cm, 0)
    np.testing.assert_allclose(out["D"].reshape(M, N), ref, rtol=1e-5, atol=1e-4)
    assert (ref == 0).any() and (ref > 0).any()
    _check_ports(EPILOGUE, "gemm_bias_relu", args, grid, block)


def test_shared_memory_tiles_with_col_major_b_and_half_accumulators():
    M = N = 64
    K = 64
    A = (rng.standard_normal(M * K) * 0.5).astype(np.float16)
    Bt = (rng.standard_normal(N * K) * 0.5).astype(np.float16)     # B^T, row-major: B column-major
    args = {"A": A, "Bt": Bt, "C": np.zeros(M * N, np.float16), "M": M, "N": N, "K": K}
    out = run_cuda_source(SHARED_COLB, "gemm_colb", grid=(1, 1, 1), block=(256, 1, 1), args=args)
    ref = _f32(A).reshape(M, K) @ _f32(Bt).reshape(N, K).T
    np.testing.assert_allclose(_f32(out["C"]).reshape(M, N), ref, rtol=1e-2, atol=2e-2)
    _check_ports(SHARED_COLB, "gemm_colb", args, (1, 1, 1), (256, 1, 1))


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def test_bfloat16_32x8x16_fragments_with_col_major_a():
    M, N, K = 32, 16, 32
    Am = rng.standard_normal((M, K)).astype(np.float32)
    Bm = rng.standard_normal((K, N)).astype(np.float32)
    a_bits, b_bits = _bf16_bits(np.ascontiguousarray(Am.T).reshape(-1)), _bf16_bits(Bm.reshape(-1))
    args = {"Acol": a_bits, "B": b_bits, "C": np.zeros(M * N, np.float32), "M": M, "N": N, "K": K}
    grid, block = (N // 8, M // 32, 1), (32, 1, 1)
    out = run_cuda_source(BF16, "bf16_gemm", grid=grid, block=block, args=args)

    def from_bits(b):
        return (b.astype(np.uint32) << 16).view(np.float32)
    ref = from_bits(a_bits).reshape(K, M).T @ from_bits(b_bits).reshape(K, N)
    np.testing.assert_allclose(out["C"].reshape(M, N), ref, rtol=1e-5, atol=1e-4)
    tr = _check_ports(BF16, "bf16_gemm", args, grid, block)
    assert "ks_tile_io<bfloat>" in tr.header      # bfloat tiles without simdgroup_matrix<bfloat>


def test_a_partial_warp_at_a_wmma_call_names_the_line():
    M = N = K = 32
    args = {"A": np.zeros(M * K, np.float16), "B": np.zeros(K * N, np.float16), "C": np.zeros(M * N, np.float32),
            "M": M, "N": N, "K": K}
    with pytest.raises(SimError) as e:
        run_cuda_source(GEMM, "wgemm", grid=(1, 1, 1), block=(48, 1, 1), args=args)
    assert "warp-collective" in str(e.value) and "16 of 32 lanes" in str(e.value)
    assert e.value.line == GEMM.splitlines().index(
        "        wmma::load_matrix_sync(a, A + tm * 16 * K + k, K);") + 1
    assert "Traceback" not in str(e.value)


def test_metal_port_reports_double_fragments():
    src = """
#include <mma.h>
using namespace nvcuda;
__global__ void dgemm(const double* A, const double* B, double* C) {
    wmma::fragment<wmma::matrix_a, 8, 8, 4, double, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 8, 8, 4, double, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 8, 8, 4, double> c;
    wmma::fill_fragment(c, 0.0);
    wmma::load_matrix_sync(a, A, 4);
    wmma::load_matrix_sync(b, B, 8);
    wmma::mma_sync(c, a, b, c);
    wmma::store_matrix_sync(C, c, 8, wmma::mem_row_major);
}"""
    tr = translate_kernel(find_kernels(src, "t.cu"), "dgemm", "t.cu")
    errs = [i for i in tr.report if i.severity == "error" and "wmma" in i.message]
    assert errs and errs[0].line == 4 and "double" in errs[0].message and errs[0].scope == "kernel"


def test_tf32_16x16x8_fragments_with_float_to_tf32():
    M, N, K = 16, 32, 24
    A = rng.standard_normal(M * K).astype(np.float32)
    B = rng.standard_normal(K * N).astype(np.float32)
    args = {"A": A, "B": B, "C": np.zeros(M * N, np.float32), "M": M, "N": N, "K": K}
    grid, block = (N // 16, M // 16, 1), (32, 1, 1)
    out = run_cuda_source(TF32, "tf32_gemm", grid=grid, block=block, args=args)
    ref = _tf32(A).reshape(M, K).astype(np.float64) @ _tf32(B).reshape(K, N)
    np.testing.assert_allclose(out["C"].reshape(M, N), ref, rtol=1e-5, atol=1e-4)
    assert np.abs(out["C"].reshape(M, N) - A.reshape(M, K).astype(np.float64) @ B.reshape(K, N)).max() > 1e-4
    _check_ports(TF32, "tf32_gemm", args, grid, block)


MLX_CUDA_PRELUDE = """#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("branch", ["toolkit", "ptx"])
def test_cuda_port_compiles_with_mma_h_and_with_its_own_mma_sync_fallback(tmp_path, branch):
    """The CUDA-backend port's header: <mma.h> where crt/mma.h exists, else (NVRTC on the nvidia-cuda-runtime
    wheel's include folder, which lacks crt/) the same API on mma.sync PTX. Both branches compile for sm_90 inside
    the signature MLX generates; on an H200 both matched numpy (see translate/wmma.py)."""
    tr = translate_kernel(find_kernels(BF16 + TF32, "t.cu"), "bf16_gemm", "t.cu")
    tr2 = translate_kernel(find_kernels(BF16 + TF32, "t.cu"), "tf32_gemm", "t.cu")
    header = tr.cuda_header
    if branch == "ptx":
        assert "#if defined(KS_WMMA_TOOLKIT) || defined(KSIM_CUDA)" in header
        header = header.replace("#if defined(KS_WMMA_TOOLKIT) || defined(KSIM_CUDA)", "#if 0")
    body = []
    for name, t in (("k1", tr), ("k2", tr2)):
        params = [f"const {'__nv_bfloat16' if n in ('Acol_in', 'B_in') and t is tr else 'float' if n.endswith('_in') else 'int'}* {n}"
                  for n in t.launch_input_names] + ["int* ks_done"]
        body.append(f"__global__ void {name}({', '.join(params)}) {{\n{t.launch_cuda_source}\n}}")
    text = MLX_CUDA_PRELUDE + header + "\nnamespace mlx::core::cu {\n" + "\n".join(body) + "\n}\n"
    f = tmp_path / "port.cu"
    f.write_text(text)
    r = subprocess.run(["nvcc", "-std=c++17", "-arch=sm_90", "-cubin", "-o", str(tmp_path / "port.cubin"), str(f)],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]


def test_a_program_using_wmma_is_captured_and_its_kernel_verified_on_the_captured_launch(tmp_path):
    """The captured path: the program's main() runs on the CPU runtime (ksim_host.h with ksim_wmma.h), its launch is
    recorded, and both ports are checked on it (the capture used to stub every wmma kernel)."""
    from ksearch_engine.portfile import port_file
    prog = GEMM + """
#include <cstdlib>
int main() {
    const int M = 32, N = 32, K = 32;
    half ha[M * K], hb[K * N];
    for (int i = 0; i < M * K; i++) ha[i] = __float2half((float)(rand() % 7) - 3.0f);
    for (int i = 0; i < K * N; i++) hb[i] = __float2half((float)(rand() % 5) - 2.0f);
    half *a, *b; float* c;
    cudaMalloc(&a, sizeof ha); cudaMalloc(&b, sizeof hb); cudaMalloc(&c, M * N * sizeof(float));
    cudaMemcpy(a, ha, sizeof ha, cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb, sizeof hb, cudaMemcpyHostToDevice);
    wgemm<<<1, 128>>>(a, b, c, M, N, K);
    cudaDeviceSynchronize();
    return 0;
}
"""
    src = tmp_path / "wprog.cu"
    src.write_text(prog)
    report = port_file(src, write=False)
    (v,) = report.kernels
    assert v.status == "verified" and v.workload == "captured", v.reason


def test_lanes_of_a_warp_passing_different_tiles_are_reported():
    """A 16x16 block: each warp spans two threadIdx.y rows, which pick different tiles here: undefined on a GPU."""
    src = GEMM.replace("int warp = (blockIdx.x * blockDim.x + threadIdx.x) / warpSize;",
                       "int warp = threadIdx.y;")
    M = N = K = 32
    args = {"A": np.zeros(M * K, np.float16), "B": np.zeros(K * N, np.float16), "C": np.zeros(M * N, np.float32),
            "M": M, "N": N, "K": K}
    with pytest.raises(SimError) as e:
        run_cuda_source(src, "wgemm", grid=(1, 1, 1), block=(16, 16, 1), args=args)
    assert "lanes pass different arguments" in str(e.value) and e.value.line is not None


def test_names_used_after_using_namespace_wmma_and_a_col_major_store():
    src = """
#include <mma.h>
using namespace nvcuda::wmma;
__global__ void bare(const half* A, const half* B, float* C) {
    fragment<matrix_a, 16, 16, 16, half, row_major> a;
    fragment<matrix_b, 16, 16, 16, half, col_major> b;
    fragment<accumulator, 16, 16, 16, float> acc;
    fill_fragment(acc, 0.0f);
    load_matrix_sync(a, A, 16);
    load_matrix_sync(b, B, 16);
    mma_sync(acc, a, b, acc);
    store_matrix_sync(C, acc, 16, mem_col_major);
}"""
    A = rng.standard_normal(256).astype(np.float16)
    B = rng.standard_normal(256).astype(np.float16)
    args = {"A": A, "B": B, "C": np.zeros(256, np.float32)}
    out = run_cuda_source(src, "bare", grid=(1, 1, 1), block=(32, 1, 1), args=args)
    ref = _f32(A).reshape(16, 16) @ _f32(B).reshape(16, 16).T      # B col-major: B[k][n] = B[n * 16 + k]
    np.testing.assert_allclose(out["C"].reshape(16, 16).T, ref, rtol=1e-5, atol=1e-4)   # C col-major
    tr = _check_ports(src, "bare", args, (1, 1, 1), (32, 1, 1))
    assert "using namespace nvcuda::wmma;" in tr.header and "using namespace nvcuda::wmma;" in tr.cuda_header


def test_device_helpers_taking_fragments_by_reference():
    src = """
#include <mma.h>
using namespace nvcuda;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> Acc;

__device__ void tile_mma(Acc& acc, const half* A, const half* B, int K, int N) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b;
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(a, A + k, K);
        wmma::load_matrix_sync(b, B + k * N, N);
        wmma::mma_sync(acc, a, b, acc);
    }
}
__device__ void scaled_store(float* C, const Acc& acc, float s, int N) {
    Acc t;
    for (int i = 0; i < t.num_elements; i++) t.x[i] = acc.x[i] * s;
    wmma::store_matrix_sync(C, t, N, wmma::mem_row_major);
}
__global__ void helpers(const half* A, const half* B, float* C, int N, int K) {
    int tm = blockIdx.y, tn = blockIdx.x;
    Acc acc;
    wmma::fill_fragment(acc, 0.0f);
    tile_mma(acc, A + tm * 16 * K, B + tn * 16, K, N);
    scaled_store(C + tm * 16 * N + tn * 16, acc, 3.0f, N);
}"""
    M, N, K = 16, 32, 32
    A = rng.standard_normal(M * K).astype(np.float16)
    B = rng.standard_normal(K * N).astype(np.float16)
    args = {"A": A, "B": B, "C": np.zeros(M * N, np.float32), "N": N, "K": K}
    grid, block = (N // 16, M // 16, 1), (32, 1, 1)
    out = run_cuda_source(src, "helpers", grid=grid, block=block, args=args)
    np.testing.assert_allclose(out["C"].reshape(M, N), 3 * _f32(A).reshape(M, K) @ _f32(B).reshape(K, N),
                               rtol=1e-5, atol=1e-4)
    tr = _check_ports(src, "helpers", args, grid, block)
    assert "thread Acc& acc" in tr.header or "thread wmma::fragment_<" in tr.header
