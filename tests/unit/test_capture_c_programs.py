"""Programs whose main() is C: a main.c (built by gcc in the program's Makefile) calling a wrapper .cu in a
subfolder that #includes the kernel, with helpers written in C that C++ rejects (a K&R definition, a function
used before it is declared). The kernel file alone is ported: its program is found, linked as its Makefile would
(the .c units compiled as C), run on the CPU, and the port verified on the captured launch. The kernel writes its
output through a local pointer assigned after its declaration, into structs holding doubles.

Everything here is written for these tests and runs on the CPU runtime for real."""

from __future__ import annotations

import shutil

import pytest

from ksearch_engine.portfile import find_program_and_sources, host_functions, port_file
from tests.sources import write

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

COMMON_H = """
typedef struct { double v, x, y, z; } VEC4;
#ifdef __cplusplus
extern "C" {
#endif
void run_boxes(VEC4* in, VEC4* out, int n);
float scale_of();
#ifdef __cplusplus
}
#endif
"""

MAIN_C = """
#include <stdio.h>
#include <stdlib.h>
#include "common.h"

float half(x)
float x;
{
  return x / 2;
}

int
main(int argc, char** argv)
{
  int n = 200, i;
  VEC4* in = (VEC4*)malloc(n * sizeof(VEC4));
  VEC4* out = (VEC4*)malloc(n * sizeof(VEC4));
  for (i = 0; i < n; i++) { in[i].v = i * 0.1; in[i].x = 1.0 + i; in[i].y = half(3.0); in[i].z = -i; }
  run_boxes(in, out, n);
  printf("%f\\n", out[n - 1].v + report(n));
  return 0;
}

int report(n)
int n;
{
  return n > 0;
}
"""

WRAPPER_CU = """
#include "../common.h"
#include "./box_kernel.cu"

#ifdef __cplusplus
extern "C" {
#endif
void
run_boxes(VEC4* in, VEC4* out, int n)
{
  VEC4 *d_in, *d_out;
  cudaMalloc((void**)&d_in, n * sizeof(VEC4));
  cudaMalloc((void**)&d_out, n * sizeof(VEC4));
  cudaMemcpy(d_in, in, n * sizeof(VEC4), cudaMemcpyHostToDevice);
  cudaMemset(d_out, 0, n * sizeof(VEC4));
  box_kernel<<<(n + 63) / 64, 64>>>(d_in, d_out, n);
  cudaMemcpy(out, d_out, n * sizeof(VEC4), cudaMemcpyDeviceToHost);
  cudaFree(d_in); cudaFree(d_out);
}
#ifdef __cplusplus
}
#endif
"""

KERNEL_CU = """
__global__ void box_kernel(VEC4* d_in, VEC4* d_out, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  VEC4* o;
  VEC4* a = &d_in[0];
  if (i < n) {
    o = &d_out[i];
    o->v = a[i].v * a[i].x + a[i].y;
    o->x = a[i].z * 0.5;
  }
}
"""


def _program(tmp_path):
    write(tmp_path, "Makefile", "boxes: main.o kernel/wrapper.o\n\tgcc main.o kernel/wrapper.o -lcudart -o boxes\n")
    write(tmp_path, "common.h", COMMON_H)
    write(tmp_path, "main.c", MAIN_C)
    write(tmp_path, "kernel/wrapper.cu", WRAPPER_CU)
    return write(tmp_path, "kernel/box_kernel.cu", KERNEL_CU)


def test_functions_inside_extern_c_blocks_and_namespaces_are_top_level():
    text = 'extern "C" {\nvoid a(int n)\n{\n}\n}\nnamespace dw {\nint b(int* p) { return 0; }\n}\n' \
           "void c() { if (1) { } }\n"
    assert host_functions(text) == ["a", "b", "c"]


def test_a_kernel_file_whose_program_has_a_c_main_is_found(tmp_path):
    kernel = _program(tmp_path)
    prog, sources = find_program_and_sources(kernel)
    assert prog == tmp_path / "main.c"
    assert tmp_path / "kernel" / "wrapper.cu" in sources


