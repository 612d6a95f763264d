"""translate_kernel: each example becomes a valid MLX module; launch configurations, shapes and the task
hint follow the CUDA code; what cannot be translated is reported with its line."""
from __future__ import annotations

import re
import types
from pathlib import Path

import mlx.core as mx
import pytest

from ksearch_engine.source import find_kernels
from ksearch_engine.task import InputSpec
from ksearch_engine.translate import TranslateError, module_path_for, translate_kernel

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*/*.cu"))
CUDA_LEFTOVERS = re.compile(r"\b(threadIdx|blockIdx|blockDim|gridDim|__syncthreads|__shfl\w*|__shared__|__restrict__|"
                            r"__expf|expf|fmaxf|rsqrtf|tanhf|__ldg|__device__|__forceinline__|warpSize)\b")


def _translate(path: Path, text: str | None = None):
    text = (path.read_text() if text is None else text)
    result = find_kernels(text, str(path))
    return result, translate_kernel(result, result.kernels[0].name, str(path))


def _load(module_text: str) -> types.ModuleType:
    mod = types.ModuleType("port")
    exec(compile(module_text, "port.py", "exec"), mod.__dict__)
    return mod


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_each_example_translates_cleanly(path):
    _, tr = _translate(path)
    assert [i for i in tr.report if i.severity in ("error", "warning")] == []
    compile(tr.module_text, tr.module_path, "exec")
    mod = _load(tr.module_text)
    for name in ("kernel", "launch_config", "reference", "METAL_SOURCE", "CUDA_SOURCE"):
        assert hasattr(mod, name), name
    assert mod.METAL_SOURCE == tr.metal_source and mod.CUDA_SOURCE == tr.cuda_source
    assert CUDA_LEFTOVERS.search(tr.metal_source + tr.header) is None, CUDA_LEFTOVERS.search(tr.metal_source + tr.header)
    assert "mx.fast.metal_kernel" in tr.module_text and "mx.fast.cuda_kernel" in tr.module_text
    assert tr.module_path.endswith(path.stem + "_mlx.py")
    assert tr.family is not None and tr.family.replace("_", "") in str(path).replace("_", "")
    # the task hint is usable by ksearch_engine.task
    specs = [InputSpec(**{k: v for k, v in i.items()}) for i in tr.task_hint["inputs"]]
    shapes = [s.resolve_shape(tr.task_hint["dims"]) for s in specs]
    assert all(all(d > 0 for d in s) for s in shapes)
    assert [o["name"] for o in tr.task_hint["outputs"]] == tr.output_names


def test_cuda_port_keeps_the_original_body():
    result, tr = _translate(ROOT / "examples/softmax/softmax.cu")
    k = result.kernels[0]
    body_lines = [line.strip() for line in k.body.strip().splitlines()]
    port_lines = [line.strip() for line in tr.cuda_source.strip().splitlines()]
    assert port_lines[-len(body_lines):] == body_lines
    assert "int rows = rows_arg[0];" in tr.cuda_source and "int rows = rows_arg[0];" in tr.metal_source
    assert tr.input_names == ["x", "rows_arg", "cols_arg"] and tr.output_names == ["y"]
    assert "__device__ float warp_reduce_max" in tr.cuda_header
    assert "inline float warp_reduce_max" in tr.header and "simd_shuffle_xor" in tr.header
    for rid in ("index.threadIdx", "index.blockIdx", "index.blockDim", "sync.syncthreads", "warp.shfl_xor",
                "math.__expf", "math.fmaxf", "mem.shared", "fn.device_helper", "mem.local_pointer_space"):
        assert rid in tr.rules_applied, rid


def _cfg(path: str, *shapes, **kw):
    _, tr = _translate(ROOT / path)
    mod = _load(tr.module_text)
    arrays = [mx.zeros(s, dtype=mx.int32 if isinstance(s, tuple) and s and s[-1] == -1 else mx.float32) for s in shapes]
    return tr, mod.launch_config(*arrays, **kw)


def test_launch_configuration_comes_from_the_host_code():
    _, cfg = _cfg("examples/gelu/gelu.cu", (1000,))
    assert (cfg["grid"], cfg["block"], cfg["scalars"]) == ((4, 1, 1), (256, 1, 1), {"n": 1000})
    _, cfg = _cfg("examples/matmul/matmul.cu", (20, 40), (40, 50))
    assert (cfg["grid"], cfg["block"]) == ((4, 2, 1), (16, 16, 1))
    assert cfg["scalars"] == {"M": 20, "N": 50, "K": 40} and cfg["output_shapes"] == [(20, 50)]
    _, cfg = _cfg("examples/softmax/softmax.cu", (7, 33))
    assert (cfg["grid"], cfg["block"]) == ((7, 1, 1), (256, 1, 1))


def test_dynamic_shared_memory_becomes_a_template_size_on_metal():
    tr, cfg = _cfg("examples/rmsnorm/rmsnorm.cu", (3, 10), (10,))
    assert "threadgroup float warp_sums[WARP_SUMS_SIZE];" in tr.metal_source
    assert "extern __shared__ float warp_sums[];" in tr.cuda_source
    assert cfg["shared_mem"] == 16 and ("WARP_SUMS_SIZE", 4) in cfg["template"]
    assert cfg["scalars"]["eps"] == pytest.approx(1e-5)
    assert "mem.dynamic_shared" in tr.rules_applied


def test_template_parameters_and_output_shapes_from_templates():
    tr, cfg = _cfg("examples/moe/topk_routing.cu", (5, 8))
    assert cfg["template"] == [("TOPK", 2)]
    assert cfg["output_shapes"] == [(5, 2), (5, 2)] and cfg["output_dtypes"] == [mx.float32, mx.int32]
    tr, cfg = _cfg("examples/attention/flash_attention.cu", (2, 10, 64), (2, 12, 64), (2, 12, 64))
    assert cfg["grid"] == (1, 2, 1) and cfg["block"] == (64, 1, 1)
    assert cfg["scalars"]["scale"] == pytest.approx(1 / 8)


def test_scalar_kernel_arguments_follow_the_host_expressions():
    text = (ROOT / "examples/gelu/gelu.cu").read_text().replace(
        "gelu_kernel<<<blocks, threads, 0, stream>>>(x, y, n);", "gelu_kernel<<<blocks, threads, 0, stream>>>(x, y, n / 2);")
    _, tr = _translate(ROOT / "examples/gelu/gelu.cu", text)
    cfg = _load(tr.module_text).launch_config(mx.zeros((10,)))
    assert cfg["scalars"] == {"n": 5}


UNSUPPORTED = """#include <cooperative_groups.h>
namespace cg = cooperative_groups;

__global__ void child(float* x) { x[0] = 1.0f; }

__global__ void weird(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float* scratch;
    cudaMallocAsync((void**)&scratch, 64, 0);
    unsigned lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    auto grid = cg::this_grid();
    float v = __shfl_xor_sync(0xffffffff, x[i], 1, 16);
    grid.sync();
    child<<<1, 1>>>(y);
    __syncthreads();
    if (i < n) y[i] = v;
}
"""


def test_unsupported_constructs_are_reported_with_their_lines_and_the_rest_is_translated():
    result = find_kernels(UNSUPPORTED, "weird.cu")
    tr = translate_kernel(result, "weird", "weird.cu")
    lines = UNSUPPORTED.splitlines()

    def line_of(snippet):
        return next(i for i, l in enumerate(lines) if snippet in l)

    errors = {(i.construct.split("(")[0].split("<")[0], i.line) for i in tr.report if i.severity == "error"}
    assert ("cudaMallocAsync", line_of("cudaMallocAsync")) in errors
    assert ("asm", line_of("asm volatile")) in errors
    assert ("grid.sync", line_of("grid.sync()")) in errors
    assert ("child", line_of("child<<<1, 1>>>")) in errors
    assert "__shfl_xor_sync" not in {c for c, _ in errors}   # width 16: translated with CUDA's lane rules
    assert "threadgroup_barrier(mem_flags::mem_threadgroup);" in tr.metal_source   # the rest still translated
    assert "ks_shfl_xor_w(x[i], 1, 16, thread_index_in_simdgroup)" in tr.metal_source
    compile(tr.module_text, "weird_mlx.py", "exec")
    assert "Translation report" in tr.module_text


ATOMIC = """__global__ void histogram(const int* values, int* counts, int* total, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&counts[values[i]], 1);
        if (i == 0) total[0] = n;
    }
}
"""


def test_atomics_make_outputs_atomic_and_plain_stores_atomic_too():
    tr = translate_kernel(find_kernels(ATOMIC, "hist.cu"), "histogram", "hist.cu")
    assert tr.atomic_outputs and tr.output_names == ["counts", "total"]
    assert "atomic_fetch_add_explicit(&counts[values[i]], 1, memory_order_relaxed);" in tr.metal_source
    assert "atomic_store_explicit(&total[0], n, memory_order_relaxed);" in tr.metal_source
    assert "ATOMIC_OUTPUTS = True" in tr.module_text
    assert any("no launch site" in i.message for i in tr.report)
    assert any("not recognized" in i.message for i in tr.report)
    compile(tr.module_text, "hist_mlx.py", "exec")


def test_kernel_without_launch_site_or_family_takes_its_sizes_as_keywords():
    src = """__global__ void scale2d(const float* a, float* b, int rows, int cols, float s) {
    int r = blockIdx.y, c = threadIdx.x;
    if (r < rows && c < cols) b[r * cols + c] = a[r * cols + c] * s;
}"""
    tr = translate_kernel(find_kernels(src, "scale2d.cu"), "scale2d", "scale2d.cu")
    mod = _load(tr.module_text)
    with pytest.raises(TypeError, match="pass rows="):
        mod.launch_config(mx.zeros((2, 3)))
    cfg = mod.launch_config(mx.zeros((2, 3)), rows=2, cols=3, s=2.0)
    assert cfg["scalars"] == {"rows": 2, "cols": 3, "s": 2.0}
    assert tr.task_hint["family"] is None


def test_apple_threadgroup_limit_is_checked():
    src = """__global__ void big(const float* x, float* y) {
    __shared__ float tile[64][160];
    tile[threadIdx.y][threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = tile[0][threadIdx.x];
}"""
    tr = translate_kernel(find_kernels(src, "big.cu"), "big", "big.cu")
    assert any("40960 bytes" in i.message and i.line == 1 for i in tr.report if i.severity == "error")


def test_helpers_reading_thread_indices_take_them_as_parameters_in_metal():
    src = """__device__ int lane_id() { return threadIdx.x % 32; }
__global__ void k(float* y) { y[threadIdx.x] = lane_id(); }
void go(float* y) { k<<<1, 32>>>(y); }"""
    tr = translate_kernel(find_kernels(src, "h.cu"), "k", "h.cu")
    assert not [i for i in tr.report if i.severity == "error" and i.scope == "kernel"]
    assert "inline int lane_id(uint3 thread_position_in_threadgroup)" in tr.header
    assert "lane_id(thread_position_in_threadgroup)" in tr.metal_source


def test_errors_name_the_file_and_the_kernels():
    result = find_kernels((ROOT / "examples/gelu/gelu.cu").read_text(), "gelu.cu")
    with pytest.raises(TranslateError, match="no kernel named 'nope'.*gelu_kernel"):
        translate_kernel(result, "nope", "gelu.cu")
    metal = find_kernels("kernel void f(device float* y [[buffer(0)]]) { y[0] = 1; }", "f.metal")
    with pytest.raises(TranslateError, match="metal kernel"):
        translate_kernel(metal, "f", "f.metal")


def test_module_path_is_next_to_the_source():
    assert module_path_for("/a/b/softmax.cu") == Path("/a/b/softmax_mlx.py")


GRID_STRIDE = (Path(__file__).resolve().parents[1] / "data" / "grid_stride.cu").read_text()


def test_namespaced_template_launch_with_macros_and_host_helpers():
    result = find_kernels(GRID_STRIDE, "scale.cu")
    assert result.kernels[0].launches[0].template_args == ["float", "256"]
    tr = translate_kernel(result, "scale", "scale.cu")
    assert [i for i in tr.report if i.severity == "error"] == []
    mod = _load(tr.module_text)
    cfg = mod.launch_config(mx.zeros((3000,)), s=3.0)
    assert cfg["grid"] == (4, 1, 1)                      # clamp_blocks(CEIL_DIV(3000, 256)) = min(12, 4)
    assert cfg["template"] == [("T", mx.float32), ("BLOCK", 256)]
    assert cfg["scalars"] == {"s": 3.0, "n": 3000}
    assert "T s = s_arg[0];" in tr.metal_source and "threadgroups_per_grid.x * BLOCK" in tr.metal_source
    cfg = mod.launch_config(mx.zeros((300,)), s=1.0)
    assert cfg["grid"] == (2, 1, 1)


def test_struct_parameters_are_reported():
    src = """struct Params { int n; float alpha; };
__global__ void axpy(Params p, const float* x, float* y) { int i = threadIdx.x; if (i < p.n) y[i] += p.alpha * x[i]; }
void go(Params p, const float* x, float* y) { axpy<<<1, p.n>>>(p, x, y); }"""
    tr = translate_kernel(find_kernels(src, "axpy.cu"), "axpy", "axpy.cu")
    assert any(i.construct == "Params p" and i.line == 1 and i.severity == "error" for i in tr.report)
    assert any("p.n" in i.message and i.line == 2 for i in tr.report)
    compile(tr.module_text, "axpy_mlx.py", "exec")


def test_translate_file_reads_and_names_problems(tmp_path):
    from ksearch_engine.translate import translate_file
    tr = translate_file(ROOT / "examples/gelu/gelu.cu")
    assert tr.kernel == "gelu_kernel" and tr.family == "gelu"
    (tmp_path / "README.cu").write_text("# not CUDA\n\nJust words (and more words).\n")
    with pytest.raises(TranslateError, match="README.cu: nothing to port"):
        translate_file(tmp_path / "README.cu")
    with pytest.raises(TranslateError, match="cannot read"):
        translate_file(tmp_path / "missing.cu")


def test_deep_nesting_translates_or_is_reported_never_crashes():
    deep = "__global__ void k(float* x) {" + "if (x) {" * 3000 + "x[0] = __expf(1.0f);" + "}" * 3000 + "}"
    tr = translate_kernel(find_kernels(deep, "deep.cu"), "k", "deep.cu")
    assert "fast::exp(float(1.0f))" in tr.metal_source
    ns = "namespace a { " * 2000 + "__global__ void k(float* x) { x[0] = 1; }" + "}" * 2000
    launch = "\nvoid h(float* x) { k<<<" + "(" * 3000 + "1" + ")" * 3000 + ", 32>>>(x); }"
    result = find_kernels(ns + launch, "ns.cu")
    assert [k.name for k in result.kernels] == ["k"]
    tr = translate_kernel(result, "k", "ns.cu")
    assert any("nested too deeply" in i.message and i.line == 1 for i in tr.report)
