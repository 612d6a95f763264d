"""The CPU simulator runs Metal and CUDA kernel sources with real GPU semantics.

Each test is a small kernel as a user would write it, checked against numpy: barriers are real
(remove one and the answer is wrong), warps exchange values in lockstep, faults, deadlocks and compile
errors come back as SimError pointing at the kernel's own lines.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from ksearch_engine.sim import SimError, run_cuda_source, run_mlx_kernel

rng = np.random.default_rng(0)


def metal(name, inputs, outputs, source, args, grid, tg, **kw):
    shapes = [s for _, s, _ in outputs]
    dtypes = [d for _, _, d in outputs]
    return run_mlx_kernel("metal", name, [n for n, _ in inputs], [n for n, _, _ in outputs], source,
                          kw.pop("header", ""), [a for _, a in inputs], args, grid, tg, shapes,
                          dtypes, **kw)


def cuda(name, inputs, outputs, source, args, grid, tg, **kw):
    shapes = [s for _, s, _ in outputs]
    dtypes = [d for _, _, d in outputs]
    return run_mlx_kernel("cuda", name, [n for n, _ in inputs], [n for n, _, _ in outputs], source,
                          kw.pop("header", ""), [a for _, a in inputs], args, grid, tg, shapes,
                          dtypes, **kw)


# --- elementwise -----------------------------------------------------------------------------------
def test_metal_elementwise_matches_numpy():
    x = rng.standard_normal(1000).astype(np.float32)
    src = """
        uint i = thread_position_in_grid.x;
        if (i < inp_shape[0]) out[i] = metal::exp(inp[i]) * fast::tanh(inp[i]) + max(inp[i], 0.0f);
    """
    (out,) = metal("ew", [("inp", x)], [("out", x.shape, "float32")], src, [], (1024, 1, 1), (256, 1, 1))
    np.testing.assert_allclose(out, np.exp(x) * np.tanh(x) + np.maximum(x, 0), rtol=1e-5, atol=1e-6)


def test_cuda_elementwise_with_template_type_and_half():
    x = rng.standard_normal(777).astype(np.float16)
    src = """
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n_elems) out[i] = static_cast<T>(__expf(static_cast<float>(inp[i])) * SCALE);
    """
    (out,) = cuda("ewh", [("inp", x)], [("out", x.shape, "float16")], src,
                  [("T", "float16"), ("n_elems", 777), ("SCALE", 2)], (777, 1, 1), (128, 1, 1))
    np.testing.assert_allclose(out.astype(np.float32), (np.exp(x.astype(np.float32)) * 2),
                               rtol=2e-3, atol=1e-3)


def test_metal_partial_threadgroup_and_2d_grid():
    # grid 10x7 threads in 4x4 threadgroups: edge threadgroups are smaller, as with dispatchThreads
    src = """
        uint2 p = uint2(thread_position_in_grid.x, thread_position_in_grid.y);
        out[p.y * 10 + p.x] = float(threads_per_threadgroup.x * 100 + threads_per_threadgroup.y);
    """
    (out,) = metal("part", [("dummy", np.zeros(1, np.float32))], [("out", (7, 10), "float32")], src,
                   [], (10, 7, 1), (4, 4, 1))
    wx = np.array([4, 4, 4, 4, 4, 4, 4, 4, 2, 2])
    wy = np.array([4, 4, 4, 4, 3, 3, 3])
    np.testing.assert_array_equal(out, wx[None, :] * 100 + wy[:, None])


# --- barriers ------------------------------------------------------------------------------------
TREE_REDUCE = """
    threadgroup float buf[256];
    uint lid = thread_position_in_threadgroup.x;
    buf[lid] = inp[thread_position_in_grid.x];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = 128; s > 0; s >>= 1) {
        if (lid < s) buf[lid] += buf[lid + s];
        BARRIER
    }
    if (lid == 0) out[threadgroup_position_in_grid.x] = buf[0];
