"""find_kernels: kernels, helpers, launch sites and ranges in CUDA, Metal and MLX-Python files,
and what happens with broken, truncated, non-CUDA and very large files."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from ksearch_engine.source import find_kernels

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"

# (file, kernel, [(param, type, pointer, const)], template params, launch (template args, grid, block, smem), helpers)
EXPECTED = [
    ("gelu/gelu.cu", "gelu_kernel", [("x", "float", True, True), ("y", "float", True, False), ("n", "int", False, False)],
     [], ([], "blocks", "threads", "0"), ["gelu_tanh"]),
    ("softmax/softmax.cu", "softmax_kernel",
     [("x", "float", True, True), ("y", "float", True, False), ("rows", "int", False, False), ("cols", "int", False, False)],
     [], ([], "rows", "threads", "0"), ["warp_reduce_max", "warp_reduce_sum"]),
    ("rmsnorm/rmsnorm.cu", "rmsnorm_kernel",
     [("x", "float", True, True), ("w", "float", True, True), ("y", "float", True, False), ("rows", "int", False, False),
      ("cols", "int", False, False), ("eps", "float", False, False)],
     [], ([], "rows", "threads", "smem"), ["warp_sum_down"]),
    ("matmul/matmul.cu", "matmul_tiled",
     [("A", "float", True, True), ("B", "float", True, True), ("C", "float", True, False), ("M", "int", False, False),
      ("N", "int", False, False), ("K", "int", False, False)], [], ([], "grid", "block", "0"), []),
    ("attention/flash_attention.cu", "flash_attention_kernel",
     [("q", "float", True, True), ("k", "float", True, True), ("v", "float", True, True), ("o", "float", True, False),
      ("q_len", "int", False, False), ("kv_len", "int", False, False), ("scale", "float", False, False)],
     ["HEAD_DIM"], (["64"], "grid", "threads", "0"), []),
    ("mamba/selective_scan.cu", "selective_scan_kernel",
     [("u", "float", True, True), ("delta", "float", True, True), ("A", "float", True, True), ("Bm", "float", True, True),
      ("Cm", "float", True, True), ("Dskip", "float", True, True), ("y", "float", True, False),
      ("seqlen", "int", False, False), ("dim", "int", False, False)], ["NSTATE"], (["16"], "grid", "threads", "0"), []),
    ("moe/topk_routing.cu", "topk_routing_kernel",
     [("logits", "float", True, True), ("weights", "float", True, False), ("ids", "int", True, False),
      ("num_tokens", "int", False, False), ("num_experts", "int", False, False)], ["TOPK"],
     (["2"], "blocks", "threads", "0"), []),
    ("paged_attention/paged_decode.cu", "paged_decode_kernel",
     [("q", "float", True, True), ("k_cache", "float", True, True), ("v_cache", "float", True, True),
      ("block_table", "int", True, True), ("context_lens", "int", True, True), ("out", "float", True, False),
      ("num_heads", "int", False, False), ("num_kv_heads", "int", False, False), ("page_size", "int", False, False),
      ("max_pages", "int", False, False), ("scale", "float", False, False)], ["HEAD_DIM"],
     (["64"], "grid", "32", "0"), []),
]


@pytest.mark.parametrize("rel,name,params,tparams,launch,helpers", EXPECTED, ids=[e[0] for e in EXPECTED])
def test_each_example_kernel_is_found_with_its_signature_and_launch(rel, name, params, tparams, launch, helpers):
    text = (EX / rel).read_text()
    result = find_kernels(text, str(EX / rel))
    assert [k.name for k in result.kernels] == [name]
    assert [d for d in result.diagnostics if d.severity == "error"] == []
    k = result.kernels[0]
    assert k.language == "cuda" and k.qualifier == "__global__"
    assert [(p.name, p.type, p.pointer, p.is_const) for p in k.params] == params
    assert [t.name for t in k.template_params] == tparams
    assert sorted(h.name for h in result.helpers) == sorted(helpers)
    assert all(h.qualifier == "__device__" for h in result.helpers)
    # ranges: from the signature (template line included) to the closing brace; the name range covers the name
    lines = text.splitlines()
    start, end = k.range.start, k.range.end
    first = lines[start.line][start.character:]
    assert first.startswith("template") if tparams else first.startswith("__global__")
    assert lines[end.line][end.character - 1] == "}"
    assert text.encode()[k.byte_range[0]:k.byte_range[1]].decode() == k.text
    assert k.text.rstrip().endswith("}") and k.body.strip() in k.text
    nl = lines[k.name_range.start.line]
    assert nl[k.name_range.start.character:k.name_range.end.character] == name
    # launch site: kernel<targs><<<grid, block, smem, stream>>>(args) in the host function
    assert len(k.launches) == 1
    ls = k.launches[0]
    assert (ls.template_args, ls.grid, ls.block, ls.shared_mem) == launch
    assert ls.stream == "stream"
    assert ls.args == [p[0] for p in params]
    assert "<<<" in lines[ls.line] and name in lines[ls.line]
    assert ls.host_function is not None and ls.host_function in text


def test_shared_memory_static_and_dynamic():
    mm = find_kernels((EX / "matmul/matmul.cu").read_text(), "matmul.cu").kernels[0]
    assert [(s.name, s.type, s.sizes, s.dynamic) for s in mm.shared] == [
        ("As", "float", ["TILE", "TILE"], False), ("Bs", "float", ["TILE", "TILE + 1"], False)]
    rms = find_kernels((EX / "rmsnorm/rmsnorm.cu").read_text(), "rmsnorm.cu").kernels[0]
    assert [(s.name, s.dynamic) for s in rms.shared] == [("warp_sums", True)]
    text = (EX / "rmsnorm/rmsnorm.cu").read_text()
    assert "extern __shared__" in text.splitlines()[rms.shared[0].line]


def test_preamble_keeps_macros_the_kernel_needs():
    r = find_kernels((EX / "matmul/matmul.cu").read_text(), "matmul.cu")
    assert "#define TILE 16" in r.preamble


def test_restrict_and_const_qualifiers_are_recorded():
    k = find_kernels((EX / "gelu/gelu.cu").read_text(), "gelu.cu").kernels[0]
    assert k.params[0].qualifiers == ["const", "__restrict__"]
    assert k.params[1].qualifiers == ["__restrict__"]


METAL = """#include <metal_stdlib>
using namespace metal;

