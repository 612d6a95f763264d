"""Class and struct templates (and structs with member functions, constructors, static members, operators) defined
in a kernel's file or its local headers, carried into both ports: llm.c-style training-loop kernels read and write
through a 128-bit packed vector class `template <class T> struct alignas(16) Packed128` of their common.h. The
kernels here are written for this test; both ports are checked against the original in the CPU simulator."""
import numpy as np

from ksearch_engine.source import find_kernels
from ksearch_engine.translate import translate_kernel
from ksearch_engine.translate.check import check_port
from ksearch_engine.translate.headers import header_preamble

VEC_CUH = """#pragma once
template <typename E>
struct alignas(16) Quad {
  static constexpr int lanes = sizeof(int4) / sizeof(E);
  __device__ Quad() = default;
  __device__ explicit Quad(int4 raw) { memcpy(&vals, &raw, sizeof(raw)); }
  __device__ E& operator[](int j) { return vals[j]; }
  __device__ const E& operator[](int j) const { return vals[j]; }
  __device__ int4 raw() const { int4 r; memcpy(&r, &vals, sizeof(r)); return r; }
  E vals[lanes];
};
typedef Quad<float> q4f;
template <typename E> __device__ Quad<E> fetch4(const E* src) { return Quad<E>{__ldcs(reinterpret_cast<const int4*>(src))}; }
template <typename E> __device__ void put4(E* dst, Quad<E> q) { *reinterpret_cast<int4*>(dst) = q.raw(); }
"""

KERNEL = """#include "vec.cuh"
struct Tally {
  float total;
  int seen;
  static const int kBias = 3;
  __device__ Tally() : total(0.0f), seen(0) {}
  __device__ void add(float v) { total += v; seen += 1; }
  __device__ Tally operator+(const Tally& o) const { Tally t; t.total = total + o.total; t.seen = seen + o.seen; return t; }
};
__global__ void affine4(float* y, float* counts, const float* x, float a, int n) {
  extern __shared__ char stage[];
  q4f* tile = reinterpret_cast<q4f*>(stage);
  int base = (blockIdx.x * blockDim.x + threadIdx.x) * q4f::lanes;
  if (base >= n) return;
  tile[threadIdx.x] = fetch4(x + base);
  __syncthreads();
  const q4f in = tile[(threadIdx.x + 1) % blockDim.x];
  q4f res;
  Tally left, right;
  for (int j = 0; j < q4f::lanes; ++j) { res[j] = a * in[j] + (float)j; if (j < 2) left.add(in[j]); else right.add(in[j]); }
  put4(y + base, res);
  Tally both = left + right;
  counts[blockIdx.x * blockDim.x + threadIdx.x] = both.total + both.seen * Tally::kBias;
}
void run(float* y, float* counts, const float* x, int n) {
  affine4<<<n / 4 / 32, 32, 32 * 4 * sizeof(float)>>>(y, counts, x, 1.5f, n);
}
"""


def test_a_packed_vector_class_template_of_a_local_header_ports_and_verifies(tmp_path):
    (tmp_path / "vec.cuh").write_text(VEC_CUH)
    path = tmp_path / "k.cu"
    path.write_text(KERNEL)
    parsed = find_kernels(KERNEL, str(path))   # as portfile reads a program: its local headers' entries first
    parsed.preamble = [e for e in header_preamble(KERNEL, [str(tmp_path)]) if e not in parsed.preamble] + parsed.preamble
    tr = translate_kernel(parsed, "affine4", str(path))
    assert not tr.errors, [e.message for e in tr.errors]
    assert "OUTPUT_NAMES = ['y', 'counts']" in tr.module_text   # put4 writes y: an output, not an input
    header = tr.launch_metal_header
    assert "struct alignas(16) Quad" in header and "__device__" not in header and "memcpy(" not in \
        header.replace("ks_memcpy(", "")
    assert "thread E& operator[]" in header and "static constant constexpr int lanes" in header
    assert "static constant const int kBias" in header and "thread const Tally& o" in header and "reinterpret_cast<threadgroup q4f*>(stage)" in tr.launch_metal_source
    rng = np.random.default_rng(3)
    n, block = 512, 32
    args = {"y": np.zeros(n, np.float32), "counts": np.zeros(n // 4, np.float32),
            "x": rng.standard_normal(n).astype(np.float32), "a": 1.5, "n": n}
    res = check_port(tr.module_text, KERNEL, "affine4", {"args": args, "grid": (n // 4 // block, 1, 1),
                                                         "block": (block, 1, 1), "shared_mem": block * 16,
                                                         "template_args": []},
                     filename=str(path), include_dirs=[str(tmp_path)])
    assert res.original_error is None, res.original_error
    assert res.dialects == {"metal": "passed", "cuda": "passed"}, res.message
