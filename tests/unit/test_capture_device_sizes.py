"""Why a kernel has no launch to be checked on, in the verdict: a launch too big to record whose sizes come from a
constant the kernel's own code reads (`#define WIDTH 1024` in its index arithmetic) names that constant (no smaller
run can change it without changing the kernel); a kernel the program never reached because the run ran out of time
in an earlier launch says so. The programs are written for these tests and run on the CPU runtime for real."""
from __future__ import annotations

import shutil

import pytest

from ksearch_engine.portfile import _why_no_launch
from ksearch_engine.sim.capture import capture_program
from tests.sources import line_of, write

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

TILED = """
#define WIDTH 1024
__global__ void double_rows(float* out, const float* in) {
  size_t row = (size_t)blockIdx.x * WIDTH;
  for (int t = threadIdx.x; t < WIDTH; t += blockDim.x) out[row + t] = 2.0f * in[row + t];
}
int main() {
  size_t n = (size_t)WIDTH * WIDTH;
  float *d_in, *d_out;
  cudaMalloc(&d_in, n * sizeof(float));
  cudaMalloc(&d_out, n * sizeof(float));
  cudaMemset(d_in, 0, n * sizeof(float));
  double_rows<<<WIDTH, 64>>>(d_out, d_in);
  cudaDeviceSynchronize();
  return 0;
}
"""


def test_the_verdict_names_the_device_constants_a_too_big_launch_comes_from(tmp_path):
    src = write(tmp_path, "tiled.cu", TILED)
    cap = capture_program(src, timeout_s=30, byte_budget=1 << 20)
    assert cap.launches and cap.launches[0].too_large
    assert not any(n.kind == "scaled" for n in cap.notes)
    why = _why_no_launch(cap, "double_rows")
    assert f"WIDTH = 1024 (tiled.cu:{line_of(TILED, '#define WIDTH')})" in why, why
    assert "device code reads" in why and "Traceback" not in why


SLOW_FIRST = """
__global__ void churn(float* o, int n, int rounds) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) for (int r = 0; r < rounds; r++) o[i] = o[i] * 0.999f + 1.0f;
}
__global__ void finish(float* o) { o[threadIdx.x] = 1.0f; }
int main() {
  float* d;
  int n = 128;
  cudaMalloc(&d, n * sizeof(float));
  churn<<<1, n>>>(d, n, 1 << 30);
  finish<<<1, 32>>>(d);
  cudaDeviceSynchronize();
  return 0;
}
"""


def test_a_kernel_after_a_launch_that_ran_out_of_time_says_the_program_stopped_before_it(tmp_path):
    src = write(tmp_path, "slow.cu", SLOW_FIRST)
    cap = capture_program(src, timeout_s=2)
    assert cap.status == "failed" and [ln.kernel for ln in cap.launches] == ["churn"]
    why = _why_no_launch(cap, "finish")
    assert why.startswith("its program stopped before launching it (") and "churn" in why, why
