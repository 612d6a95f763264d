"""Constructs of whole CUDA programs that the translator must carry into both ports (issue 13): helpers in an order
C++ accepts, shared arrays that helpers declare, shared-memory proxy objects of a header, file-scope device memory
(`__constant__` tables a program fills, `__device__` counters), preprocessor conditionals in a parameter list, and
textures a launch does not bind. Each test ports a small kernel written here and checks both ports' launch()
against the original in the CPU simulator."""
import numpy as np
import pytest

from ksearch_engine.source import find_kernels
from ksearch_engine.source.conditionals import known_macros, resolve_conditionals
from ksearch_engine.translate import translate_kernel
from ksearch_engine.translate.check import check_port
from tests.sources import assert_ported, port_checked

rng = np.random.default_rng(7)


def port(src, kernel, args, block=(64, 1, 1), **kw):
    return port_checked(src, kernel, args, block=block, **kw)


def test_a_helper_declared_first_and_defined_later_comes_before_its_callers():
    src = """
__device__ float cube(float v);
__device__ float twice_cube(float v) { return 2.0f * cube(v); }
__device__ float cube(float v) { return v * v * v; }
__global__ void k(float* out, const float* in) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = twice_cube(in[i]);
}"""
    tr, res = port(src, "k", {"out": np.zeros(128, np.float32), "in": rng.standard_normal(128).astype(np.float32)})
    h = tr.launch_metal_header
    assert h.index("inline float cube(") < h.index("inline float twice_cube(")
    assert_ported(res)


def test_shared_arrays_declared_in_helpers_are_declared_in_the_kernel_for_metal():
    src = """
__device__ float block_sum(float v) {
    __shared__ float partial[64];
    partial[threadIdx.x] = v;
    __syncthreads();
    for (int s = 32; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    return partial[0];
}
__device__ void stage(const float* in, float* out) {
    extern __shared__ float staging[];
    staging[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = staging[blockDim.x - 1 - threadIdx.x] + block_sum(1.0f);
}
__global__ void k(const float* in, float* out, float* tail) {
    stage(in, out);
    extern __shared__ float whole[];
    __syncthreads();
    if (threadIdx.x == 0) tail[blockIdx.x] = whole[5];
}"""
    x = rng.standard_normal(128).astype(np.float32)
    tr, res = port(src, "k", {"in": x, "out": np.zeros(128, np.float32), "tail": np.zeros(2, np.float32)},
                   shared_mem=64 * 4)
    # Metal takes threadgroup variables in the kernel's scope only: the helpers take them as parameters
    helpers = tr.launch_metal_header
    assert "threadgroup float partial[64];" not in helpers and "threadgroup float* partial" in helpers
    assert "threadgroup float partial[64];" in tr.launch_metal_source
    assert_ported(res)


def test_a_shared_memory_proxy_object_of_a_local_header(tmp_path):
    (tmp_path / "pool.cuh").write_text("""
#pragma once
template <typename T> struct ScratchPool {
    __device__ T *base() { extern __shared__ unsigned char ks_raw_pool[]; return (T *)ks_raw_pool; }
};
""")
    src = """#include "pool.cuh"
__global__ void k(const int* in, int* out) {
    ScratchPool<int> pool;
    int *tile = pool.base();
    tile[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x] * 3;
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = tile[(threadIdx.x + 1) % blockDim.x];
}"""
    f = tmp_path / "t.cu"
    f.write_text(src)
    parsed = find_kernels(src, str(f))
    tr = translate_kernel(parsed, "k", str(f))
    assert "ScratchPool" not in tr.launch_metal_source and not [e for e in tr.errors if e.scope == "kernel"]
    res = check_port(tr.module_text, src, "k", {"args": {"in": rng.integers(0, 99, 128).astype(np.int32),
                                                         "out": np.zeros(128, np.int32)},
                                                "grid": (2, 1, 1), "block": (64, 1, 1), "shared_mem": 256,
                                                "template_args": []}, filename=str(f), include_dirs=[str(tmp_path)])
    assert_ported(res)


def test_constant_tables_the_program_fills_and_device_counters_travel_as_buffers():
    src = """
#define TAPS 4
__constant__ float weights[TAPS];
__constant__ int offsets[2][TAPS];
__device__ unsigned int visits = 0;
__device__ float weighted(const float* x, int i) {
    float s = 0.0f;
    for (int t = 0; t < TAPS; t++) s += weights[t] * x[(i + offsets[1][t]) % 128];
    return s;
}
__global__ void k(const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = weighted(x, i) + offsets[0][i % TAPS];
    if (threadIdx.x == 0) atomicAdd(&visits, 1u);
}"""
    args = {"x": rng.standard_normal(128).astype(np.float32), "y": np.zeros(128, np.float32),
            "weights": np.array([0.5, -1.0, 2.0, 0.25], np.float32),
            "offsets": np.array([[1, 2, 3, 4], [0, 5, 17, 64]], np.int32)}
    tr, res = port(src, "k", args)
    assert [s["name"] for s in tr.symbols] == ["weights", "offsets", "visits"]
    assert "ks_sym_offsets_in" in tr.launch_input_names and "ks_sym_visits_inout" in tr.launch_input_names
    assert_ported(res)


