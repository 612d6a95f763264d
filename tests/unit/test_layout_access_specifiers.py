"""Structs and classes written the C++ way: `public:`/`private:`/`protected:` sections, member functions defined in
the body (no `;` after their closing brace), constructors with initializer lists, static members, default member
initializers. None of those is a data member: the layout (translate.layout) holds the data members only, at the
offsets the compiler gives them, and a kernel taking such objects is ported and checked against the original.

Every kernel here is small CUDA written for this test; the checks run the real simulator."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ksearch_engine.portfile import port_file
from ksearch_engine.sim import run_cuda_source
from ksearch_engine.source import find_kernels
from ksearch_engine.translate.headers import with_aggregates
from ksearch_engine.translate.layout import LayoutError, by_value_problem, struct_layout

CLASSES = """
class Vec3 {
public:
    float x, y, z;
    __host__ __device__ Vec3() : x(0.f), y(0.f), z(0.f) {}
    __host__ __device__ Vec3(float a, float b, float c) : x(a), y(b), z(c) {}
    __host__ __device__ float dot(const Vec3& o) const { return x * o.x + y * o.y + z * o.z; }
    static int made;
};

class Body
{
  private:
    Vec3 pos;
    Vec3 vel;
  protected:
    int steps = 0;
  public:
    __device__ void step(float dt) {
        pos.x += dt * vel.x; pos.y += dt * vel.y; pos.z += dt * vel.z;
        if (dt > 0.f) { steps++; }
    }
    float mass;
    __device__ float energy() const { return 0.5f * mass * vel.dot(vel); }
    static constexpr int kind = 3;
    typedef float scalar_t;
};
"""


def _pre(src: str):
    # the file's classes, as the translator and the workload maker read them (headers.with_aggregates)
    return with_aggregates(find_kernels(src, "t.cu").preamble, src)


def test_access_sections_and_inline_methods_are_not_fields():
    pre = _pre(CLASSES + "__global__ void k(Body* b) {}\n")
    v = struct_layout("Vec3", pre)
    assert v.dtype.names == ("x", "y", "z") and v.dtype.itemsize == 12
    b = struct_layout("Body", pre)
    # `steps` comes after a protected: section, `mass` after a method defined in the body
    assert b.dtype.names == ("pos", "vel", "steps", "mass")
    assert [b.dtype.fields[n][1] for n in b.dtype.names] == [0, 12, 24, 28]
    assert b.dtype.itemsize == 32
    assert by_value_problem("Body", pre) is None


def test_layout_of_a_class_matches_the_compilers_offsetof():
    # the simulator compiles the CUDA as C++: sizeof/offsetof there are the ground truth
    # (the probe is a friend, to take offsetof of private members; a friend declaration is no field either)
    src = CLASSES.replace("typedef float scalar_t;", "typedef float scalar_t;\n    friend __global__ void probe(long long*);") + """
#include <stddef.h>
class Packed {
    char tag;
    friend __global__ void probe(long long* out);
  public:
    __device__ Packed() {}
    double weights[2];
    short n, m = 4;
    __device__ int total() const { return n + m; }
};
__global__ void probe(long long* out) {
    out[0] = sizeof(Body); out[1] = offsetof(Body, vel); out[2] = offsetof(Body, steps);
    out[3] = offsetof(Body, mass); out[4] = sizeof(Packed); out[5] = offsetof(Packed, weights);
    out[6] = offsetof(Packed, n); out[7] = offsetof(Packed, m);
}
"""
    got = run_cuda_source(src, "probe", (1, 1, 1), (1, 1, 1), {"out": np.zeros(8, np.int64)},
                          filename="probe.cu")["out"]
    pre = _pre(src)
    b = struct_layout("Body", pre)
    p = struct_layout("Packed", pre, keep_doubles=True)
    mine = [b.dtype.itemsize, b.dtype.fields["vel"][1], b.dtype.fields["steps"][1], b.dtype.fields["mass"][1],
            p.dtype.itemsize, p.dtype.fields["weights"][1], p.dtype.fields["n"][1], p.dtype.fields["m"][1]]
    assert list(got) == mine


def test_a_class_with_virtual_functions_is_named_not_laid_out():
    pre = _pre("class Shape { public: float w; __device__ virtual float area() const { return w; } };\n"
               "__global__ void k(Shape* s, float* y) { y[0] = s->w; }\n")
    with pytest.raises(LayoutError, match="virtual"):
        struct_layout("Shape", pre)


def _one(tmp_path: Path, name: str, text: str, kernel: str | None = None):
    f = tmp_path / name
    f.write_text(text)
    r = port_file(f, write=False)
    return next(v for v in r.kernels if kernel is None or v.kernel == kernel)


def test_kernel_over_a_buffer_of_class_objects_is_verified(tmp_path):
    # no program: the workload is made from the layout (the class's objects as bytes), then both ports must leave
    # the same objects as the original
    v = _one(tmp_path, "bodies.cu", CLASSES + """
__global__ void advance(float dt, Body* bodies, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) bodies[i].step(dt);
}
""")
    assert "layout is not known" not in (v.reason or "")
    assert v.status == "verified", v.reason


def test_class_object_passed_by_value_is_verified(tmp_path):
    # by value: launch() passes the object's bytes (its methods' `*` and `&` are no pointer fields), captured from the
    # program's own run
    v = _one(tmp_path, "bodies_main.cu", CLASSES + """
#include <stdio.h>
int Vec3::made = 0;
__global__ void shift(Body origin, Body* bodies, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { bodies[i] = origin; bodies[i].step(0.125f * i); }
}
int main() {
    const int n = 100;
    Body* d;
    cudaMallocManaged(&d, n * sizeof(Body));
    Body origin;
    float* raw = (float*)&origin;
    for (int i = 0; i < (int)(sizeof(Body) / sizeof(float)); i++) raw[i] = 0.25f * (i + 1);
    shift<<<(n + 63) / 64, 64>>>(origin, d, n);
    cudaDeviceSynchronize();
    printf("%f\\n", ((float*)d)[0]);
    cudaFree(d);
    return 0;
}
""")
    assert v.status == "verified", v.reason
