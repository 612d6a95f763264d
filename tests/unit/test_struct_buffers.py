"""Kernels whose parameters are structs: buffers of structs, structs by value, scalar typedefs and template types.

With no program to run them, the workload is inferred: a struct buffer is made as raw bytes with the struct's C
layout (translate.layout), field by field, and both ports must take the same bytes and leave the same fields.
Every test runs the real simulator (the original and both ports)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ksearch_engine.portfile import port_file
from ksearch_engine.sim import run_cuda_source
from ksearch_engine.source import find_kernels
from ksearch_engine.translate.check import compare
from ksearch_engine.translate.layout import LayoutError, resolve_scalar, struct_layout

STRUCTS = """
#define NKEYS 3
typedef unsigned short int u16;
struct Inner { char c; short s; };
typedef struct __align__(16) { float x; unsigned char tag; } Tagged;
struct Mixed {
    char a;
    int b[NKEYS + 1];
    struct Inner in;
    u16 h;
    float3 v;
    long long q;
    bool flag;
};
"""


def _one(tmp_path: Path, name: str, text: str, kernel: str | None = None):
    f = tmp_path / name
    f.write_text(text)
    r = port_file(f, write=False)
    return next(v for v in r.kernels if kernel is None or v.kernel == kernel)


def test_layout_matches_the_compilers_sizeof_and_offsetof():
    # the simulator compiles the CUDA as C++: its sizeof/offsetof are the ground truth for the computed layout
    src = STRUCTS + """
#include <stddef.h>
__global__ void probe(long long* out) {
    out[0] = sizeof(struct Mixed); out[1] = offsetof(struct Mixed, b); out[2] = offsetof(struct Mixed, in);
    out[3] = offsetof(struct Mixed, h); out[4] = offsetof(struct Mixed, v); out[5] = offsetof(struct Mixed, q);
    out[6] = offsetof(struct Mixed, flag); out[7] = sizeof(Tagged); out[8] = __alignof__(struct Mixed);
    out[9] = sizeof(struct Inner);
}
"""
    got = run_cuda_source(src, "probe", (1, 1, 1), (1, 1, 1), {"out": np.zeros(10, np.int64)},
                          filename="probe.cu")["out"]
    pre = find_kernels(src, "probe.cu").preamble
    mixed = struct_layout("Mixed", pre, {"NKEYS": 3})
    f = mixed.dtype.fields
    mine = [mixed.dtype.itemsize, f["b"][1], f["in"][1], f["h"][1], f["v"][1], f["q"][1], f["flag"][1],
            struct_layout("Tagged", pre).dtype.itemsize, mixed.align, struct_layout("Inner", pre).dtype.itemsize]
    assert mine == got.tolist()


def test_scalar_typedefs_and_template_types_are_scalars():
    pre = ["typedef float fp;", "#define real double", "typedef unsigned short int u16;"]
    assert resolve_scalar("fp", pre) == "float"
    assert resolve_scalar("const real", pre) == "double"
    assert resolve_scalar("u16", pre) == "unsigned short int"
    assert resolve_scalar("T", pre, {"T": "fp"}) == "float"
    assert resolve_scalar("Node", pre) is None


def test_buffer_of_typedef_scalars_is_verified(tmp_path):
    v = _one(tmp_path, "fp.cu", """
typedef float fp;
__global__ void scale(fp* y, const fp* x, fp a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
""")
    assert v.status == "verified", v.reason
    assert v.dialects == {"metal": "passed", "cuda": "passed"}


def test_template_pointer_from_its_launch_site_is_verified(tmp_path):
    v = _one(tmp_path, "tmpl.cu", """
template <class T> __global__ void twice(T* out, const T* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] + in[i];
}
void run(float* o, const float* i, int n) { twice<float><<<(n + 127) / 128, 128>>>(o, i, n); }
""")
    assert v.status == "verified", v.reason


def test_buffer_of_index_structs_is_verified(tmp_path):
    # Node's ints index another buffer: they must be small and non-negative, and that buffer grows as needed
    v = _one(tmp_path, "graph.cu", """
struct Node { int start; int count; };
__global__ void degree_sum(const Node* nodes, const int* edges, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float s = 0.0f;
        for (int e = nodes[i].start; e < nodes[i].start + nodes[i].count; e++) s += edges[e];
        out[i] = s;
    }
}
""")
    assert v.status == "verified", v.reason
    assert v.workload == "inferred" and v.dialects == {"metal": "passed", "cuda": "passed"}


def test_written_buffer_of_aligned_structs_is_verified(tmp_path):
    # __align__(16) with a char field: 16-byte elements with padding, written field by field by both ports
    v = _one(tmp_path, "aligned.cu", STRUCTS + """
__global__ void bump(Tagged* t, struct Mixed* m, float dx, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        t[i].x += dx;
        t[i].tag = (unsigned char)(t[i].tag + 1);
        m[i].b[NKEYS] = m[i].b[0] + m[i].in.s + (int)m[i].q;
        m[i].v.y = m[i].v.x * dx;
        m[i].flag = !m[i].flag;
    }
}
""")
    assert v.status == "verified", v.reason
    assert v.dialects == {"metal": "passed", "cuda": "passed"}


def test_struct_by_value_is_verified(tmp_path):
    v = _one(tmp_path, "byval.cu", """
