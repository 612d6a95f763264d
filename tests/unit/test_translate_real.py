"""The translator on constructs of real CUDA code: each port's launch() (CUDA's calling convention, in-out
buffers) must leave in memory exactly what the original kernel leaves, for the Metal port and the CUDA-backend
port, in the CPU simulator."""
import numpy as np
import pytest

from ksearch_engine.source import find_kernels
from ksearch_engine.translate import translate_kernel
from ksearch_engine.translate.check import check_port


def port(src: str, kernel: str, args: dict, grid=(2, 1, 1), block=(64, 1, 1), shared_mem=0, template=()):
    parsed = find_kernels(src, "t.cu")
    tr = translate_kernel(parsed, kernel, "t.cu")
    res = check_port(tr.module_text, src, kernel, {"args": args, "grid": grid, "block": block,
                                                    "shared_mem": shared_mem, "template_args": list(template)},
                     filename="t.cu")
    return tr, res


def assert_ported(res):
    assert res.original_error is None, res.original_error
    assert res.dialects == {"metal": "passed", "cuda": "passed"}, res.message


rng = np.random.default_rng(0)


def test_in_out_buffer_keeps_the_elements_the_kernel_does_not_write():
    src = """
__global__ void saxpy_some(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && i % 3 != 0) y[i] = a * x[i] + y[i];
}"""
    tr, res = port(src, "saxpy_some", {"n": 100, "a": 2.0, "x": rng.random(128, dtype=np.float32),
                                       "y": rng.random(128, dtype=np.float32)})
    assert_ported(res)
    assert [p["name"] for p in tr.params if p["written"]] == ["y"]


def test_vector_stores_through_reinterpret_cast_and_stcs_are_writes():
    src = """
__global__ void copy4(const float* in, float* out, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 v = reinterpret_cast<const float4*>(in)[i];
        v.x *= 2.0f;
        reinterpret_cast<float4*>(out)[i] = v;
        __stcs(&out[4 * n4 + i], v.y);
    }
}"""
    _, res = port(src, "copy4", {"in": rng.random(1024, dtype=np.float32), "out": np.zeros(1024, np.float32),
                                 "n4": 100})
    assert_ported(res)


def test_float4_pointer_parameters_keep_their_type():
    src = """
__global__ void scale4(float4* v, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float4 a = v[i]; a.x *= s; a.w += s; v[i] = a; }
}"""
    tr, res = port(src, "scale4", {"v": rng.random(4 * 128, dtype=np.float32), "s": 3.0, "n": 120})
    assert_ported(res)
    p = tr.params[0]
    assert (p["dtype"], p["elem_bytes"], p["written"]) == ("float32", 16, True)


def test_histogram_with_shared_and_global_atomics_adds_to_what_the_host_put_there():
    src = """
__global__ void hist(const unsigned char* data, int n, unsigned int* bins) {
    __shared__ unsigned int local[16];
    if (threadIdx.x < 16) local[threadIdx.x] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&local[data[i] % 16], 1u);
    __syncthreads();
    if (threadIdx.x < 16) atomicAdd(&bins[threadIdx.x], local[threadIdx.x]);
}"""
    tr, res = port(src, "hist", {"data": rng.integers(0, 255, 1000).astype(np.uint8), "n": 1000,
                                 "bins": np.full(16, 5, np.uint32)})
    assert_ported(res)
    assert tr.params[0]["dtype"] == "uint8"
    assert "ks_atomic_add_tg(" in tr.launch_metal_source and "threadgroup atomic<T>" in tr.launch_metal_header


def test_atomic_cas_loop_and_float_atomic_add():
    src = """
__device__ float atomicMaxFloat(float* addr, float v) {
    int* p = (int*)addr;
    int old = *p, assumed;
    do { assumed = old; old = atomicCAS(p, assumed, __float_as_int(fmaxf(v, __int_as_float(assumed)))); }
    while (assumed != old);
    return __int_as_float(old);
}
__global__ void maxsum(const float* x, int n, float* mx, float* sum) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { atomicMaxFloat(mx, x[i]); atomicAdd(sum, x[i]); }
}"""
    _, res = port(src, "maxsum", {"x": rng.random(128, dtype=np.float32), "n": 128,
                                  "mx": np.zeros(1, np.float32), "sum": np.ones(1, np.float32)})
    assert_ported(res)


def test_template_arguments_come_from_the_launch():
    src = """
template <typename T, int BLOCK>
__global__ void block_sum(const T* x, T* out) {
    __shared__ T s[BLOCK];
    s[threadIdx.x] = x[blockIdx.x * BLOCK + threadIdx.x];
    __syncthreads();
    for (int k = BLOCK / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}"""
    _, res = port(src, "block_sum", {"x": rng.random(128, dtype=np.float32), "out": np.zeros(2, np.float32)},
                  template=["float", "64"])
    assert_ported(res)