"""


def test_threadgroup_reduction_with_barrier_is_exact():
    x = rng.random(64 * 256).astype(np.float32)
    src = TREE_REDUCE.replace("BARRIER", "threadgroup_barrier(mem_flags::mem_threadgroup);")
    (out,) = metal("tree", [("inp", x)], [("out", (64,), "float32")], src, [], (64 * 256, 1, 1), (256, 1, 1))
    np.testing.assert_allclose(out, x.reshape(64, 256).sum(1), rtol=1e-5)


def test_reduction_without_its_barrier_gives_a_wrong_answer():
    x = rng.random(64 * 256).astype(np.float32)
    src = TREE_REDUCE.replace("BARRIER", "")
    args = ("tree_nb", [("inp", x)], [("out", (64,), "float32")], src, [], (64 * 256, 1, 1), (256, 1, 1))
    (out,) = metal(*args, check_races=False)
    assert not np.allclose(out, x.reshape(64, 256).sum(1), rtol=1e-3)
    with pytest.raises(SimError) as e:  # by default the run is repeated in another order
        metal(*args)
    assert e.value.kind == "race" and "output 'out'" in str(e.value)


def test_race_that_the_forward_schedule_hides_is_reported():
    # each thread reads its left neighbour's shared value without a barrier: in forward order the
    # neighbour has always written already, so only the reversed schedule exposes the race
    x = rng.random(256).astype(np.float32)
    src = """
        __shared__ float s[256];
        int t = threadIdx.x;
        s[t] = inp[t];
        MISSING_SYNC
        out[t] = t > 0 ? s[t - 1] : 0.0f;
    """
    expect = np.concatenate([[0], x[:-1]])
    for sync in ("__syncthreads();", ""):
        args = ("nbr", [("inp", x)], [("out", (256,), "float32")], src.replace("MISSING_SYNC", sync), [],
                (256, 1, 1), (256, 1, 1))
        (out,) = cuda(*args, check_races=False)
        np.testing.assert_array_equal(out, expect)
        if sync:
            np.testing.assert_array_equal(cuda(*args)[0], expect)
        else:
            with pytest.raises(SimError, match="depends on the order"):
                cuda(*args)


def test_cuda_block_reduction_with_syncthreads():
    x = rng.random(8 * 128).astype(np.float32)
    src = """
        __shared__ float s[128];
        int t = threadIdx.x;
        s[t] = inp[blockIdx.x * blockDim.x + t];
        __syncthreads();
        for (int k = blockDim.x / 2; k > 0; k >>= 1) {
            if (t < k) s[t] += s[t + k];
            __syncthreads();
        }
        if (t == 0) out[blockIdx.x] = s[0];
    """
    (out,) = cuda("bred", [("inp", x)], [("out", (8,), "float32")], src, [], (8 * 128, 1, 1), (128, 1, 1))
    np.testing.assert_allclose(out, x.reshape(8, 128).sum(1), rtol=1e-5)


def test_barrier_in_divergent_code_is_a_deadlock_error_not_a_hang():
    src = """
        uint lid = thread_position_in_threadgroup.x;
        if (lid < 16) threadgroup_barrier(mem_flags::mem_threadgroup);
        out[lid] = 1.0f;
    """
    t0 = time.time()
    with pytest.raises(SimError) as e:
        metal("dl", [("inp", np.zeros(64, np.float32))], [("out", (64,), "float32")], src, [], (64, 1, 1), (64, 1, 1))
    assert e.value.kind == "deadlock"
    assert "16 of 64 threads wait at a threadgroup barrier" in str(e.value)
    assert (e.value.file, e.value.line) == ("source", 3)  # the barrier that is not reached by all
    assert time.time() - t0 < 10


# --- warps / simdgroups ---------------------------------------------------------------------------
def test_simd_sum_and_prefix_sum_match_numpy():
    x = rng.random(1024).astype(np.float32)
    src = """
        uint gid = thread_position_in_grid.x;
        float v = simd_sum(inp[gid]);
        float p = simd_prefix_exclusive_sum(inp[gid]);
        if (thread_index_in_simdgroup == 0) sums[gid / 32] = v;
        prefix[gid] = p;
        lanes[gid] = simd_shuffle_down(float(thread_index_in_simdgroup), 3);
    """
    sums, prefix, lanes = metal("simd", [("inp", x)], [("sums", (32,), "float32"), ("prefix", (1024,), "float32"),
                                                      ("lanes", (1024,), "float32")], src, [], (1024, 1, 1), (128, 1, 1))
    w = x.reshape(32, 32)
    np.testing.assert_allclose(sums, w.sum(1), rtol=1e-5)
    np.testing.assert_allclose(prefix, (np.cumsum(w, 1) - w).reshape(-1), rtol=1e-5, atol=1e-6)
    lane = np.arange(32)
    np.testing.assert_array_equal(lanes.reshape(32, 32), np.tile(np.where(lane + 3 < 32, lane + 3, lane), (32, 1)))


SHFL_REDUCE = """
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = inp[i];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o, WIDTH);
    out[i] = v;