inline float sq(float a) { return a * a; }

template <typename T>
[[kernel]] void scale_add(device const T* x [[buffer(0)]], device T* y [[buffer(1)]],
                          constant uint& n [[buffer(2)]], uint tid [[thread_position_in_grid]]) {
    threadgroup float tile[64];
    if (tid < n) y[tid] = x[tid] * 2;
}
kernel void fill_ones(device float* y [[buffer(0)]], uint2 gid [[thread_position_in_grid]]) { y[gid.x] = 1; }
"""


def test_metal_kernels_address_spaces_and_attributes():
    r = find_kernels(METAL, "k.metal")
    assert r.language == "metal"
    assert [k.name for k in r.kernels] == ["scale_add", "fill_ones"]
    assert [h.name for h in r.helpers] == ["sq"]
    sa = r.kernels[0]
    assert sa.qualifier == "kernel"
    assert [(p.name, p.type, p.qualifiers, p.pointer, p.reference, p.attribute) for p in sa.params] == [
        ("x", "T", ["device", "const"], True, False, "[[buffer(0)]]"),
        ("y", "T", ["device"], True, False, "[[buffer(1)]]"),
        ("n", "uint", ["constant"], False, True, "[[buffer(2)]]"),
        ("tid", "uint", [], False, False, "[[thread_position_in_grid]]")]
    assert [(s.name, s.sizes) for s in sa.shared] == [("tile", ["64"])]
    assert [t.name for t in sa.template_params] == ["T"]
    fo = r.kernels[1]
    line = METAL.splitlines()[fo.range.start.line]
    assert line[fo.range.start.character:].startswith("kernel void fill_ones")


PY = '''import mlx.core as mx

SRC = """
    uint i = thread_position_in_grid.x;
    threadgroup float s[32];
    out[i] = inp[i] * 2;
"""

double_it = mx.fast.metal_kernel(name="double_it", input_names=["inp"], output_names=["out"], source=SRC)


def make():
    return mx.fast.cuda_kernel(name="copy_it", input_names=["a"], output_names=["b"],
                               source="b[threadIdx.x] = a[threadIdx.x];")
'''


def test_python_mlx_kernels_resolve_source_variables():
    r = find_kernels(PY, "kernels.py")
    assert [(k.name, k.language) for k in r.kernels] == [("double_it", "mlx-metal"), ("copy_it", "mlx-cuda")]
    d = r.kernels[0]
    assert d.input_names == ["inp"] and d.output_names == ["out"]
    assert "threadgroup float s[32]" in d.body
    assert [(s.name, s.sizes) for s in d.shared] == [("s", ["32"])]
    lines = PY.splitlines()
    assert lines[d.range.start.line][d.range.start.character:].startswith('"""')
    assert lines[d.name_range.start.line][d.name_range.start.character:d.name_range.end.character] == '"double_it"'
    c = r.kernels[1]
    assert lines[c.range.start.line][c.range.start.character:c.range.end.character] == \
        '"b[threadIdx.x] = a[threadIdx.x];"'


def test_python_with_a_syntax_error_keeps_kernels_above_it():
    broken = PY.replace("def make():", "def make(:")
    r = find_kernels(broken, "kernels.py")
    assert [k.name for k in r.kernels] == ["double_it"]
    err = [d for d in r.diagnostics if d.severity == "error"]
    assert err and err[0].line == broken.splitlines().index("def make(:")


def test_truncated_kernel_is_recovered_with_a_diagnostic():
    text = (EX / "softmax/softmax.cu").read_text()
    cut = text[: text.index("const float inv = 1.0f / s;") + 10]   # mid-statement, inside the body
    r = find_kernels(cut, "softmax.cu")
    assert [k.name for k in r.kernels] == ["softmax_kernel"]
    assert [h.name for h in r.helpers] == ["warp_reduce_max", "warp_reduce_sum"]
    kernel_line = text.splitlines().index(next(l for l in text.splitlines() if "__global__ void softmax_kernel" in l))
    assert any(d.line == kernel_line for d in r.diagnostics)
    assert any("closing brace" in d.message for d in r.diagnostics)
    assert [p.name for p in r.kernels[0].params] == ["x", "y", "rows", "cols"]