def test_legacy_shuffles_and_cooperative_groups_sync():
    src = """
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void warp_sums(const float* x, float* out) {
    cg::thread_block cta = cg::this_thread_block();
    __shared__ float s[64];
    s[threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x];
    cg::sync(cta);
    float v = s[threadIdx.x];
    for (int o = 16; o > 0; o /= 2) v += __shfl_down(v, o);
    if (threadIdx.x % 32 == 0) out[blockIdx.x * 2 + threadIdx.x / 32] = v;
}"""
    _, res = port(src, "warp_sums", {"x": rng.random(128, dtype=np.float32), "out": np.zeros(4, np.float32)})
    assert res.dialects["cuda"] == "passed", res.message


def test_file_scope_types_macros_and_constants_reach_both_ports():
    src = """
#define SCALE 2.0f
typedef float real;
constexpr int OFFSET = 3;
enum Mode { ADD = 1, MUL = 2 };
struct __align__(8) Pair { float a; float b; };
__global__ void pairs(const Pair* p, real* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = SCALE * p[i].a + p[i].b * (float)MUL + (float)OFFSET * (float)M_PI;
}"""
    tr, res = port(src, "pairs", {"p": rng.random(256, dtype=np.float32), "out": np.zeros(128, np.float32),
                                  "n": 128})
    assert_ported(res)
    assert (tr.params[0]["dtype"], tr.params[0]["elem_bytes"]) == ("float32", 8)


def test_an_unportable_kernel_never_stops_the_others_of_its_file():
    src = """
#include <mma.h>
using namespace nvcuda;
__global__ void tensor_core(const half* a, const half* b, float* c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a, 16);
}
__global__ void plain(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.0f;
}"""
    _, res = port(src, "plain", {"x": rng.random(128, dtype=np.float32), "y": np.zeros(128, np.float32), "n": 128})
    assert_ported(res)


def test_a_mismatch_names_the_buffer_the_index_and_the_values():
    src = """
__global__ void inc(int* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += 1;
}"""
    parsed = find_kernels(src, "t.cu")
    tr = translate_kernel(parsed, "inc", "t.cu")
    y = np.arange(128, dtype=np.int32)
    expected = {"y": y + 2}    # as if the original had added 2
    res = check_port(tr.module_text, src, "inc", {"args": {"y": y, "n": 128}, "grid": (2, 1, 1),
                                                  "block": (64, 1, 1)}, expected=expected)
    assert res.dialects["metal"] == "mismatch"
    assert "buffer 'y' [0]: got 1, expected 2" in res.messages["metal"]
    assert "Traceback" not in res.message


def test_the_simulator_writes_back_an_input_marked_writable_and_only_that_one():
    import mlx.core as mx

    from ksearch_engine.sim import SimError, run_mlx_kernel
    from ksearch_engine.sim.shim import SimKernel

    k = SimKernel("metal", "w", ["a_inout"], ["done"], "uint i = thread_position_in_grid.x;\n"
                  "device float* a = (device float*)a_inout;\na[i] = a[i] * 2.0f;\n")
    a = mx.array(np.arange(8, dtype=np.float32))
    k(inputs=[a], output_shapes=[(1,)], output_dtypes=[mx.uint32], grid=(8, 1, 1), threadgroup=(8, 1, 1))
    assert np.array(a).tolist() == [2.0 * i for i in range(8)]
    with pytest.raises(SimError):
        run_mlx_kernel("metal", "r", ["a"], ["done"], "uint i = thread_position_in_grid.x;\n"
                       "device float* p = (device float*)a;\np[i] = 1.0f;\n", "", [np.zeros(8, np.float32)],
                       grid=(8, 1, 1), threadgroup=(8, 1, 1), output_shapes=[(1,)], output_dtypes=["uint32"])


def test_stores_through_a_helper_and_shared_atomics_port_through_launch():
    """The kernel(*inputs) wrapper sees no output and cannot do shared atomics; launch() can: the port is not
    blocked and both ports reproduce the original."""
    from ksearch_engine.portfile import _first_error
    src = """
__device__ void put(float* p, int i, float v) { p[i] = v; }
__global__ void k(float* out, const float* x, int n) {
    __shared__ int cnt[4];
    if (threadIdx.x < 4) cnt[threadIdx.x] = 0;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&cnt[i % 4], 1);
    __syncthreads();
    if (i < n) put(out, i, x[i] + cnt[i % 4]);
}"""
    tr, res = port(src, "k", {"out": np.zeros(128, np.float32), "x": rng.random(128, dtype=np.float32), "n": 100})
    assert _first_error(tr) is None
    assert any(i.severity == "error" and i.scope == "inputs" for i in tr.report)   # still said, for kernel()
    assert_ported(res)


