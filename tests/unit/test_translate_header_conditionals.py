"""Issue 13 (llm.c's common.h, cuda-samples' realtype.h): typedefs and constants a local header declares under
#if/#ifdef/#else reach both ports, decided as nvcc decides them from the macros known at the #include."""
from __future__ import annotations

import textwrap
from pathlib import Path

from ksearch_engine.portfile import port_file
from ksearch_engine.translate.headers import header_preamble


def _write(d: Path, name: str, text: str) -> Path:
    p = d / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text).lstrip())
    return p


PREC_H = """
    #ifndef PREC_H
    #define PREC_H
    #include "width.h"
    #if defined(USE_WIDE_TYPE)
    typedef double elem_t;
    #else
    typedef float elem_t;
    #endif
    #ifdef HAVE_LANES
    #define LANES (WIDTH * 2)
    #else
    #define LANES 1
    #endif
    #endif
"""
WIDTH_H = """
    #pragma once
    #define HAVE_LANES
    #define WIDTH 4
"""


def test_header_conditionals_are_decided_by_the_macros_known_at_the_include(tmp_path):
    _write(tmp_path, "prec.h", PREC_H)
    _write(tmp_path, "width.h", WIDTH_H)
    plain = header_preamble('#include "prec.h"\n', [str(tmp_path)])
    assert "typedef float elem_t;" in plain and "typedef double elem_t;" not in plain
    assert "#define LANES (WIDTH * 2)" in plain   # HAVE_LANES comes from the header prec.h includes
    wide = header_preamble('#define USE_WIDE_TYPE\n#include "prec.h"\n', [str(tmp_path)])
    assert "typedef double elem_t;" in wide and "typedef float elem_t;" not in wide
    # a condition on what a compiler or a -D flag may set stays undecided: neither branch is taken for a fact
    _write(tmp_path, "arch.h", "#ifdef __CUDA_ARCH__\ntypedef float acc_t;\n#else\ntypedef double acc_t;\n#endif\n")
    assert not [e for e in header_preamble('#include "arch.h"\n', [str(tmp_path)]) if "acc_t" in e]


def test_a_kernel_taking_a_conditionally_typedefd_pointer_ports_and_verifies(tmp_path):
    _write(tmp_path, "prec.h", PREC_H)
    _write(tmp_path, "width.h", WIDTH_H)
    src = _write(tmp_path, "k.cu", """
        #include <cstdio>
        #include <cstdlib>
        #include "prec.h"
        __global__ void scale(elem_t *x, const elem_t *y, int n) {
          int i = blockIdx.x * blockDim.x + threadIdx.x;
          if (i < n) x[i] = y[i] * (elem_t)LANES + x[i];
        }
        int main() {
          const int n = 256;
          elem_t *h = (elem_t *)malloc(n * sizeof(elem_t)), *dx, *dy;
          for (int i = 0; i < n; i++) h[i] = (elem_t)(i % 5);
          cudaMalloc(&dx, n * sizeof(elem_t)); cudaMalloc(&dy, n * sizeof(elem_t));
          cudaMemcpy(dx, h, n * sizeof(elem_t), cudaMemcpyHostToDevice);
          cudaMemcpy(dy, h, n * sizeof(elem_t), cudaMemcpyHostToDevice);
          scale<<<n / 64, 64>>>(dx, dy, n);
          cudaMemcpy(h, dx, n * sizeof(elem_t), cudaMemcpyDeviceToHost);
          printf("%f\\n", (double)h[3]);
          return 0;
        }
    """)
    report = port_file(src, write=False)
    v = {k.kernel: k for k in report.kernels}["scale"]
    assert v.status == "verified", v.reason
    assert "typedef float elem_t;" in v.module_text and "typedef double elem_t" not in v.module_text


def test_a_helper_defined_once_per_branch_is_ported_in_the_branch_nvcc_takes(tmp_path):
    """binomialOptions: `#ifndef DOUBLE_PRECISION` float helper `#else` double helper: the Metal port computes
    doubles as float, so carrying both branches defined the helper twice."""
    _write(tmp_path, "prec.h", PREC_H)
    _write(tmp_path, "width.h", WIDTH_H)
    src = _write(tmp_path, "k.cu", """
        #include <cstdio>
        #include <cstdlib>
        #include "prec.h"
        #ifndef USE_WIDE_TYPE
        __device__ inline float payoff(float s, int i) { return fmaxf(s - (float)i, 0.0f); }
        #else
        __device__ inline double payoff(double s, int i) { return fmax(s - (double)i, 0.0); }
        #endif
        __global__ void pay(elem_t *x, int n) {
          int i = blockIdx.x * blockDim.x + threadIdx.x;
          if (i < n) x[i] = payoff(x[i], i % 3);
        }
        int main() {
          const int n = 128;
          elem_t *h = (elem_t *)malloc(n * sizeof(elem_t)), *d;
          for (int i = 0; i < n; i++) h[i] = (elem_t)(i % 4);
          cudaMalloc(&d, n * sizeof(elem_t));
          cudaMemcpy(d, h, n * sizeof(elem_t), cudaMemcpyHostToDevice);
          pay<<<n / 32, 32>>>(d, n);
          cudaMemcpy(h, d, n * sizeof(elem_t), cudaMemcpyDeviceToHost);
          printf("%f\\n", (double)h[5]);
          return 0;
        }
    """)
    report = port_file(src, write=False)
    v = {k.kernel: k for k in report.kernels}["pay"]
    assert v.status == "verified", v.reason
    metal = v.module_text.split("CUDA_HEADER")[0]
    assert metal.count("payoff(") >= 2 and "double payoff" not in metal


def test_a_guarded_header_keeps_its_defines_also_when_the_program_included_it_first(tmp_path):
    """An include guard is no conditional to decide away: the header's #defines reach the ports whether the kernel
    file is read alone or after a program that included the same header (its guard then already defined)."""
    from ksearch_engine.translate.headers import header_preamble
    (tmp_path / "sizes.h").write_text("#ifndef SIZES_H\n#define SIZES_H\n#define TILE 16\n#define RATE 0.5f\n"
                                      "typedef struct { int n; float *v; } Vec;\n#endif\n")
    for text in ('#include "sizes.h"\n', '#include "sizes.h"\n#include "sizes.h"\n',
                 '#define SIZES_H\n#include "sizes.h"\n'):
        entries = header_preamble(text, [str(tmp_path)])
        assert "#define TILE 16" in entries and "#define RATE 0.5f" in entries, (text, entries)
        assert not any(e.startswith("#define SIZES_H") for e in entries)
