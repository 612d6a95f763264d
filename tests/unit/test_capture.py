"""Launch capture (sim/capture.py): small CUDA programs, written for these tests, run on the CPU runtime.

Each test checks what was recorded (geometry, scalars, buffer contents) against what the program computes."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from ksearch_engine.sim.capture import capture_program
from tests.sources import line_of, write

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


SAXPY = """
#include <cstdio>
#include <cuda_runtime.h>
__global__ void saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
int main() {
  const int n = 1000;
  float hx[n], hy[n];
  for (int i = 0; i < n; i++) { hx[i] = 0.5f * i; hy[i] = 1.0f; }
  float *dx, *dy;
  cudaMalloc(&dx, n * sizeof(float));
  cudaMalloc((void**)&dy, n * sizeof(float));
  cudaMemcpy(dx, hx, n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(dy, hy, n * sizeof(float), cudaMemcpyHostToDevice);
  saxpy<<<(n + 255) / 256, 256>>>(n, 3.0f, dx, dy);
  cudaMemcpy(hy, dy, n * sizeof(float), cudaMemcpyDeviceToHost);
  printf("y[10]=%.1f\\n", hy[10]);
  return 0;
}
"""


def test_saxpy_records_geometry_scalars_and_contents(tmp_path):
    cap = capture_program(write(tmp_path, "saxpy.cu", SAXPY), workdir=tmp_path / "cap")
    assert cap.status == "ok", cap.error
    assert "y[10]=16.0" in cap.stdout_tail
    (ln,) = cap.launches
    assert (ln.kernel, ln.grid, ln.block, ln.line, ln.file) == ("saxpy", (4, 1, 1), (256, 1, 1), line_of(SAXPY, "saxpy<<<"), "saxpy.cu")
    n, a, x, y = ln.args
    assert (n.name, n.kind, n.value) == ("n", "scalar", 1000)
    assert (a.kind, a.value) == ("scalar", 3.0)
    assert (x.kind, x.dtype, x.nbytes, x.written, x.after) == ("buffer", "float32", 4000, False, None)
    assert y.written and y.buffer != x.buffer and y.ctype == "float*"
    xs = cap.load(x.before)
    np.testing.assert_array_equal(xs, 0.5 * np.arange(1000, dtype=np.float32))
    np.testing.assert_array_equal(cap.load(y.before), np.ones(1000, np.float32))
    np.testing.assert_allclose(cap.load(y.after), 3.0 * xs + 1.0)
    assert cap.launch_counts == {"saxpy": 1}
    assert (tmp_path / "cap" / "capture.json").exists()


INPLACE = """
#include <cstdio>
__global__ void bump(int* a, int n, int by) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] += by;
}
int main() {
  int n = 100, *d;
  cudaMalloc(&d, n * sizeof(int));
  cudaMemset(d, 0, n * sizeof(int));
  for (int r = 0; r < 7; r++) bump<<<2, 64>>>(d, n, 1);
  bump<<<4, 32>>>(d, n, 10);
  int h[100];
  cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
  printf("%d\\n", h[99]);
}
"""


def test_in_place_kernel_and_the_per_kernel_cap(tmp_path):
    cap = capture_program(write(tmp_path, "inplace.cu", INPLACE), max_per_kernel=3)
    assert cap.status == "ok", cap.error
    assert cap.stdout_tail.strip() == "17"
    assert cap.launch_counts == {"bump": 8}
    # the first two launches, then the launch with a new geometry; the repeats in between only run
    assert [ln.index for ln in cap.launches] == [0, 1, 7]
    for ln in cap.launches:
        a = ln.args[0]
        assert a.written
        before, after = cap.load(a.before), cap.load(a.after)
        assert a.dtype == "int32" and before.shape == (100,)
        np.testing.assert_array_equal(after, before + ln.args[2].value)
    assert cap.load(cap.launches[2].args[0].before)[0] == 7
    assert cap.launches[2].grid == (4, 1, 1)


TEMPLATED = """
#include <cstdio>
#include <cstdlib>
template <typename T, int BLOCK>
__global__ void block_sum(const T* __restrict__ in, T* out, int n, T s) {
  __shared__ T buf[BLOCK];
  int i = blockIdx.x * BLOCK + threadIdx.x;
  buf[threadIdx.x] = i < n ? in[i] * s : T(0);
  __syncthreads();
  for (int o = BLOCK / 2; o > 0; o /= 2) {
    if (threadIdx.x < o) buf[threadIdx.x] += buf[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = buf[0];
}
int main() {
  int n = 300;
  float *din, *dout;
  cudaMalloc(&din, n * sizeof(float));
  cudaMalloc(&dout, 3 * sizeof(float));
  float h[300];
  for (int i = 0; i < n; i++) h[i] = (float)(i % 7);
  cudaMemcpy(din, h, sizeof(h), cudaMemcpyHostToDevice);
  block_sum<float, 128>
      <<<(n + 127) / 128,
         128>>>(din, dout,
                n, 0.5f);
  return 0;
}
"""


def test_templated_kernel_launch_spanning_lines(tmp_path):
    cap = capture_program(write(tmp_path, "tmpl.cu", TEMPLATED))
    assert cap.status == "ok", cap.error
    (ln,) = cap.launches
    assert ln.kernel == "block_sum" and ln.template_args == ["float", "128"] and ln.line == line_of(TEMPLATED, "block_sum<float, 128>")
    assert ln.grid == (3, 1, 1) and ln.block == (128, 1, 1)
    assert [a.name for a in ln.args] == ["in", "out", "n", "s"]
    assert ln.args[3].value == 0.5
    x = cap.load(ln.args[0].before)
    want = [0.5 * x[i:i + 128].sum() for i in (0, 128, 256)]
    np.testing.assert_allclose(cap.load(ln.args[1].after), want)


ARGV = """
#include <cstdio>
#include <cstdlib>
__global__ void fill(float* a, int rows, int cols) {
  int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
  if (c < cols) a[r * cols + c] = r * 1000 + c;
}
static void launch_fill(float* d, int rows, int cols) {
  dim3 block(32), grid((cols + 31) / 32, rows);
  fill<<<grid, block>>>(d, rows, cols);
}
int main(int argc, char** argv) {
  if (argc < 3) { fprintf(stderr, "usage: fill ROWS COLS\\n"); return 1; }
  int rows = atoi(argv[1]), cols = atoi(argv[2]);
  float* d;
  cudaMalloc(&d, rows * cols * sizeof(float));
  launch_fill(d, rows, cols);
  cudaDeviceSynchronize();
  return 0;
}
"""


def test_sizes_from_argv_through_a_host_helper(tmp_path):
    p = write(tmp_path, "fill.cu", ARGV)
    cap = capture_program(p, argv=["5", "70"])
    assert cap.status == "ok", cap.error
    (ln,) = cap.launches
    assert ln.grid == (3, 5, 1) and ln.block == (32, 1, 1) and ln.line == line_of(ARGV, "fill<<<")
    assert [a.value for a in ln.args[1:]] == [5, 70]
    out = cap.load(ln.args[0].after).reshape(5, 70)
    np.testing.assert_array_equal(out, np.arange(5)[:, None] * 1000 + np.arange(70)[None, :])
    # no arguments: the program stops before any launch, and the capture runs it again with sizes it chooses
    # for the two arguments the code converts to numbers, saying so
    chosen = capture_program(p)
    assert chosen.status == "ok" and chosen.argv == ["32", "32"], chosen.error
    assert chosen.launches[0].grid == (1, 32, 1)
    assert any(n.kind == "argv" and "chose the sizes (32, 32)" in n.message for n in chosen.notes)


def test_local_header_in_a_sibling_include_folder(tmp_path):
    write(tmp_path, "proj/include/ops.h", """
        #pragma once
        #define TILE 32
        struct Params { int n; float scale; };
        __device__ inline float sq(float v) { return v * v; }
    """)
    src = write(tmp_path, "proj/src/app.cu", """
        #include "ops.h"
        __constant__ float coef[2];
        __global__ void square(Params p, float* x) {
          int i = blockIdx.x * TILE + threadIdx.x;
          if (i < p.n) x[i] = sq(x[i]) * p.scale + coef[1];
        }
        int main() {
          float h[64], c[2] = {0.f, 0.25f};
          for (int i = 0; i < 64; i++) h[i] = i;
          cudaMemcpyToSymbol(coef, c, sizeof(c));
          float* d;
          cudaMalloc(&d, sizeof(h));
          cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice);
          Params p{64, 2.0f};
          square<<<2, TILE>>>(p, d);
        }
    """)
    cap = capture_program(src)
    assert cap.status == "ok", cap.error
    assert any(n.kind == "include" and "../include/ops.h" in n.message for n in cap.notes)
    (ln,) = cap.launches
    p, x = ln.args
    assert p.kind == "struct" and bytes.fromhex(p.raw_hex) == np.array([64], np.int32).tobytes() + np.array([2.0], np.float32).tobytes()
    np.testing.assert_allclose(cap.load(x.after), np.arange(64) ** 2 * 2.0 + 0.25)
    (sym,) = ln.symbols
    assert sym.name == "coef" and cap.load(sym.before).view(np.float32).tolist() == [0.0, 0.25]
    given = capture_program(src, include_dirs=[tmp_path / "proj/include"])
    assert given.status == "ok" and not any(n.kind == "include" for n in given.notes)


OOB = """
__global__ void shift(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] = x[i + 64];
}
int main() {
  float *x, *y;
  cudaMalloc(&x, 64 * sizeof(float));
  cudaMalloc(&y, 64 * sizeof(float));
  shift<<<1, 64>>>(x, y, 64);
  cudaDeviceSynchronize();
  return 0;
}
"""


def test_out_of_bounds_read_is_reported_with_the_kernel_line(tmp_path):
    cap = capture_program(write(tmp_path, "oob.cu", OOB))
    assert cap.status == "failed"
    (ln,) = cap.launches
    where = f"oob.cu:{line_of(OOB, 'x[i + 64]')}"
    assert ln.sim_error and where in ln.sim_error and "out-of-bounds" in ln.sim_error
    assert cap.error.startswith(where + ":") and "'x'" in cap.error and "past the end" in cap.error


def test_cublas_call_is_stubbed_and_the_program_goes_on(tmp_path):
    src = write(tmp_path, "blas.cu", BLAS := """
        #include <cublas_v2.h>
        #include <cstdio>
        __global__ void twice(float* a, int n) { int i = threadIdx.x; if (i < n) a[i] *= 2; }
        int main() {
          cublasHandle_t h;
          cublasCreate(&h);
          float *x, *y, alpha = 2.f;
          cudaMalloc(&x, 32 * 4);
          cudaMalloc(&y, 32 * 4);
          cublasSaxpy(h, 32, &alpha, x, 1, y, 1);
          twice<<<1, 32>>>(y, 32);
          cublasDestroy(h);
          return 0;
        }
    """)
    cap = capture_program(src)
    assert cap.status == "ok", cap.error
    (note,) = [n for n in cap.notes if n.kind == "stubbed"]
    assert "cublasSaxpy" in note.message and note.line == line_of(BLAS, "cublasSaxpy") and note.file == "blas.cu"
    assert cap.kernels() == ["twice"]


def test_a_gpu_only_feature_is_refused_naming_its_line(tmp_path):
    """What the CPU runtime cannot do (inter-process memory) stops the program at that call, naming it and its
    line; the launches made before it are kept."""
    src = write(tmp_path, "ipc.cu", IPC := """
        __global__ void z(float* o) { o[threadIdx.x] = 0; }
        int main() {
          float* d;
          cudaMalloc(&d, 128);
          z<<<1, 32>>>(d);
          cudaIpcMemHandle_t h;
          cudaIpcGetMemHandle(&h, d);
          z<<<1, 32>>>(d);
        }
    """)
    cap = capture_program(src)
    assert cap.status == "partial" and cap.kernels() == ["z"] and len(cap.launches) == 1
    (note,) = [n for n in cap.notes if n.kind == "gpu_only"]
    line = line_of(IPC, "cudaIpcGetMemHandle(")
    assert "cudaIpcGetMemHandle" in note.message and note.line == line
    assert cap.error.startswith(f"ipc.cu:{line}:")


def test_endless_program_stops_at_the_budget_keeping_launches(tmp_path):
    src = write(tmp_path, "loop.cu", """
        __global__ void step(int* a) { a[threadIdx.x] += threadIdx.x; }
        int main() {
          int* d;
          cudaMalloc(&d, 32 * sizeof(int));
          cudaMemset(d, 0, 32 * sizeof(int));
          for (;;) step<<<1, 32>>>(d);
        }
    """)
    cap = capture_program(src, timeout_s=3)
    assert cap.status == "partial" and "time budget" in cap.error
    assert cap.launch_counts["step"] > 2
    first = cap.launches[0]
    np.testing.assert_array_equal(cap.load(first.args[0].after), np.arange(32))
    assert len([ln for ln in cap.launches if ln.sim_error is None]) == 2


def test_compile_error_and_missing_header_name_the_users_line(tmp_path):
    cap = capture_program(write(tmp_path, "bad.cu", "int main() {\n  int x = ;\n}\n"))
    assert cap.status == "failed" and cap.error.startswith("bad.cu:2:"), cap.error and "\n" not in cap.error
    cap = capture_program(write(tmp_path, "hdr.cu", '#include "nowhere.h"\nint main() {}\n'))
    assert cap.status == "failed" and "nowhere.h" in cap.error and "include_dirs" in cap.error
    # (thrust/sort.h has a stand-in, sim/host_thrust.py: a Thrust header it has not)
    cap = capture_program(write(tmp_path, "thr.cu", "#include <thrust/random.h>\nint main() {}\n"))
    assert cap.status == "failed" and cap.error.startswith("thr.cu:1:") and "Thrust" in cap.error


CG_LABELS = """
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
__global__ void bucketMax(const int* v, int* out, int n) {
  extern int __shared__ scratch[];          // nvcc takes the qualifier after the type
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  scratch[threadIdx.x] = i < n ? v[i] : 0;
  __syncthreads();
  if (i < n) {
    cg::coalesced_group active = cg::coalesced_threads();
    int bucket = scratch[threadIdx.x] % 3;
    auto g = cg::labeled_partition(active, bucket);
    int m = cg::reduce(g, scratch[threadIdx.x], cg::greater<int>());
    out[i] = m * 100 + (int)g.size();
  }
}
int main() {
  int n = 40, h[40];
  for (int i = 0; i < n; i++) h[i] = (i * 7) % 11;
  int *v, *o;
  cudaMalloc(&v, n * 4); cudaMalloc(&o, n * 4);
  cudaMemcpy(v, h, n * 4, cudaMemcpyHostToDevice);
  void* args[] = {&v, &o, &n};
  cudaLaunchKernel((void*)bucketMax, dim3(2), dim3(32), args, 32 * sizeof(int), 0);
  cudaDeviceSynchronize();
  return 0;
}
"""


def test_labeled_partition_reduce_extern_type_shared_and_void_star_launch(tmp_path):
    cap = capture_program(write(tmp_path, "cg.cu", CG_LABELS), workdir=tmp_path / "cap")
    assert cap.status == "ok", cap.error
    (ln,) = cap.launches
    out = next(a for a in ln.args if a.name == "out")
    got = cap.load(out.after)
    h = [(i * 7) % 11 for i in range(40)]
    want = []
    for i in range(40):
        warp = range(0, 32) if i < 32 else range(32, 40)
        same = [h[j] for j in warp if h[j] % 3 == h[i] % 3]
        want.append(max(same) * 100 + len(same))
    assert got.tolist() == want


BUDGET_SHARE = """
#include <cuda_runtime.h>
__global__ void first(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.0f; }
__global__ void second(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }
int main() {
  int n = 4096; float* x;
  cudaMalloc(&x, n * 4); cudaMemset(x, 0, n * 4);
  for (int r = 0; r < 6; r++) first<<<n / 256, 256>>>(x, n + r);   // new scalars: each one worth recording
  second<<<n / 256, 256>>>(x, n);
  cudaDeviceSynchronize();
  return 0;
}
"""


def test_repeats_of_a_recorded_kernel_leave_budget_for_the_next_kernel(tmp_path):
    # 16 KiB buffer: before+after 32 KiB a launch; a 100 KiB budget would be spent by `first` alone
    cap = capture_program(write(tmp_path, "b.cu", BUDGET_SHARE), workdir=tmp_path / "cap", byte_budget=100 << 10,
                          max_per_kernel=6)
    assert cap.status == "ok", cap.error
    sec = [ln for ln in cap.launches if ln.kernel == "second"]
    assert sec and not sec[0].too_large
    assert cap.load(next(a for a in sec[0].args if a.name == "x").after) is not None
    assert 1 <= len([ln for ln in cap.launches if ln.kernel == "first" and not ln.too_large]) < 6


NAN_SCALAR = """
#include <cstdio>
__global__ void blend(float* o, float q, float w, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = (q == q) ? q * i : w * i;   // q is NaN: the other branch
}
int main() {
  float zero = 0.0f, *d;
  cudaMalloc(&d, 64 * sizeof(float));
  blend<<<1, 64>>>(d, zero / zero, 1.0f / zero, 64);
  return 0;
}
"""


def test_non_finite_scalar_arguments_are_recorded_and_the_port_checked_on_them(tmp_path, monkeypatch):
    from ksearch_engine.portfile import port_file
    from ksearch_engine.sim.capture_models import Capture

    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    p = write(tmp_path, "nan_arg.cu", NAN_SCALAR)
    cap = capture_program(p)
    assert cap.status == "ok", cap.error
    q, w = [a.value for a in cap.launches[0].args if a.name in ("q", "w")]
    assert np.isnan(q) and w == np.inf
    again = Capture.model_validate_json((Path(cap.dir) / "capture.json").read_text())   # stored and read back
    assert np.isnan(again.launches[0].args[1].value) and again.launches[0].args[2].value == np.inf
    (v,) = port_file(p, write=False).kernels
    assert v.status == "verified" and v.workload == "captured", v.reason


CLOCK_SEEDED = """
#include <cstdlib>
#include <ctime>
__global__ void copy(const int* s, int* o) { o[threadIdx.x] = s[threadIdx.x]; }
int main() {
  int h[32];
  for (int i = 0; i < 32; i++) h[i] = (int)(time(0) * i % 100003);   // seeded by the clock, as benchmarks do
  int *s, *o;
  cudaMalloc(&s, sizeof h);
  cudaMalloc(&o, sizeof h);
  cudaMemcpy(s, h, sizeof h, cudaMemcpyHostToDevice);
  copy<<<1, 32>>>(s, o);
  return 0;
}
"""


def test_a_clock_seeded_program_records_the_same_launch_on_every_run(tmp_path):
    p = write(tmp_path, "seeded.cu", CLOCK_SEEDED)
    runs = []
    for k in range(2):
        cap = capture_program(p, workdir=tmp_path / f"run{k}")
        assert cap.status == "ok", cap.error
        runs.append(cap.load(cap.launches[0].args[0].before))
        if k == 0:
            import time
            time.sleep(1.1)   # the real clock moves on between the runs
    np.testing.assert_array_equal(runs[0], runs[1])
    assert runs[0][1] == 1700000000 % 100003