def test_helpers_reading_thread_indices_cooperative_groups_and_width_limited_shuffles():
    """Metal gives thread indices to the kernel only: helpers take them as parameters; cg::thread_block,
    thread_block_tile<32>, cg::reduce and shuffles within 4/8/16 lanes keep CUDA's semantics."""
    src = """
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__device__ float blockSum(float* s, float v) {
    cg::thread_block cta = cg::this_thread_block();
    s[threadIdx.x] = v;
    cg::sync(cta);
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        cta.sync();
    }
    return s[0];
}
__device__ float tileSum(float v) {
    cg::thread_block_tile<32> t = cg::tiled_partition<32>(cg::this_thread_block());
    for (int o = t.size() / 2; o > 0; o /= 2) v += t.shfl_down(v, o);
    return cg::reduce(t, v, cg::plus<float>()) * 0.0f + v;
}
__global__ void k(const float* x, float* out, float* out2, float* out3) {
    __shared__ float s[64];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float total = blockSum(s, x[i]);
    if (threadIdx.x == 0) out[blockIdx.x] = total;
    float w = tileSum(x[i]);
    if (threadIdx.x % 32 == 0) out2[i / 32] = w;
    float p = x[i];
    for (int d = 1; d < 8; d *= 2) { float q = __shfl_up_sync(0xffffffff, p, d, 8); if (threadIdx.x % 8 >= d) p += q; }
    out3[i] = p + __shfl_xor_sync(0xffffffff, p, 1, 4) + __shfl_sync(0xffffffff, p, 3, 16) + __shfl_down_sync(0xffffffff, p, 2, 8);
}"""
    tr, res = port(src, "k", {"x": rng.random(128, dtype=np.float32), "out": np.zeros(2, np.float32),
                              "out2": np.zeros(4, np.float32), "out3": np.zeros(128, np.float32)})
    assert not [i for i in tr.report if i.severity == "error"]
    assert "uint3 thread_position_in_threadgroup" in tr.launch_metal_header
    assert "ks_shfl_up_w(" in tr.launch_metal_source
    assert_ported(res)


def test_macros_inside_include_guards_and_ifdef_chains_and_scalar_type_aliases_reach_both_ports():
    src = """
#ifndef MY_KERNEL_CUH
#define MY_KERNEL_CUH
#define fp float
typedef int idx_t;
#ifdef WIDE
    #define TILE 32
#else
    #define TILE 16
#endif
__global__ void scale(fp lambda, idx_t n, fp* x) {
    __shared__ fp t[TILE];
    int i = blockIdx.x * TILE + threadIdx.x;
    t[threadIdx.x] = i < n ? x[i] : 0;
    __syncthreads();
    if (i < n) x[i] = lambda * t[TILE - 1 - threadIdx.x];
}
#endif
"""
    tr, res = port(src, "scale", {"lambda": 1.5, "n": 30, "x": rng.random(32, dtype=np.float32)}, block=(16, 1, 1))
    assert not [i for i in tr.report if i.severity == "error" and i.scope == "kernel"]
    assert [(p["dtype"], p["pointer"]) for p in tr.params] == [("float32", False), ("int32", False), ("float32", True)]
    assert_ported(res)


def test_an_extern_c_host_function_is_stripped_whole_from_the_simulated_file():
    from ksearch_engine.sim import run_cuda_source
    src = """
__global__ void inc(float* x) { x[threadIdx.x] += 1.0f; }
extern "C" void host_inc(float* d) { inc<<<1, 32>>>(d); }
"""
    out = run_cuda_source(src, "inc", (1, 1, 1), (32, 1, 1), {"x": np.zeros(32, np.float32)})
    assert (out["x"] == 1.0).all()


def test_local_headers_give_their_macros_to_the_port(tmp_path):
    from ksearch_engine.translate.headers import header_preamble
    (tmp_path / "common.h").write_text("#ifndef COMMON_H\n#define COMMON_H\n#define RADIUS 4\n"
                                       "extern \"C\" void cpu(float*);\n#endif\n")
    pre = header_preamble('#include "common.h"\n#include <cuda_runtime.h>\n', [str(tmp_path)])
    assert pre == ["#define RADIUS 4"]


def test_char_and_clock_t_scalars_are_passed_by_launch():
    src = """
__global__ void k(char val, clock_t c, int* out) {
    out[threadIdx.x] = val + (int)(c % 7);
}"""
    tr, res = port(src, "k", {"val": 3, "c": 100, "out": np.zeros(64, np.int32)}, grid=(1, 1, 1))
    assert [p["dtype"] for p in tr.params] == ["int8", "int64", "int32"]
    assert "clock_t" not in tr.launch_metal_source   # Metal has no clock_t
    assert_ported(res)