typedef struct { int n; float scale; short shift; } Params;
__global__ void affine(Params p, float* y, const float* x) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) y[i] = p.scale * x[i] + (float)p.shift;
}
""")
    assert v.status == "verified", v.reason
    assert v.dialects == {"metal": "passed", "cuda": "passed"}


def test_struct_holding_a_pointer_is_named_with_its_field_and_line(tmp_path):
    v = _one(tmp_path, "linked.cu", """
typedef struct {
    float weight;
    float *coord;
} Point;
__global__ void weigh(Point* p, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = p[i].weight * p[i].coord[0];
}
""")
    # the kernel follows the pointer: no port can (test_struct_pointer_verdict.py), with or without a program
    assert v.status == "not_ported"
    assert "struct Point holds a pointer (field coord, linked.cu line 4)" in v.reason, v.reason
    assert "Traceback" not in v.reason


def test_layout_error_names_the_field():
    with pytest.raises(LayoutError) as e:
        struct_layout("S", ["struct S { int a; double d; };"])
    assert e.value.kind == "double" and e.value.field_name == "d"


def test_compare_of_struct_buffers_is_field_by_field():
    dt = np.dtype({"names": ["i", "f"], "formats": ["<i4", "<f4"], "offsets": [0, 4], "itemsize": 8})
    want = np.zeros(4, dt)
    want["f"] = [1.0, 2.0, 3.0, 4.0]
    near = want.copy()
    near["f"] += 1e-6                           # float fields within tolerance: not a byte-for-byte compare
    assert compare("p", near.view(np.uint8), want) is None
    bad = want.copy()
    bad["i"][2] = 7
    msg = compare("p", bad, want)
    assert msg is not None and "field 'i'" in msg and "[2]" in msg


def test_template_type_that_is_a_struct_or_a_typedef_is_verified(tmp_path):
    # launch() declares a template type MLX has no dtype for in an instantiation of its own
    text = """
typedef unsigned short int u16;
typedef struct __align__(8) { unsigned int l, a; } LA;
template <class TData> __global__ void copy(TData* out, const TData* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}
template <class TData> void run(TData* o, const TData* i, int n) { copy<TData><<<4, 64>>>(o, i, n); }
void all(void* o, void* i, int n) { run<u16>((u16*)o, (u16*)i, n); run<LA>((LA*)o, (LA*)i, n); }
"""
    f = tmp_path / "tcopy.cu"
    f.write_text(text)
    from ksearch_engine.portcheck import check_inferred
    from ksearch_engine.translate import translate_kernel
    parsed = find_kernels(text, str(f))
    k = parsed.kernels[0]
    tr = translate_kernel(parsed, k.name, str(f))
    from ksearch_engine.portinfer import infer_launch
    from ksearch_engine.portcheck import file_scope
    from ksearch_engine.translate.check import check_port
    pre, srcs = file_scope(text, f)
    for targ in ("u16", "LA"):
        rec, args = infer_launch(text, k, {}, filename=f.name, template_args=[targ], preamble=pre, sources=srcs)
        if targ == "LA":
            assert args["in"].dtype.itemsize == 8 and args["in"].dtype.names == ("l", "a")
        res = check_port(tr.module_text, text, k.name, {"args": args, "grid": rec.grid, "block": rec.block,
                                                        "shared_mem": 0, "template_args": [targ]},
                         filename=f.name)
        assert res.passed, (targ, res.message)


def test_template_type_no_launch_makes_concrete_is_named(tmp_path):
    # no launch makes T concrete: a representative instantiation is checked, and the verdict names it
    v = _one(tmp_path, "generic.cu", """
template <class T> __global__ void neg(T* out, const T* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = -in[i];
}
template <class T> void run(T* o, const T* i, int n) { neg<T><<<4, 64>>>(o, i, n); }
""")
    assert v.status == "verified", v.reason
    assert any("neg<float>" in n and "representative" in n for n in v.notes), v.notes


def test_struct_by_value_with_comments_and_an_enum_is_verified(tmp_path):
    # a `*` in a comment is no pointer; an enum field is an int
    v = _one(tmp_path, "byval2.cu", """
enum Mode { ADD, MUL };
struct Cfg {
    int n;        /* number of points * dims */
    enum Mode mode;
    float k;      // k * x
};
__global__ void apply(struct Cfg c, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < c.n) y[i] = c.mode == ADD ? y[i] + c.k : y[i] * c.k;
}
""")
    assert v.status == "verified", v.reason


def test_struct_by_value_holding_a_pointer_names_the_field(tmp_path):
    v = _one(tmp_path, "byvalptr.cu", """
struct View { int n; float* data; };
__global__ void fill(struct View v, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < v.n) y[i] = 1.0f;
}
""")
    assert v.status == "not_ported"
    assert "struct View holds a pointer (field data)" in v.reason, v.reason


def test_array_bound_from_a_conditional_define_chain():
    # the bound is what the preprocessor makes of an #ifdef/#elif/#else chain (none of its macros given: 7)
    pre = ["#ifdef WG_A\n#define ORDER WG_A\n#elif defined(WG_B)\n#define ORDER WG_B\n#else\n#define ORDER 7\n#endif",
           "typedef struct kn { int loc; int keys[ORDER + 1]; bool leaf; } kn;"]
    lay = struct_layout("kn", pre, {})
    assert lay.dtype.fields["keys"][0].shape == (8,)
    assert lay.dtype.itemsize == 4 + 8 * 4 + 4