def test_syntax_error_inside_one_kernel_does_not_hide_the_others():
    text = (EX / "gelu/gelu.cu").read_text() + (EX / "matmul/matmul.cu").read_text()
    broken = text.replace("int i = blockIdx.x * blockDim.x + threadIdx.x;", "int i = blockIdx.x * ) + ;")
    r = find_kernels(broken, "two.cu")
    assert {k.name for k in r.kernels} == {"gelu_kernel", "matmul_tiled"}
    bad_line = broken.splitlines().index("    int i = blockIdx.x * ) + ;")
    assert any(d.severity == "error" and d.line == bad_line for d in r.diagnostics)


def test_signature_cut_in_half_gives_no_kernel_but_a_located_error():
    text = (EX / "softmax/softmax.cu").read_text()
    cut = text[: text.index("int rows, int cols)")]
    r = find_kernels(cut, "softmax.cu")
    assert r.kernels == []
    assert any(d.severity == "error" for d in r.diagnostics)


@pytest.mark.parametrize("content", [
    "# ksearch\n\nA *markdown* README, renamed to .cu by mistake.\n\n- one\n- two (three)\n",
    "[build-system]\nrequires = [\"setuptools\"]\n",
])
def test_text_that_is_not_cuda(content):
    r = find_kernels(content, "README.cu")
    assert r.kernels == []
    assert any("does not look like" in d.message for d in r.diagnostics)


def test_binary_junk():
    r = find_kernels(bytes(range(256)) * 64, "junk.cu")
    assert r.kernels == [] and "binary" in r.diagnostics[0].message


def test_host_only_file_says_there_is_no_kernel():
    r = find_kernels("int add(int a, int b) { return a + b; }\n", "host.cu")
    assert r.kernels == [] and r.diagnostics[0].severity == "info"


def test_unknown_suffix():
    r = find_kernels("x", "notes.txt")
    assert r.kernels == [] and "unsupported file type" in r.diagnostics[0].message


def _all_examples() -> str:
    return "".join(p.read_text() for p in sorted(EX.glob("*/*.cu")))


def test_five_megabyte_generated_file_parses_in_under_a_second():
    # A realistic big .cu: a generated lookup table plus real kernels after it.
    table = "__constant__ float table[] = {" + ", ".join(f"{i}.5f" for i in range(480000)) + "};\n"
    text = table + _all_examples()
    assert len(text) >= 5_000_000
    elapsed = []
    for _ in range(2):   # CPU time, best of two: other processes share this machine
        t0 = time.process_time()
        r = find_kernels(text, "big.cu")
        elapsed.append(time.process_time() - t0)
    assert len(r.kernels) == 8
    assert min(elapsed) < 1.0, f"{min(elapsed):.2f} s"
    k = r.kernels[-1]
    assert text.splitlines()[k.name_range.start.line].find(k.name) == k.name_range.start.character


def test_megabytes_of_dense_kernels_stay_fast():
    # Worst case: every byte is kernel code (about 800 kernels in 2 MB; a 5 MB one takes about 2 s here).
    # The bound is relative to tree-sitter's own parse of the same text, so a busy machine does not fail it.
    from ksearch_engine.source import parse_bytes
    unit = _all_examples().replace("#define", "// #define")
    text = unit * (2_000_000 // len(unit) + 1)
    t0 = time.process_time()
    parse_bytes(text.encode(), "cuda")
    parse_only = time.process_time() - t0
    t0 = time.process_time()
    r = find_kernels(text, "dense.cu")
    elapsed = time.process_time() - t0
    assert len(r.kernels) == 8 * (2_000_000 // len(unit) + 1)
    assert elapsed < 4 * parse_only, f"{elapsed:.2f} s for a {parse_only:.2f} s parse"


def test_kernels_inside_preprocessor_blocks_extern_c_and_namespaces():
    src = """#if defined(USE_FAST)
__global__ void a(float* x) { x[0] = 1; }
#else
__global__ void b(float* x) { x[0] = 2; }
#endif
extern "C" {
__global__ void c(float* x) { x[0] = 3; }
}
extern "C" __global__ void d(float* x) { x[0] = 4; }
namespace n1 { namespace n2 { template <int N> __global__ void e(float* x) { x[0] = N; } } }
void host(float* x) { a<<<1, 1>>>(x); n1::n2::e<4><<<dim3(1), dim3(32)>>>(x); }
"""
    r = find_kernels(src, "k.cu")
    assert [(k.name, k.range.start.line) for k in r.kernels] == [("a", 1), ("b", 3), ("c", 6), ("d", 8), ("e", 9)]
    e = r.kernels[-1]
    assert [(ls.template_args, ls.grid, ls.block, ls.line) for ls in e.launches] == [(["4"], "dim3(1)", "dim3(32)", 10)]
