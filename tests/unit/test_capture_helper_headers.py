"""The CUDA samples' helper headers (helper_cuda.h, helper_functions.h, helper_math.h, ...) that a program includes
without shipping: the capture's stand-ins (sim/host_helpers.py) are used where the include path has none, so the
program runs and its kernels are captured; a real header on the include path keeps winning; a helper name the
stand-ins lack ends the capture with one line naming it.

Every program here is written for these tests."""

from __future__ import annotations

import shutil

import pytest

from ksearch_engine.sim.capture import capture_program
from tests.sources import line_of, write

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


PROG = """
#include <stdio.h>
#include <stdlib.h>
#include <helper_cuda.h>
#include <helper_functions.h>
#include <helper_math.h>

__global__ void axpb(const float* x, float* y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + 1.0f;
}

int main(int argc, char** argv) {
  int dev = findCudaDevice(argc, (const char**)argv);
  int n = getCmdLineArgumentInt(argc, (const char**)argv, "n");
  if (n <= 0) n = 300;
  if (checkCmdLineFlag(argc, (const char**)argv, "help")) return 0;
  float scale = getCmdLineArgumentFloat(argc, (const char**)argv, "scale");
  if (scale == 0.0f) scale = 2.0f;
  char* data = sdkFindFilePath("no_such_input.dat", argv[0]);
  if (data != NULL) return 3;
  float3 v = make_float3(make_float4(1.0f, 2.0f, 2.0f, 7.0f));
  if (fabsf(length(v) - 3.0f) > 1e-5f || dot(v, v) != 9.0f || length(cross(v, v)) != 0.0f ||
      fabsf(length(normalize(v) * 2.0f + make_float3(0.0f)) - 2.0f) > 1e-5f) return 4;
  if (_ConvertSMVer2Cores(8, 0) != 64 || MAX(3, 4) != 4 || MIN(3, 4) != 3) return 5;
  printf("device %d (%s), n %d\\n", dev, _ConvertSMVer2ArchName(9, 0), n);
  float* h = (float*)malloc(n * sizeof(float));
  for (int i = 0; i < n; i++) h[i] = 0.25f * (i % 13);
  float *x, *y;
  checkCudaErrors(cudaMalloc(&x, n * sizeof(float)));
  checkCudaErrors(cudaMalloc(&y, n * sizeof(float)));
  checkCudaErrors(cudaMemcpy(x, h, n * sizeof(float), cudaMemcpyHostToDevice));
  StopWatchInterface* timer = NULL;
  sdkCreateTimer(&timer);
  sdkStartTimer(&timer);
  axpb<<<(n + 127) / 128, 128>>>(x, y, scale, n);
  getLastCudaError("axpb failed");
  checkCudaErrors(cudaDeviceSynchronize());
  sdkStopTimer(&timer);
  if (sdkGetTimerValue(&timer) < 0.0f || sdkGetAverageTimerValue(&timer) < 0.0f) return 6;
  sdkResetTimer(&timer);
  sdkDeleteTimer(&timer);
  checkCudaErrors(cudaMemcpy(h, y, n * sizeof(float), cudaMemcpyDeviceToHost));
  checkCudaErrors(cudaFree(x));
  checkCudaErrors(cudaFree(y));
  free(h);
  return 0;
}
"""


def test_helper_headers_found_nowhere_are_stood_in_and_the_kernel_is_captured(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "prog/axpb.cu", PROG)
    cap = capture_program(src, argv=["-n=200", "--scale=3.5"])
    assert cap.error is None, cap.error
    (launch,) = cap.launches
    assert launch.kernel == "axpb" and launch.grid[0] == 2
    args = {a.name: a for a in launch.args}
    assert args["n"].value == 200 and args["a"].value == 3.5   # -name=value read by the stand-in
    used = [n.message for n in cap.notes if n.kind == "include"]
    assert any(m.startswith("helper_cuda.h not found: the capture's stand-in") for m in used), used


def test_port_file_verifies_the_kernel_of_a_program_using_helper_headers(tmp_path, monkeypatch):
    from ksearch_engine.portfile import port_file

    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "prog/axpb.cu", PROG)
    res = {v.kernel: v for v in port_file(src, write=False).kernels}
    assert set(res) == {"axpb"}
    assert (res["axpb"].status, res["axpb"].workload) == ("verified", "captured"), res["axpb"].reason


REAL = """
#include <helper_cuda.h>
#include <helper_functions.h>
__global__ void fill(float* y, float v, int n) { int i = threadIdx.x; if (i < n) y[i] = v; }
int main(int argc, char** argv) {
  float* y;
  checkCudaErrors(cudaMalloc(&y, 64 * sizeof(float)));
  StopWatchInterface* t = NULL;
  sdkCreateTimer(&t);
  fill<<<1, 64>>>(y, (float)REAL_HELPER_MARKER, 64);
  sdkDeleteTimer(&t);
  return 0;
}
"""


def test_a_real_helper_header_on_the_include_path_wins_over_the_stand_in(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    inc = tmp_path / "sdk_common"
    write(inc, "helper_cuda.h", """
        #pragma once
        #define REAL_HELPER_MARKER 42
        #define checkCudaErrors(x) (x)
        """)
    src = write(tmp_path, "prog/real.cu", REAL)
    cap = capture_program(src, include_dirs=[inc])
    assert cap.error is None, cap.error
    (launch,) = cap.launches
    assert {a.name: a.value for a in launch.args}["v"] == 42.0   # the real header's macro
    stood_in = [n.message.split()[0] for n in cap.notes if "capture's stand-in" in n.message]
    assert stood_in == ["helper_functions.h"], stood_in       # only the header found nowhere


MISSING = """
#include <helper_functions.h>
__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }
int main(int argc, char** argv) {
  float* y;
  cudaMalloc(&y, 32 * sizeof(float));
  k<<<1, 32>>>(y);
  sdkDumpBin(y, 32 * sizeof(float), "y.bin");
  return 0;
}
"""


def test_a_helper_name_the_stand_ins_lack_ends_the_capture_with_one_line_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KSEARCH_CAPTURE_CACHE", str(tmp_path / "cache"))
    src = write(tmp_path, "prog/missing.cu", MISSING)
    cap = capture_program(src)
    assert cap.error is not None and "\n" not in cap.error
    assert f"missing.cu:{line_of(MISSING, 'sdkDumpBin')}: sdkDumpBin is not declared" in cap.error, cap.error
    assert "helper_functions.h" in cap.error and "include_dirs" in cap.error, cap.error