def test_preprocessor_conditionals_in_a_parameter_list_are_decided_by_the_files_macros():
    src = """
#ifndef WITH_BIAS
#define WITH_BIAS 1
#endif
#if WITH_BIAS && !defined(LEGACY_API)
#define SCALE 2
#else
#define SCALE 3
#endif
__global__ void k(float* out,
#if WITH_BIAS
                  const float* bias,
#else
                  const float* unused,
#endif
#ifdef LEGACY_API
                  int legacy,
#endif
                  const float* in) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
#if WITH_BIAS
    out[i] = SCALE * in[i] + bias[i];
#else
    out[i] = in[i];
#endif
}"""
    parsed = find_kernels(src, "t.cu")
    tr = translate_kernel(parsed, "k", "t.cu")
    assert [p["name"] for p in tr.params] == ["out", "bias", "in"] and not tr.errors
    x = rng.standard_normal(128).astype(np.float32)
    _, res = port(src, "k", {"out": np.zeros(128, np.float32), "bias": x[::-1].copy(), "in": x})
    assert_ported(res)


def test_conditionals_on_unknown_system_macros_are_left_to_the_compiler():
    text = "#ifdef __CUDA_ARCH__\nint a;\n#else\nint b;\n#endif\n#if USER_FLAG\nint c;\n#endif\n"
    out, _ = resolve_conditionals(text, known_macros([]))
    assert out.splitlines()[:5] == text.splitlines()[:5]   # kept as written, both branches
    assert "int c;" not in out and out.count("\n") == text.count("\n")   # an unseen name is 0; lines kept


def test_a_texture_the_launch_does_not_bind_is_an_empty_one_and_a_missing_scalar_is_named():
    src = """
texture<float, 1, cudaReadModeElementType> lut;
__global__ void k(float* out, int use_lut) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = use_lut ? tex1Dfetch(lut, i) : 2.0f * i;
}"""
    tr, res = port(src, "k", {"out": np.zeros(128, np.float32), "use_lut": 0})
    assert any(p.get("texture") for p in tr.params)
    assert_ported(res)
    from ksearch_engine.sim import install_mlx_shim
    install_mlx_shim()
    ns = {}
    exec(compile(tr.module_text, "port", "exec"), ns)
    import mlx.core as mx
    with pytest.raises(TypeError, match="use_lut"):
        ns["launch"](mx.zeros((128,)), None, *([None] * (len(ns["PARAMS"]) - 2)), grid=(2, 1, 1), block=(64, 1, 1))


def test_a_struct_of_doubles_passed_by_value_travels_repacked_as_the_ports_floats():
    src = """
typedef struct { double gain; int n; double bias[2]; } Params;
__global__ void k(Params p, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) y[i] = p.gain * i + p.bias[i % 2];
}"""
    c = np.dtype({"names": ["gain", "n", "bias"], "formats": ["<f8", "<i4", ("<f8", (2,))],
                  "offsets": [0, 8, 16], "itemsize": 32})   # nvcc's layout: the bytes a program passes
    raw = np.array([(0.75, 100, (1.5, -2.0))], dtype=c).tobytes()
    tr, res = port(src, "k", {"p": raw, "y": np.zeros(128, np.float32)})
    p = next(e for e in tr.params if e["name"] == "p")
    assert p["struct"] and p["port_bytes"] == 16 and p["repack"][0] == [0, "<f8", 0, "<f4"]
    assert_ported(res)


def test_a_kernel_file_included_by_a_unit_without_main_sees_that_units_headers(tmp_path):
    from ksearch_engine.portfile import program_prefix
    (tmp_path / "defs.h").write_text("typedef struct { int rows; int cols; } Shape;\n")
    (tmp_path / "kern.cu").write_text("__global__ void k(Shape s, int* y) { y[threadIdx.x] = s.rows * s.cols; }\n")
    (tmp_path / "wrap.cu").write_text('#include "defs.h"\n#include "kern.cu"\nvoid run(int* y) {}\n')
    assert '#include "defs.h"' in program_prefix(None, tmp_path / "kern.cu")