"""


def test_cuda_shfl_xor_warp_reduction_matches_numpy():
    x = rng.random(512).astype(np.float32)
    (out,) = cuda("shfl", [("inp", x)], [("out", (512,), "float32")], SHFL_REDUCE.replace("WIDTH", "32"), [],
                  (512, 1, 1), (256, 1, 1))
    np.testing.assert_allclose(out, np.repeat(x.reshape(16, 32).sum(1), 32), rtol=1e-5)


def test_shuffle_with_the_wrong_width_gives_a_different_answer():
    x = rng.random(512).astype(np.float32)
    (out,) = cuda("shfl16", [("inp", x)], [("out", (512,), "float32")], SHFL_REDUCE.replace("WIDTH", "16"), [],
                  (512, 1, 1), (256, 1, 1))
    assert not np.allclose(out, np.repeat(x.reshape(16, 32).sum(1), 32), rtol=1e-3)


def test_warp_ballot_and_shfl_down():
    x = rng.random(64).astype(np.float32)
    src = """
        int i = threadIdx.x;
        unsigned b = __ballot_sync(0xffffffff, inp[i] > 0.5f);
        float d = __shfl_down_sync(0xffffffff, inp[i], 1);
        ballots[i] = b;
        down[i] = d;
    """
    ballots, down = cuda("ballot", [("inp", x)], [("ballots", (64,), "uint32"), ("down", (64,), "float32")], src,
                         [], (64, 1, 1), (64, 1, 1))
    for w in range(2):
        bits = sum(1 << l for l in range(32) if x[w * 32 + l] > 0.5)
        assert (ballots[w * 32:(w + 1) * 32] == bits).all()
        seg = x[w * 32:(w + 1) * 32]
        np.testing.assert_array_equal(down[w * 32:(w + 1) * 32], np.concatenate([seg[1:], seg[-1:]]))


# --- atomics and dynamic shared memory ------------------------------------------------------------
def test_cuda_atomics_float_and_int():
    x = rng.random(4096).astype(np.float32)
    src = """
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        atomicAdd(&total[0], inp[i]);
        atomicAdd(&count[0], 1);
        atomicMax(&count[1], i);
    """
    total, count = cuda("atom", [("inp", x)], [("total", (1,), "float32"), ("count", (2,), "int32")], src, [],
                        (4096, 1, 1), (256, 1, 1), init_value=0)
    assert total[0] == pytest.approx(x.sum(), rel=1e-4)
    assert list(count) == [4096, 4095]


def test_metal_atomic_outputs_histogram():
    vals = rng.integers(0, 16, 2000).astype(np.int32)
    src = """
        uint i = thread_position_in_grid.x;
        atomic_fetch_add_explicit(&hist[inp[i]], 1, memory_order_relaxed);
    """
    (hist,) = metal("hist", [("inp", vals)], [("hist", (16,), "int32")], src, [], (2000, 1, 1), (256, 1, 1),
                    init_value=0, atomic_outputs=True)
    np.testing.assert_array_equal(hist, np.bincount(vals, minlength=16))


def test_cuda_dynamic_shared_memory_reverses_each_block():
    x = rng.random(4 * 64).astype(np.float32)
    src = """
        extern __shared__ float tile[];
        int t = threadIdx.x;
        tile[t] = inp[blockIdx.x * blockDim.x + t];
        __syncthreads();
        out[blockIdx.x * blockDim.x + t] = tile[blockDim.x - 1 - t];
    """
    (out,) = cuda("dyn", [("inp", x)], [("out", x.shape, "float32")], src, [], (256, 1, 1), (64, 1, 1),
                  shared_memory=64 * 4)
    np.testing.assert_array_equal(out, x.reshape(4, 64)[:, ::-1].reshape(-1))


# --- errors ----------------------------------------------------------------------------------------
def test_compile_error_points_at_the_kernel_line():
    src = """uint i = thread_position_in_grid.x;
float y = inp[i];
out[i] = y + not_declared;
"""
    with pytest.raises(SimError) as e:
        metal("bad", [("inp", np.zeros(8, np.float32))], [("out", (8,), "float32")], src, [], (8, 1, 1), (8, 1, 1))
    assert e.value.kind == "compile"
    assert e.value.line == 3 and e.value.file == "source"
    assert "not_declared" in str(e.value)


def test_compile_error_in_the_header_names_the_header():
    header = "inline float twice(float v) {\n  return v * 2\n}\n"
    with pytest.raises(SimError) as e:
        metal("badh", [("inp", np.zeros(8, np.float32))], [("out", (8,), "float32")],
              "out[0] = twice(inp[0]);", [], (1, 1, 1), (1, 1, 1), header=header)
    assert e.value.file == "header" and e.value.line in (2, 3)


def test_out_of_bounds_read_is_a_fault_with_the_buffer_named():
    src = """
        uint i = thread_position_in_grid.x;
        out[i] = inp[i + 2048];
    """
    with pytest.raises(SimError) as e:
        metal("oob", [("inp", np.zeros(1024, np.float32))], [("out", (1024,), "float32")], src, [],
              (1024, 1, 1), (64, 1, 1))
    assert e.value.kind == "fault"
    assert "past the end of 'inp'" in str(e.value)


def test_endless_loop_hits_the_time_limit():
    src = "while (inp[0] >= 0.0f) {}\nout[0] = 1.0f;"
    t0 = time.time()
    with pytest.raises(SimError) as e:
        metal("spin", [("inp", np.zeros(4, np.float32))], [("out", (1,), "float32")], src, [], (1, 1, 1),
              (1, 1, 1), timeout_s=0.5)
    assert e.value.kind == "timeout"
    assert time.time() - t0 < 10


# --- whole .cu files ---------------------------------------------------------------------------------
CU_FILE = r"""
#include <cuda_runtime.h>
#include <cstdio>
#define BLOCK 128