def test_c_units_are_compiled_as_c_and_the_port_is_checked_on_the_captured_launch(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    kernel = _program(tmp_path)
    report = port_file(kernel, capture_timeout=120, write=False)
    assert report.capture is not None and report.capture.status == "ok", report.capture
    (v,) = report.kernels
    assert v.workload == "captured", v
    assert v.status == "verified", v.reason
    # the output written through `o`, a pointer assigned after its declaration, is an output of the port
    assert not any("'d_out' is not const but never written" in n for n in v.notes), v.notes


def test_siblings_defining_what_the_link_misses_are_found_past_comments_and_for_tables(tmp_path):
    from ksearch_engine.sim.capture import capture_program

    write(tmp_path, "table.cpp", "extern const float kWeights[4];   /* weights of the stencil */\n"
                                 "const float kWeights[4] = {0.5f, 0.25f, 0.125f, 0.125f};\n")
    write(tmp_path, "helpers.c", """
        #include <stdlib.h>
        float* make_input(int n)   /* out: [n] */
        {
          float* h = (float*)malloc(n * sizeof(float));
          int i;
          for (i = 0; i < n; i++) h[i] = (float)i;
          return h;
        }
    """)
    src = write(tmp_path, "main.cu", """
        extern const float kWeights[4];
        extern "C" float* make_input(int n);
        __global__ void weigh(float* o, const float* x, float w, int n) {
          int i = blockIdx.x * blockDim.x + threadIdx.x;
          if (i < n) o[i] = w * x[i];
        }
        int main() {
          int n = 128;
          float* h = make_input(n);
          float *x, *o;
          cudaMalloc(&x, n * sizeof(float));
          cudaMalloc(&o, n * sizeof(float));
          cudaMemcpy(x, h, n * sizeof(float), cudaMemcpyHostToDevice);
          weigh<<<2, 64>>>(o, x, kWeights[1], n);
          return 0;
        }
    """)
    cap = capture_program(src, timeout_s=60)
    assert cap.status == "ok", cap.error
    (ln,) = cap.launches
    assert [a.value for a in ln.args if a.kind == "scalar"] == [0.25, 128]
    assert any("linked with" in n.message and "helpers.c" in n.message and "table.cpp" in n.message
               for n in cap.notes), [n.message for n in cap.notes]


def test_c_that_calls_the_cuda_runtime_and_is_no_cpp_gets_a_message_without_internals(tmp_path):
    from ksearch_engine.sim.capture import capture_program

    write(tmp_path, "kern.cu", """
        __global__ void zero(float* o) { o[threadIdx.x] = 0.0f; }
        extern "C" void run_zero(float* d) { zero<<<1, 32>>>(d); }
    """)
    src = write(tmp_path, "main.c", """
        #include <stdio.h>
        void run_zero(float* d);
        int main(void) {
          float* d;
          char* name = "out.txt";
          cudaMalloc((void**)&d, 32 * sizeof(float));
          run_zero(d);
          fputs("done", name);   /* C warns; C++ refuses */
          return 0;
        }
    """)
    cap = capture_program(src, timeout_s=60, sources=[tmp_path / "kern.cu"])
    assert cap.status == "failed"
    assert cap.error.startswith("main.c:9:") and "main.c is C and calls the CUDA runtime" in cap.error, cap.error
    assert "ksim" not in cap.error and "/usr/include" not in cap.error and "In file included" not in cap.error


def test_a_captured_program_gets_its_file_size_and_core_limits_after_start():
    """The capture starts the program with no Python between fork and exec (no preexec_fn: a forked child running
    other libraries' fork handlers can abort) and sets its limits on the started process."""
    import subprocess as sp
    from ksearch_engine.sim.capture import _limit
    proc = sp.Popen(["sleep", "5"], start_new_session=True)
    try:
        _limit(proc.pid, 12345 << 10)
        limits = open(f"/proc/{proc.pid}/limits").read()
        fsize = next(ln for ln in limits.splitlines() if ln.startswith("Max file size")).split()
        core = next(ln for ln in limits.splitlines() if ln.startswith("Max core file size")).split()
        assert fsize[3] == fsize[4] == str(12345 << 10) and core[4] == core[5] == "0"
    finally:
        proc.kill()
        proc.wait()