__device__ __forceinline__ float gelu(float v) {
    return 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
}

__global__ void bias_gelu(const float* __restrict__ x, const float* __restrict__ bias, float* y,
                          int rows, int cols) {
    int r = blockIdx.y;
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows && c < cols) y[r * cols + c] = gelu(x[r * cols + c] + bias[c]);
}

int main() {
    float *x, *b, *y;
    cudaMalloc(&x, 4 * 300 * sizeof(float));
    cudaMalloc(&b, 300 * sizeof(float));
    cudaMalloc(&y, 4 * 300 * sizeof(float));
    dim3 grid((300 + BLOCK - 1) / BLOCK, 4);
    bias_gelu<<<grid, BLOCK>>>(x, b, y, 4, 300);
    cudaDeviceSynchronize();
    printf("done\n");
    return 0;
}
"""


def test_run_cuda_source_on_a_whole_file_with_main():
    x = rng.standard_normal((4, 300)).astype(np.float32)
    b = rng.standard_normal(300).astype(np.float32)
    y = np.zeros((4, 300), np.float32)
    out = run_cuda_source(CU_FILE, "bias_gelu", grid=(3, 4, 1), block=(128, 1, 1),
                          args={"x": x, "bias": b, "y": y, "rows": 4, "cols": 300})
    v = x + b
    expect = 0.5 * v * (1 + np.tanh(0.7978845608 * (v + 0.044715 * v ** 3)))
    np.testing.assert_allclose(out["y"], expect, rtol=1e-5, atol=1e-6)
    assert set(out) == {"x", "bias", "y"}


def test_run_cuda_source_template_kernel_and_errors():
    src = """
    template <typename T, int B>
    __global__ void scale(T* data, T s) {
        __shared__ T tile[B];
        tile[threadIdx.x] = data[blockIdx.x * B + threadIdx.x] * s;
        __syncthreads();
        data[blockIdx.x * B + threadIdx.x] = tile[(threadIdx.x + 1) % B];
    }
    """
    d = np.arange(512, dtype=np.float32)
    out = run_cuda_source(src, "scale", (2, 1, 1), (256, 1, 1), {"data": d, "s": 3.0},
                          template_args=["float", "256"])
    np.testing.assert_array_equal(out["data"], np.roll(d.reshape(2, 256) * 3, -1, axis=1).reshape(-1))
    with pytest.raises(SimError, match="template_args"):
        run_cuda_source(src, "scale", (2, 1, 1), (256, 1, 1), {"data": d, "s": 3.0})
    with pytest.raises(SimError, match="missing: s"):
        run_cuda_source(src, "scale", (2, 1, 1), (256, 1, 1), {"data": d}, template_args=["float", "256"])
    with pytest.raises(SimError, match="is T\\* but the array is int64|needs a numpy array|no __global__"):
        run_cuda_source(src, "nope", (1, 1, 1), (1, 1, 1), {})


def test_cuda_file_compile_error_maps_to_file_line():
    src = "#include <cuda_runtime.h>\n__global__ void k(float* y) {\n  y[0] = oops;\n}\n"
    with pytest.raises(SimError) as e:
        run_cuda_source(src, "k", (1, 1, 1), (1, 1, 1), {"y": np.zeros(1, np.float32)}, filename="my.cu")
    assert (e.value.file, e.value.line) == ("my.cu", 3)


# --- performance -----------------------------------------------------------------------------------
def test_64_threadgroups_of_256_threads_run_well_under_a_second():
    x = rng.random(64 * 256).astype(np.float32)
    src = TREE_REDUCE.replace("BARRIER", "threadgroup_barrier(mem_flags::mem_threadgroup);")
    args = ("tree", [("inp", x)], [("out", (64,), "float32")], src, [], (64 * 256, 1, 1), (256, 1, 1))
    metal(*args)  # compiled (or cached) here
    t0 = time.time()
    metal(*args)
    assert time.time() - t0 < 0.5


# --- Metal vector types, scalars, templates, simdgroup matrices ------------------------------------
def test_metal_vectors_swizzles_scalar_input_and_bool_template():
    x = rng.standard_normal(256).astype(np.float32)
    src = """
        uint i = thread_position_in_grid.x;
        float4 v = ((const device float4*)inp)[i];
        float2 lo = v.xy;
        v.zw = v.zw * alpha;
        float4 r = FLIP ? float4(v.wzyx) : v;
        ((device float4*)out)[i] = r + float4(lo, lo) * 0.0f;
    """
    alpha = np.array(3.0, np.float32)  # a 0-d input: passed as `const constant float& alpha`
    for flip in (True, False):
        (out,) = metal("vec", [("inp", x), ("alpha", alpha)], [("out", x.shape, "float32")], src,
                       [("FLIP", flip)], (64, 1, 1), (32, 1, 1))
        v = x.reshape(64, 4).copy()
        v[:, 2:] *= 3
        np.testing.assert_allclose(out.reshape(64, 4), v[:, ::-1] if flip else v, rtol=1e-6)


def test_metal_simdgroup_matrix_multiply():
    a = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((8, 16)).astype(np.float32)
    src = """
        uint sg = simdgroup_index_in_threadgroup;       // 4 simdgroups: one 8x8 tile of C each
        uint tr = sg / 2, tc = sg % 2;
        simdgroup_float8x8 ma, mb, mc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        simdgroup_load(ma, A, 8, ulong2(0, tr * 8));
        simdgroup_load(mb, B, 16, ulong2(tc * 8, 0));
        simdgroup_multiply_accumulate(mc, ma, mb, mc);
        simdgroup_store(mc, C, 16, ulong2(tc * 8, tr * 8));
    """
    (c,) = metal("sgmm", [("A", a), ("B", b)], [("C", (16, 16), "float32")], src, [], (128, 1, 1), (128, 1, 1))
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_run_cuda_source_sets_constant_memory_like_memcpy_to_symbol():
    src = """
    #include <cuda_runtime.h>
    __constant__ float coeffs[4];
    __global__ void poly(const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = coeffs[0] + x[i] * (coeffs[1] + x[i] * (coeffs[2] + x[i] * coeffs[3]));
    }
    void launch(const float* x, float* y, int n, const float* host_coeffs) {
        cudaMemcpyToSymbol(coeffs, host_coeffs, 4 * sizeof(float));
        poly<<<(n + 127) / 128, 128>>>(x, y, n);
    }
    """
    x = rng.standard_normal(300).astype(np.float32)
    c = np.array([1.0, -2.0, 0.5, 0.25], np.float32)
    out = run_cuda_source(src, "poly", (3, 1, 1), (128, 1, 1),
                          {"x": x, "y": np.zeros(300, np.float32), "n": 300, "coeffs": c})
    np.testing.assert_allclose(out["y"], c[0] + x * (c[1] + x * (c[2] + x * c[3])), rtol=1e-5, atol=1e-6)
    with pytest.raises(SimError, match="holds 16 bytes"):
        run_cuda_source(src, "poly", (3, 1, 1), (128, 1, 1),
                        {"x": x, "y": np.zeros(300, np.float32), "n": 300, "coeffs": np.zeros(8, np.float32)})


def test_reading_shared_memory_nobody_wrote_gives_garbage_not_zeros():
    # only 200 of 256 slots are written, but all 256 are summed: on a GPU the rest is garbage
    x = rng.random(200).astype(np.float32)
    src = """
        threadgroup float buf[256];
        uint lid = thread_position_in_threadgroup.x;
        if (lid < 200) buf[lid] = inp[lid];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (lid == 0) {
            float s = 0.0f;
            for (uint k = 0; k < 256; k++) s += buf[k];
            out[0] = s;
        }
    """
    (out,) = metal("uninit", [("inp", x)], [("out", (1,), "float32")], src, [], (256, 1, 1), (256, 1, 1))
    assert np.isnan(out[0])
    (ok,) = metal("uninit_fixed", [("inp", x)], [("out", (1,), "float32")],
                  src.replace("if (lid < 200) buf[lid] = inp[lid];", "buf[lid] = lid < 200 ? inp[lid] : 0.0f;"),
                  [], (256, 1, 1), (256, 1, 1))
    assert ok[0] == pytest.approx(x.sum(), rel=1e-5)


def test_run_cuda_source_struct_parameter_by_value():
    src = """
    struct Params { float scale; int n; };
    __global__ void apply(const float* x, float* y, Params p) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < p.n) y[i] = x[i] * p.scale;
    }
    """
    params = np.array((0.5, 100), dtype=np.dtype([("scale", np.float32), ("n", np.int32)]))
    x = rng.random(128).astype(np.float32)
    out = run_cuda_source(src, "apply", (1, 1, 1), (128, 1, 1), {"x": x, "y": np.zeros(128, np.float32), "p": params})
    np.testing.assert_allclose(out["y"][:100], x[:100] * 0.5)
    assert (out["y"][100:] == 0).all()
    with pytest.raises(SimError, match="give its 8 bytes"):
        run_cuda_source(src, "apply", (1, 1, 1), (128, 1, 1), {"x": x, "y": np.zeros(128, np.float32), "p": 0.5})


def test_same_named_kernels_do_not_share_threadgroup_memory():
    # candidates of one search share kernel names; each library must keep its own threadgroup arrays
    # (g++ would otherwise give them STB_GNU_UNIQUE binding, unified across every loaded library)
    import shutil
    import subprocess

    from ksearch_engine.sim import build, mlx_kernels

    outs = []
    for size in (4, 64):
        src = f"""
            threadgroup float buf[{size}];
            uint lid = thread_position_in_threadgroup.x;
            buf[lid] = float(lid);
            threadgroup_barrier(mem_flags::mem_threadgroup);
            out[lid] = buf[{size} - 1 - lid];
        """
        (o,) = metal("twin", [("inp", np.zeros(1, np.float32))], [("out", (size,), "float32")], src,
                     [("T", "float32")], (size, 1, 1), (size, 1, 1))
        outs.append(o)
        code, _ = mlx_kernels.generate("metal", "twin", ["inp"], ["out"], src, "", ["float32"], [(1,)],
                                       [("T", "float32")], ["float32"], False)
        so = build.build(code, "twin")
        if shutil.which("nm"):
            syms = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True).stdout
            assert " u " not in syms and "buf" not in syms
            assert "ksim_run" in syms
    np.testing.assert_array_equal(outs[1], np.arange(64)[::-1])


def test_compile_cache_keeps_the_most_recent_libraries(tmp_path):
    import os

    from ksearch_engine.sim.build import prune

    for i in range(30):
        for ext in ("so", "cpp"):
            (tmp_path / f"k{i:03d}.{ext}").write_text("x")
        os.utime(tmp_path / f"k{i:03d}.so", (1000 + i, 1000 + i))
    prune(tmp_path, keep=20)
    kept = sorted(p.stem for p in tmp_path.glob("*.so"))
    assert kept == [f"k{i:03d}" for i in range(20, 30)]
    assert sorted(p.stem for p in tmp_path.glob("*.cpp")) == kept


def test_portable_ucontext_switch_gives_the_same_results(monkeypatch):
    # macOS and non-x86 Linux use ucontext instead of the assembly switch: same semantics
    monkeypatch.setenv("KSEARCH_SIM_UCONTEXT", "1")
    monkeypatch.setenv("KSEARCH_SIM_NO_PCH", "1")  # two compiles: not worth a precompiled header
    x = rng.random(4 * 256).astype(np.float32)
    src = TREE_REDUCE.replace("BARRIER", "threadgroup_barrier(mem_flags::mem_threadgroup);")
    (out,) = metal("tree_uc", [("inp", x)], [("out", (4,), "float32")], src, [], (4 * 256, 1, 1), (256, 1, 1))
    np.testing.assert_allclose(out, x.reshape(4, 256).sum(1), rtol=1e-5)
    (sums,) = metal("simd_uc", [("inp", x)], [("sums", (32,), "float32")],
                    "uint g = thread_position_in_grid.x; float v = simd_sum(inp[g]); if (g % 32 == 0) sums[g / 32] = v;",
                    [], (1024, 1, 1), (256, 1, 1))
    np.testing.assert_allclose(sums, x.reshape(32, 32).sum(1), rtol=1e-5)


def test_sim_error_survives_pickling():
    import pickle

    e = pickle.loads(pickle.dumps(SimError("boom", 7, file="source", kind="deadlock")))
    assert (e.message, e.line, e.file, e.kind) == ("boom", 7, "source", "deadlock")


def test_simdgroup_matrix_thread_elements_follow_mlx_fragment_layout():
    # scale C's fragment through thread_elements() before storing: every element must be doubled once
    a = rng.standard_normal((8, 8)).astype(np.float32)
    src = """
        simdgroup_float8x8 ma, mc;
        simdgroup_load(ma, A, 8);
        simdgroup_multiply(mc, ma, ma);
        thread auto& e = mc.thread_elements();
        e *= 2.0f;
        simdgroup_store(mc, C, 8);
        uint lane = thread_index_in_simdgroup;
        uint q = lane / 4;
        rows[lane] = float((q & 4) + (lane / 2) % 4);
        ballot[lane] = float(static_cast<uint>(static_cast<simd_vote::vote_t>(simd_ballot(lane % 2 == 0))));
        bits[lane] = float(metal::reverse_bits(1u) == 0x80000000u);
    """
    c, rows, ballot, bits = metal("sgte", [("A", a)], [("C", (8, 8), "float32"), ("rows", (32,), "float32"),
                                                       ("ballot", (32,), "float32"), ("bits", (32,), "float32")],
                                  src, [], (32, 1, 1), (32, 1, 1))
    np.testing.assert_allclose(c, 2 * (a @ a), rtol=1e-5, atol=1e-5)
    assert (ballot == float(0x55555555)).all() and (bits == 1).all()


def test_early_return_before_a_barrier_is_strict_by_default_lenient_on_request():
    src = """
    __global__ void tail(const float* x, float* y, int n) {
        __shared__ float s[64];
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= n) return;                 // the last block's extra threads leave early
        s[threadIdx.x] = x[i];
        __syncthreads();
        y[i] = s[threadIdx.x] + s[0];
    }
    """
    x = rng.random(100).astype(np.float32)
    args = {"x": x, "y": np.zeros(100, np.float32), "n": 100}
    with pytest.raises(SimError) as e:
        run_cuda_source(src, "tail", (2, 1, 1), (64, 1, 1), args)
    assert e.value.kind == "deadlock" and "already returned" in str(e.value)
    out = run_cuda_source(src, "tail", (2, 1, 1), (64, 1, 1), args, strict_barriers=False)
    np.testing.assert_allclose(out["y"], x + np.repeat(x[[0, 64]], [64, 36]))


def test_metal_divergent_branches_are_separate_simdgroup_collectives():
    # lanes 0-15 and 16-31 reduce in different branches: on an Apple GPU each branch runs with only
    # its own lanes active, so each half gets its own sum
    x = rng.random(64).astype(np.float32)
    src = """
        uint i = thread_position_in_grid.x;
        uint lane = thread_index_in_simdgroup;
        float v;
        if (lane < 16) v = simd_sum(inp[i]);
        else v = simd_sum(inp[i] * 10.0f);
        out[i] = v;
    """
    (out,) = metal("diverge", [("inp", x)], [("out", (64,), "float32")], src, [], (64, 1, 1), (64, 1, 1))
    halves = x.reshape(4, 16).sum(1) * np.array([1, 10, 1, 10])
    np.testing.assert_allclose(out, np.repeat(halves, 16), rtol=1e-5)


def test_float_atomics_that_cancel_are_not_mistaken_for_a_race():
    # +x and -x summed with atomics: in float the total depends on the order only by rounding;
    # the simulator sums atomic adds per address in double, so both schedules agree (exactly 0)
    x = rng.standard_normal(1 << 15).astype(np.float32)
    x = np.concatenate([x, -x])
    src = "uint i = thread_position_in_grid.x; atomic_fetch_add_explicit(&out[0], inp[i], memory_order_relaxed);"
    (out,) = metal("cancel", [("inp", x)], [("out", (1,), "float32")], src, [], (x.size, 1, 1), (256, 1, 1),
                   init_value=0, atomic_outputs=True)
    assert out[0] == 0.0


def test_threadgroup_memory_over_the_apple_limit_is_a_resource_error():
    src = """
        threadgroup float a[4096];
        threadgroup float b[SECOND];
        uint l = thread_position_in_threadgroup.x;
        a[l] = 1.0f; b[l] = 2.0f;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[l] = a[l] + b[l];
    """
    args = ([("inp", np.zeros(1, np.float32))], [("out", (32,), "float32")])
    (ok,) = metal("tg32k", *args, src.replace("SECOND", "4096"), [], (32, 1, 1), (32, 1, 1))  # exactly 32 KB
    assert (ok == 3).all()
    with pytest.raises(SimError) as e:
        metal("tg33k", *args, src.replace("SECOND", "4100"), [], (32, 1, 1), (32, 1, 1))
    assert e.value.kind == "resource_limit" and "32784 bytes of threadgroup memory" in str(e.value)


def test_runs_still_report_when_the_host_process_ignores_sigchld():
    import signal

    old = signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel: no status
    try:
        x = rng.random(64).astype(np.float32)
        (out,) = metal("sigchld_ok", [("inp", x)], [("out", (64,), "float32")],
                       "uint i = thread_position_in_grid.x; out[i] = inp[i] * 2.0f;", [], (64, 1, 1), (64, 1, 1))
        np.testing.assert_array_equal(out, x * 2)
        with pytest.raises(SimError) as e:
            metal("sigchld_dl", [("inp", x)], [("out", (64,), "float32")],
                  "uint l = thread_position_in_threadgroup.x; if (l < 16) threadgroup_barrier(mem_flags::mem_threadgroup); out[l] = 1;",
                  [], (64, 1, 1), (64, 1, 1))
        assert e.value.kind == "deadlock"
        with pytest.raises(SimError) as e:
            metal("sigchld_spin", [("inp", x)], [("out", (1,), "float32")], "while (inp[0] >= 0.0f) {}", [],
                  (1, 1, 1), (1, 1, 1), timeout_s=0.3)
        assert e.value.kind == "timeout"
    finally:
        signal.signal(signal.SIGCHLD, old)


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_dtypes_round_trip(dialect):
    a = rng.integers(-2**40, 2**40, 32).astype(np.int64)
    b = rng.integers(0, 2**32 - 1, 32).astype(np.uint32)
    c = rng.random(32) > 0.5
    d = rng.standard_normal(32).astype(np.float16)
    e = rng.standard_normal(32).astype(np.float32)
    idx = "thread_position_in_grid.x" if dialect == "metal" else "threadIdx.x"
    src = f"""
        uint i = {idx};
        oa[i] = a[i] + 1; ob[i] = b[i] ^ 1u; oc[i] = !c[i]; od[i] = d[i]; oe[i] = e[i];
    """
    run = metal if dialect == "metal" else cuda
    oa, ob, oc, od, oe = run(f"dt_{dialect}", [("a", a), ("b", b), ("c", c), ("d", d), ("e", e)],
                             [("oa", (32,), "int64"), ("ob", (32,), "uint32"), ("oc", (32,), "bool"),
                              ("od", (32,), "float16"), ("oe", (32,), "bfloat16")], src, [], (32, 1, 1), (32, 1, 1),
                             input_dtypes=[None, None, None, None, "bfloat16"])
    np.testing.assert_array_equal(oa, a + 1)
    np.testing.assert_array_equal(ob, b ^ 1)
    np.testing.assert_array_equal(oc, ~c)
    np.testing.assert_array_equal(od, d)
    assert oe.dtype == np.float32
    np.testing.assert_allclose(oe, e, rtol=2 ** -8)  # rounded to bfloat16 on the way in


def test_spin_wait_on_an_earlier_threadgroup_is_reported_quickly():
    # each block waits for the previous block's flag: fine when blocks start in order, a hang when
    # they do not (GPUs promise no order); the reversed run exposes it within a few seconds
    src = """
    __global__ void chain(float* out, volatile int* flags) {
        int b = blockIdx.x;
        if (threadIdx.x == 0) {
            if (b > 0) while (atomicAdd((int*)&flags[b - 1], 0) == 0) {}
            out[b] = b > 0 ? out[b - 1] + 1.0f : 1.0f;
            atomicExch((int*)&flags[b], 1);
        }
    }
    """
    args = {"out": np.zeros(4, np.float32), "flags": np.zeros(4, np.int32)}
    out = run_cuda_source(src, "chain", (4, 1, 1), (32, 1, 1), args, check_races=False)
    np.testing.assert_array_equal(out["out"], [1, 2, 3, 4])
    t0 = time.time()
    with pytest.raises(SimError) as e:
        run_cuda_source(src, "chain", (4, 1, 1), (32, 1, 1), args)
    assert e.value.kind == "race" and "reverse order" in str(e.value)
    assert time.time() - t0 < 15


def test_shared_array_sized_by_a_product_is_one_array_per_block():
    """`__shared__ float acc[W * G]` is an array (the `*` is inside the brackets), shared by the block."""
    import numpy as np
    from ksearch_engine.sim import run_mlx_kernel

    src = """
    __shared__ float acc[W * G];
    int t = threadIdx.x;
    acc[t] = (float)t;
    __syncthreads();
    out[t] = acc[(t + 1) % (W * G)];
"""
    o = run_mlx_kernel(dialect="cuda", name="k", input_names=["inp"], output_names=["out"], source=src,
                       header="#define W 8\n#define G 4\n", inputs=[np.zeros(32, np.float32)], template=[],
                       grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(32,)], output_dtypes=["float32"])
    assert np.array_equal(o[0], (np.arange(32) + 1) % 32)
